"""A timed-out collective that never started on the GPU on any rank: the work queued before it
on the same stream (a long or hung kernel, a graph replay) never finished. Every rank reached the
collective, so no rank is missing: this is a device-side hang, not a desync.

Evidence: Flight Recorder entries still ``scheduled`` (enqueued, never started) for the same
sequence number on every dumped rank with ``last_started_collective`` behind it, or watchdog
records whose ranks all agree on the timed-out SeqNum. Seen for real on an H200 (torch 2.11,
NCCL 2.28.9): a single-rank all_reduce queued behind ``torch.cuda._sleep`` timed out with FR
``pg_status`` enqueued 2 / started -1 / completed 1 and the entry state ``scheduled``.
"""

from __future__ import annotations

from typing import Any

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.diagnose.rules.flight_pending import pending
from sm120kit.evidence.logs.analyze import Evidence


def check(ctx: RuleContext) -> list[Finding]:
    if any(p.death or p.exception for p in ctx.workers()):
        return []
    ev: list[Evidence] = []
    ranks: list[int] = []
    b = ctx.bundle
    per, not_joined = pending(b.flight if b is not None else None)
    seqs: set[Any] = set()
    if per and not not_joined:
        first = {r: (ps[0] if ps else None) for r, ps in per.items()}
        if all(p is not None and p.get("state") == "scheduled" for p in first.values()):
            seqs = {p.get("seq") for p in first.values() if p is not None}
            if len(seqs) == 1:
                ranks = sorted(first)
                p0 = next(iter(first.values())) or {}
                ev.append(Evidence("flight/index.json", 0,
                                   f"rank(s) {ranks}: {p0.get('op')} #{p0.get('seq')} of PG "
                                   f"{p0.get('pg')} state 'scheduled' (enqueued, never started)"))
    wd = ctx.facts.waits.watchdog
    wd_seqs = {r.seq for r, _e, _k in wd if r.seq is not None}
    if ev and wd and (wd_seqs <= seqs or not seqs):
        ev += [e for _r, e, _k in wd[:2]]
    if not ev:
        return []
    if b is not None:
        ev += [Evidence(s.source, 0, f"{s.label or s.pid}: {s.frames[0]} ({s.state})")
               for s in b.stacks if s.frames and s.sync][:2]
    return [RULE.finding(
        0.8, f"the timed-out collective #{next(iter(seqs))} never started on the GPU on any rank "
        f"({len(ranks)} of {len(ranks)} dumped): work queued before it on the same stream never "
        "finished (a long or hung kernel), no rank is missing", ev, ranks=ranks)]


RULE = Rule(
    id="collective-not-started",
    category="kernel-hang",
    needs="bundle Flight Recorder dumps (entry state, pg_status) of every rank; watchdog records",
    tier="disagreement",
    check=check,
    fix="Find the kernel before the collective: its stack frame in stacks/, NVML utilization in "
        "nvml.json; A/B with --enforce-eager (graph replay), the other attention backend, or "
        "CUDA_LAUNCH_BLOCKING=1 to surface the kernel; raising the timeout only helps if the "
        "kernel is merely slow (e.g. a first-call JIT/autotune).",
    link="https://pytorch.org/tutorials/prototype/flight_recorder_tutorial.html",
)
