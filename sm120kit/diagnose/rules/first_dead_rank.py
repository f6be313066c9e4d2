"""The first rank to fail: earliest worker traceback or death; everything later is secondary."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext, field_phase, first_failing
from sm120kit.diagnose.rules.dead_procs import death_only, failed_procs
from sm120kit.evidence.logs.analyze import Evidence
from sm120kit.report import clip_words


def check(ctx: RuleContext) -> list[Finding]:
    lg = ctx.facts
    dead = failed_procs(lg)
    if not dead and not lg.waits.deaths:
        return []
    p = first_failing(ctx) if dead else None
    if p is None or p not in dead:
        cand = [q for q in dead if q.first_error is not None]
        p = min(cand, key=lambda q: q.first_error_order) if cand else None
    ev: list[Evidence] = []
    if p is None:
        return death_only(RULE, lg.waits.deaths[0])
    if p.first_error is not None:
        ev.append(p.first_error)
    if p.exception_ev is not None and p.exception_ev is not p.first_error:
        ev.append(p.exception_ev)
    if p.death is not None:
        ev.append(p.death)
    for _d, e, _k in lg.waits.deaths[:2]:
        if e not in ev:
            ev.append(e)
    what = f"{p.exception[0]}: {p.exception[1]}" if p.exception else (
        "a traceback whose exception line is not in the input" if p.traceback else
        p.first_error.text if p.first_error else "an error")
    stage = p.tracker.stage or lg.phases.stage
    phase = field_phase(stage)
    where = phase or "startup"
    if p.role != "worker" and lg.progress.served:
        where, phase = "serving", "serving"
    etype = p.exception[0].rsplit(".", 1)[-1] if p.exception else ""
    if ctx.says("effect-exception-type", etype) or ctx.says("effect-report", what):
        # a timeout / dead-engine / watchdog exception reports that something else stopped:
        # the failing process is not the one that hung or crashed
        rpc = etype == "TimeoutError" and (ctx.hits("rpc-dequeue") or lg.waits.rpc_timeouts)
        desc = ("the engine's RPC to the workers timed out: a worker stopped answering (it hung "
                "mid-step), it did not crash" if rpc else
                f"{p.label} reports a failure elsewhere ({clip_words(what, 200)}); the cause is earlier in "
                "the log or on another process")
        return [RULE.finding(0.45 if not rpc else 0.6, desc, ev, phase=phase, role="effect",
                             # an RPC that timed out waits on a hung worker: a serving step
                             # when no startup phase says otherwise, never "rank crashed"
                             category=(("serving-stall" if where == "serving" or stage is None
                                        else "unknown") if rpc else None),
                             ranks=[p.rank] if p.rank is not None else [],
                             fix="Find the first failure before it (other processes' tracebacks, "
                                 "the lines above); `sm120kit collect` keeps every process's "
                                 "output and stacks.")]
    # that a rank failed is certain, but "rank crashed" is rarely the cause a thread settles on
    # when no catalogue entry knows the exception (measured on both tuning corpora: 0 of 3 at
    # 0.85, 7 of 24 at 0.6): the claim is weak, weaker still without the exception line
    return [RULE.finding(
        0.55 if p.exception else 0.45, f"{p.label} failed first, during {where}: {clip_words(what, 300)}", ev, phase=phase,
        role="position", ranks=[p.rank] if p.rank is not None else [])]


RULE = Rule(
    id="first-dead-rank",
    category="rank-crashed",
    needs="worker tracebacks, exception lines, 'Worker proc ... died unexpectedly' messages",
    tier="dead-rank",
    check=check,
    fix="Fix the error in this rank's traceback first; timeouts and shm_broadcast waits on the "
        "other ranks are consequences of it.",
    link=None,
)
