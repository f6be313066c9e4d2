"""The KV cache cannot hold one request at the configured context length.

vLLM sizes the KV pool from what is left after weights, activations, CUDA graphs and (with
speculative decoding) the drafter. ``Available KV cache memory: 0.01 GiB`` followed by "To serve at
least one request with the model max seq len (N) ... is larger than the available KV cache memory"
means the pool is (almost) empty: with MTP + DCP on 4×96 GB the draft model takes the budget.
"""

from __future__ import annotations

import re

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence

_GIB = re.compile(r"Available KV cache memory: (?P<g>-?[\d.]+) ?GiB")


def _available(ctx: RuleContext) -> float | None:
    for e in ctx.hits("kv-available"):
        m = _GIB.search(e.text)
        if m:
            try:
                return float(m.group("g"))
            except ValueError:
                return None
    return None


def check(ctx: RuleContext) -> list[Finding]:
    if ctx.hits("cat:kv-cache-too-small"):
        return []  # the catalogue entry names it; this rule reads the numbers alone
    kv: list[Evidence] = []
    avail = _available(ctx)
    tiny = avail is not None and avail < 0.5
    if not kv and not (tiny and ctx.facts.failures):
        return []
    spec = ctx.config.get("speculative_method") or ctx.config.get("mtp") or ctx.count("spec-config")
    dcp = ctx.dcp()
    why = []
    if avail is not None:
        why.append(f"only {avail} GiB was left for the KV cache")
    if spec:
        why.append("speculative decoding (MTP/draft model) is on: the drafter's weights and KV "
                   "come out of the same budget")
    if dcp > 1:
        why.append(f"DCP={dcp}")
    ev = ctx.hits("kv-available")[:1] + kv[:2]
    return [RULE.finding(
        0.92 if kv else 0.6,
        "the KV cache cannot hold one request at max_model_len" + (f" ({'; '.join(why)})" if why
                                                                   else ""),
        ev, phase="startup", role="cause",
        fix=("Turn speculative decoding off (MTP and this context length do not fit together), or "
             if spec else "") + "lower --max-model-len, raise --gpu-memory-utilization, or add "
        "GPUs / a larger --decode-context-parallel-size (the KV pool is split over DCP ranks).")]


RULE = Rule(
    id="kv-cache-insufficient",
    category="kv-cache-insufficient",
    needs="'Available KV cache memory: X GiB', 'To serve at least one request ... larger than the "
          "available KV cache memory', 'max seq len ... larger than the maximum number of tokens "
          "that can be stored in KV cache', speculative/DCP config",
    tier="dead-rank",
    check=check,
    fix="Lower --max-model-len or free memory for the KV cache.",
    link="https://docs.vllm.ai/en/latest/configuration/conserving_memory.html",
)
