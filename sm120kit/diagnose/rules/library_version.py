"""An NCCL older than 2.27 on an SM120 box whose run failed (versions + GPU + failure: no single
line states it). The library/build mismatches a line states (undefined symbols, missing API
parameters, kernels not built for sm_120, drivers too old, version checks) are catalogue entries
(``catalogue/library.toml``)."""

from __future__ import annotations

import re

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence

_NCCL_V = re.compile(r"\b(2\.\d{1,2}\.\d{1,2})\b")


def check(ctx: RuleContext) -> list[Finding]:
    arch = ctx.hits("cat:nccl-predates-gpu")
    old = _old_nccl(ctx) if not arch else None
    if old is None:
        return []
    nccl, ev = old
    return [RULE.finding(
        0.6, f"NCCL {nccl} on an SM120 (Blackwell RTX) box: NCCL releases before 2.27 have "
        "SM120 failures (hangs and illegal memory accesses on large collectives over PCIe)",
        ev, tier="config", role="cause",
        fix="Upgrade NCCL (pip install -U nvidia-nccl-cu12/cu13, or point VLLM_NCCL_SO_PATH "
            "at a newer libnccl); the installed torch/vLLM may pin an older one.")]


def _ver(v: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in v.split("+")[0].split(".")[:3])
    except ValueError:
        return ()


def _old_nccl(ctx: RuleContext) -> tuple[str, list[Evidence]] | None:
    """The oldest NCCL the input names, when it is older than 2.27 on an SM120 box that failed."""
    cc = str(ctx.versions.get("compute_capability") or "")
    sm120 = cc.startswith("12") or bool(ctx.hits("sm120-gpu"))
    failed = ctx.stalled() or bool(ctx.facts.failures) or bool(ctx.facts.described.complaints)
    if not (sm120 and failed):
        return None
    cands: list[tuple[tuple[int, ...], str, list[Evidence]]] = []
    nccl = ctx.versions.get("nccl")
    if isinstance(nccl, str) and _ver(nccl):
        cands.append((_ver(nccl), nccl, []))
    for e in ctx.hits("nccl-version-mention"):
        for v in _NCCL_V.findall(e.text):
            if _ver(v):
                cands.append((_ver(v), v, [e]))
    old = [c for c in cands if c[0] < (2, 27, 0)]
    if not old:
        return None
    ver, name, ev = min(old, key=lambda c: c[0])
    return name, ev + ctx.hits("sm120-gpu")[:1]


RULE = Rule(
    id="library-version",
    category="library-version",
    needs="the NCCL version, the compute capability / GPU name and a failure or stall",
    tier="dead-rank",
    check=check,
    fix="Upgrade NCCL to 2.27 or later.",
    link="docs/doctor.md",
)
