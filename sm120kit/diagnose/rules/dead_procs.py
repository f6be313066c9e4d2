"""The processes that failed, in the order the first-dead-rank rule reads them, and the finding
for a death with no traceback of it in the input."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule
from sm120kit.evidence.logs.analyze import Evidence, Proc
from sm120kit.evidence.logs.facts import LogFacts
from sm120kit.evidence.logs.parsers import Death


def _failed(procs: list[Proc]) -> list[Proc]:
    return [p for p in procs if p.death is not None or p.exception is not None
            or (p.first_error is not None and (p.stalls.get("worker-died") or p.traceback))]


def failed_procs(lg: LogFacts) -> list[Proc]:
    """Workers first; the engine core, then the API server only when no worker failed (their
    errors usually report a worker's failure)."""
    dead: list[Proc] = []
    for roles in (("worker", "main"), ("engine-core", "other"), ("api-server",)):
        dead = _failed([p for p in lg.procs.values() if p.role in roles])
        if dead:
            break
    return dead


def death_only(rule: Rule, death: tuple[Death, Evidence, str]) -> list[Finding]:
    """A process died and no traceback of it is in the input (SIGABRT: the watchdog's abort)."""
    d, e, _k = death
    who = d.proc or (f"rank {d.rank}" if d.rank is not None else "a worker")
    code = f" (exit code {d.exit_code})" if d.exit_code is not None else ""
    abort = d.exit_code in (-6, 134)
    return [rule.finding(0.8 if not abort else 0.5,
                         f"{who} died{code}; no traceback of it is in the log"
                         + (" (SIGABRT: usually the watchdog taking the process down after a "
                            "collective timed out)" if abort else ""), [e],
                         ranks=[d.rank] if d.rank is not None else [],
                         role="effect" if abort else "position")]
