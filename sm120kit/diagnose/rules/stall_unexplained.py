"""A stall that no specific rule explains: say where every rank stopped and what to collect."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence


def check(ctx: RuleContext) -> list[Finding]:
    lg = ctx.facts
    if lg.progress.progressing is not None:
        return []  # waits while startup progress continues are expected, not a stall
    ev: list[Evidence] = []
    if lg.waits.shm_waits and lg.waits.shm_open:
        ev.append(lg.waits.shm_waits[0][1])
        if len(lg.waits.shm_waits) > 1:
            ev.append(lg.waits.shm_waits[-1][1])
    ev += [e for _r, e, _k in lg.waits.watchdog[:2]]
    ev += [e for _m, e, _k in lg.waits.rpc_timeouts[:1]]
    ev += ctx.hits("gloo-timeout")[:1] + ctx.hits("heartbeat")[:1]
    if not ev or _quoted_wait(ctx, len(ev)):
        return []
    ws = ctx.workers()
    where = sorted({p.tracker.stage for p in ws if p.tracker.stage}) or \
        [lg.phases.stage or "an unknown phase (the log names none)"]
    waited = sum(s for s, _e, _k in lg.waits.shm_waits)
    extra = f", {lg.waits.shm_count} shm_broadcast wait(s) (~{waited} s)" if lg.waits.shm_count else ""
    return [RULE.finding(
        0.3, f"the run stalled with ranks in {', '.join(where)}{extra}; the logs alone do not "
        "name a cause", ev[:5], tier="config")]


def _quoted_wait(ctx: RuleContext, n_ev: int) -> bool:
    """One 60-s shm_broadcast message quoted with no phase, no other stall sign and no hang or
    failure in the words around it (a report that loading is slow quotes the message vLLM prints
    while it waits): a minute of waiting, not a stall."""
    lg = ctx.facts
    d = lg.described
    return (lg.waits.shm_count == 1 and n_ev == 1 and lg.phases.stage is None
            and not lg.failures and not d.symptoms and not d.complaints)


RULE = Rule(
    id="stall-unexplained",
    category="unknown",
    needs="shm_broadcast waits, watchdog/RPC/gloo timeouts without a more specific finding",
    tier="config",
    check=check,
    fix="Reproduce under `sm120kit collect -- vllm serve ...` to get every rank's stack, NVML "
        "state, NCCL RAS counts and Flight Recorder dumps; set NCCL_DEBUG=INFO "
        "NCCL_DEBUG_SUBSYS=INIT,COLL for per-rank op counts.",
    link="docs/collect.md",
)
