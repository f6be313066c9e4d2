"""The P2P transport under the first collectives: enqueued and never completed (the torch
watchdog's sequence numbers), or a first forward that never produced a token after NCCL set up
its transports. Part of the ``p2p-transport`` rule (rules/p2p_transport.py)."""

from __future__ import annotations

from sm120kit.diagnose.rules import collective_not_started
from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext


def first_collective(ctx: RuleContext, rule: Rule) -> list[Finding]:
    """The watchdog says the rank *enqueued* one of its first collectives and it never completed
    (``last enqueued 2, last completed 1``): not a missing peer, the transport under it."""
    if collective_not_started.check(ctx):
        return []  # the collective never started on the GPU: work ahead of it, not the transport
    hit = []
    for r, ev, _k in ctx.facts.waits.watchdog:
        if r.last_enqueued is None or r.last_completed is None:
            continue
        seq = r.seq if r.seq is not None else r.last_enqueued
        if seq <= 3 and r.last_enqueued >= seq and r.last_completed < seq:
            hit.append((r, ev))
    if not hit:
        return []
    r, ev = hit[0]
    big = any((x.numel_in or 0) >= 1 << 20 for x, _e in hit) or \
        any((x.numel_in or 0) >= 1 << 20 for x, _e, _k in ctx.facts.waits.watchdog)
    size = " (a large one)" if big else ""
    evs = [e for _x, e in hit[:2]]
    evs += [e for x, e, _k in ctx.facts.waits.watchdog if x.numel_in and e not in evs][:1]
    return [rule.finding(
        0.7 if big else 0.6,
        f"collective {r.seq if r.seq is not None else r.last_enqueued} of the run{size} was "
        f"enqueued (last enqueued {r.last_enqueued}) and never completed (last completed "
        f"{r.last_completed}): the ranks reached it, the data never moved: the P2P/SHM transport "
        "under the first collectives is stuck", evs, tier="disagreement",
        phase="startup" if not ctx.facts.progress.served else "serving", role="cause")]


def first_forward(ctx: RuleContext, rule: Rule) -> list[Finding]:
    """NCCL set up its transports, then the first generation never produced a token (a bar
    stuck at 0 with 0.00 tokens/s) and nothing failed: the first collectives of the first forward
    never completed."""
    lg = ctx.facts
    if lg.progress.zero_progress is None or lg.failures or lg.progress.metrics_lines:
        return []
    ts = sorted({t for v in lg.nccl.transports.values() for t in v})
    if not ts:
        return []
    ev = [lg.progress.zero_progress] + [lg.phases.first_seen[p] for p in ("nccl-init",) if p in lg.phases.first_seen]
    return [rule.finding(
        0.5, f"NCCL connected the ranks ({', '.join(ts)}) but the first forward never produced a "
        "token: the first collectives did not complete (a P2P/PCIe transport stall: ACS/IOMMU "
        "redirect or unsupported peer access)", ev, tier="config", phase="serving",
        role="cause")]
