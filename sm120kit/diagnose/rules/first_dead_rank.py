"""The first rank to fail: earliest worker traceback or death; everything later is secondary."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext, first_failing
from sm120kit.evidence.logs.analyze import Evidence

_SECONDARY = ("Watchdog caught", "timed out", "Timeout", "shutting down", "died unexpectedly",
              "EngineDeadError", "One or more workers failed", "failed to start")


def check(ctx: RuleContext) -> list[Finding]:
    lg = ctx.logs
    workers = [p for p in lg.procs.values() if p.role in ("worker", "main")]
    dead = [p for p in workers if p.death is not None or p.exception is not None
            or (p.first_error is not None and p.stalls.get("worker-died"))]
    if not dead and not lg.deaths:
        return []
    p = first_failing(ctx) if dead else None
    if p is None or p not in dead:
        cand = [q for q in dead if q.first_error is not None]
        p = min(cand, key=lambda q: q.first_error_order) if cand else None
    ev: list[Evidence] = []
    if p is None:
        d, e, _k = lg.deaths[0]
        who = d.proc or (f"rank {d.rank}" if d.rank is not None else "a worker")
        code = f" (exit code {d.exit_code})" if d.exit_code is not None else ""
        return [RULE.finding(0.8, f"{who} died{code}; no traceback of it is in the log", [e],
                             ranks=[d.rank] if d.rank is not None else [])]
    if p.first_error is not None:
        ev.append(p.first_error)
    if p.exception_ev is not None and p.exception_ev is not p.first_error:
        ev.append(p.exception_ev)
    if p.death is not None:
        ev.append(p.death)
    for _d, e, _k in lg.deaths[:2]:
        if e not in ev:
            ev.append(e)
    what = f"{p.exception[0]}: {p.exception[1]}" if p.exception else (
        p.first_error.text if p.first_error else "an error")
    # a timeout as the first error means the real failure left no trace in this log
    secondary = any(s in what for s in _SECONDARY[:3])
    where = p.tracker.stage or "startup"
    conf = 0.6 if secondary else 0.85
    return [RULE.finding(
        conf, f"{p.label} failed first, during {where}: {what[:300]}", ev,
        ranks=[p.rank] if p.rank is not None else [])]


RULE = Rule(
    id="first-dead-rank",
    category="rank-crashed",
    needs="worker tracebacks, exception lines, 'Worker proc ... died unexpectedly' messages",
    tier="dead-rank",
    check=check,
    fix="Fix the error in this rank's traceback first; timeouts and shm_broadcast waits on the "
        "other ranks are consequences of it.",
    link="https://github.com/NVIDIA/nccl/issues/1284",
)
