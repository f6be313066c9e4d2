"""DCP asked for, not engaged: the KV density vLLM reports (``GPU KV cache size`` / ``Available
KV cache memory``) equals the model's DCP-1 density (``sm120kit.models.kv``), so the server
runs with 1/DCP of the context it was planned for and no error says so."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence


def check(ctx: RuleContext) -> list[Finding]:
    kv = ctx.kv
    if kv is None or not kv.not_engaged:
        return []
    ev = [Evidence("kv-cache", 0, line) for line in ctx.facts.kv.lines[-3:]]
    return [RULE.finding(
        0.85, f"decode context parallelism did not engage: {kv.note}; the KV pool holds "
        f"{kv.tokens:,} tokens ({kv.max_concurrency}x at {kv.max_model_len:,})"
        if kv.tokens is not None and kv.max_model_len else
        f"decode context parallelism did not engage: {kv.note}", ev, tier="disagreement")]


RULE = Rule(
    id="dcp-not-engaged",
    category="dcp-not-engaged",
    needs="'Available KV cache memory', 'GPU KV cache size', the requested DCP size (argv / "
          "non-default args) and the model's config.json (--config, model dir or HF cache)",
    tier="disagreement",
    check=check,
    fix="Apply the DCP series in the environment that serves (`sm120kit apply --installed`), keep "
        "--decode-context-parallel-size on the command line, and re-check with `sm120kit doctor "
        "--log LOG`: tokens per GiB must be DCP x the DCP-1 density.",
    link="docs/doctor.md#kv-capacity",
)
