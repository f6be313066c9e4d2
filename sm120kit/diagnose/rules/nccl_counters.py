"""NCCL ``COLL`` traces (``NCCL_DEBUG_SUBSYS=COLL``): the last opCount of each rank per
communicator. Ranks of one communicator whose last opCount differs, with the log ending in a
stall, means the lagging ranks never launched the next collective (what RAS calls MISMATCH).
Works for PyNccl collectives, which torch's watchdog and Flight Recorder cannot see."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext


def check(ctx: RuleContext) -> list[Finding]:
    out: list[Finding] = []
    if not ctx.stalled():
        return out
    for comm, per in ctx.facts.nccl.ops.items():
        if len(per) < 2:
            continue
        counts = {k: v[0] for k, v in per.items()}
        hi = max(counts.values())
        lo = min(counts.values())
        if hi == lo:
            continue
        behind = [k for k, c in counts.items() if c == lo]
        procs = [ctx.facts.procs[k] for k in behind if k in ctx.facts.procs]
        ranks = sorted(p.rank for p in procs if p.rank is not None)
        ev = [per[k][2] for k in behind][:3] + [v[2] for k, v in per.items() if v[0] == hi][:2]
        who = ", ".join(p.label for p in procs) or ", ".join(behind)
        out.append(RULE.finding(
            0.82, f"NCCL communicator {comm}: {who} stopped at opCount {lo:#x} while others "
            f"reached {hi:#x}", ev, ranks=ranks))
    return out


RULE = Rule(
    id="nccl-opcount-desync",
    category="collective-desync",
    needs="NCCL INFO COLL lines ('AllReduce: opCount N ... comm 0x...') of two or more ranks",
    tier="disagreement",
    check=check,
    fix="The lagging rank never launched the next collective: look at what it was doing "
        "instead (its last vLLM lines, its stack from `sm120kit collect`).",
    link="https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting/ras.html",
)
