"""Root cause over symptoms: a finding that only restates a cause's lines is folded into it.

* a generic finding (``rank-crashed``, ``unknown``) whose evidence is a line a specific cause
  already rests on (the same exception line: the rank crashed *because of* it), or a line a
  matched catalogue entry lists among its ``symptoms``, is dropped, its evidence added to the
  cause (with the rank and process that failed first);
* a generic finding that a strong cause (a dead-rank line stating the error, >= 0.8) does not
  share lines with stays, at most at 0.6: the crash is known, its own cause is the other one;
* with no cause at all, the crash finding names its error line and the three nearest entries.
"""

from __future__ import annotations

from sm120kit.diagnose.catalogue import Catalogue
from sm120kit.diagnose.catalogue.nearest import looks_like
from sm120kit.diagnose.rules.base import Finding

GENERIC = ("rank-crashed", "unknown")


def _explains(cause: Finding, f: Finding, cat: Catalogue | None) -> bool:
    refs = {e.ref for e in cause.evidence}
    if any(e.ref in refs for e in f.evidence):
        return True
    entry = cat.get(cause.rule) if cat is not None else None
    return bool(entry and f.evidence and all(entry.is_symptom(e.text) for e in f.evidence))


def fold(findings: list[Finding], cat: Catalogue | None) -> list[Finding]:
    causes = [f for f in findings if f.category not in GENERIC and f.tier == "dead-rank"]
    out = []
    for f in findings:
        host = next((c for c in causes if f.category in GENERIC and _explains(c, f, cat)), None)
        if host is None:
            if f.category in GENERIC and any(c.confidence >= 0.8 for c in causes):
                f.confidence = min(f.confidence, 0.6)
            out.append(f)
            continue
        host.evidence.extend(e for e in f.evidence if e not in host.evidence)
        if f.rule == "first-dead-rank":  # keep who failed first: "Worker_TP2 pid 402 failed first"
            host.ranks = host.ranks or f.ranks
            host.summary += f" ({f.summary.split(': ', 1)[0]})"
    if not causes:
        _point(out, cat)
    return out


def _point(findings: list[Finding], cat: Catalogue | None) -> None:
    """No cause named: the crash finding points at its error line and the nearest entries."""
    for f in findings:
        if f.rule == "first-dead-rank" and f.evidence and "error at " not in f.summary:
            e = next((x for x in f.evidence if "Traceback (most recent" not in x.text), f.evidence[0])
            # the nearest entries ("looks like") only where the cause is unknown
            f.summary += f"; error at {e.ref}" + (looks_like(cat, e.text)
                                                  if f.category == "unknown" else "")
