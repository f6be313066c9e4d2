"""NCCL's own active diagnostics (NCCL >= 2.31, ``NCCL_RUN_DIAGNOSTICS=1``, which collect sets
for launches it supervises): a failed GPU pair in the ``NCCL DIAG`` report names the broken P2P
path before any collective hangs on it."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence


def check(ctx: RuleContext) -> list[Finding]:
    d = ctx.facts.nccl.diag
    if not d.p2p_failed:
        return []
    ev = [Evidence("nccl-diag", 0, line) for line in d.lines
          if "p2p:" in line and "[OK]" not in line][:6]
    ranks = sorted({int(f["src_rank"]) for f in d.failures if "src_rank" in f})
    return [RULE.finding(0.86, d.summary(), ev, ranks=ranks)]


RULE = Rule(
    id="nccl-diag-p2p",
    category="p2p-transport",
    needs="'NCCL DIAG' lines of NCCL >= 2.31 (NCCL_RUN_DIAGNOSTICS=1): 'p2p: only X/Y ... passed "
          "verification' and the per-pair 'write mismatch|read mismatch|... srcRank= ... path='",
    tier="disagreement",
    check=check,
    fix="The named pair's P2P path is broken: export NCCL_P2P_DISABLE=1 (with "
        "--disable-custom-all-reduce) to route collectives through host memory, and fix "
        "IOMMU/ACS for real P2P (`sm120kit doctor --deep`).",
    link="docs/diagnose.md",
)
