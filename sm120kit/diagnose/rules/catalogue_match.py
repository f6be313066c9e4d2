"""Findings from the failure-signature catalogue (``sm120kit/diagnose/catalogue/*.toml``).

One finding per category that an entry's patterns matched: the entry of the highest priority
(then confidence) names it, the other entries of that category add evidence. An entry's
conditions (``when``: ``with``, ``with_any``, ``without``, ``phase``, ``stalled``, ``topology``;
``requires = "stall"`` is ``stalled = true``) must hold on the same input; the first line of each
``with`` id joins its evidence.
"""

from __future__ import annotations

from sm120kit.diagnose.catalogue import PREFIX, Entry
from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext, field_phase
from sm120kit.evidence.logs.analyze import Evidence


def matched(ctx: RuleContext) -> list[tuple[Entry, list[Evidence]]]:
    """Entries with evidence in the input, highest priority first (gates applied)."""
    cat = ctx.catalogue
    if cat is None:
        return []
    out, beside = [], {}
    seen = ctx.seen()
    for sid, hits in ctx.facts.signals.items():
        e = cat.get(sid) if sid.startswith(PREFIX) else None
        if e is None or not hits.evidence:
            continue
        more = e.conditions().holds(seen)
        if more is None:
            continue
        out.append((e, list(hits.evidence)))
        beside[e.id] = more
    out.sort(key=lambda x: (-x[0].priority, -x[0].confidence, x[0].id))
    return [(e, ev + [x for x in beside[e.id] if x not in ev])
            for e, ev in _one_cause_per_line(out)]


def _one_cause_per_line(found: list[tuple[Entry, list[Evidence]]]
                        ) -> list[tuple[Entry, list[Evidence]]]:
    """A line states one fault: of the entries that match it (a broad "ValueError: ... not
    supported" and the toolchain's "Unknown CUDA arch ... not supported"), the one of the highest
    priority names it; the others lose that line, and drop out without one."""
    owner: dict[str, str] = {}
    for e, ev in found:  # highest priority first
        owner.update((x.ref, e.id) for x in ev if x.ref not in owner)
    kept = [(e, [x for x in ev if owner[x.ref] == e.id]) for e, ev in found]
    return [(e, ev) for e, ev in kept if ev]


def check(ctx: RuleContext) -> list[Finding]:
    by_cat: dict[str, tuple[Entry, list[Evidence]]] = {}
    for e, ev in matched(ctx):
        if e.category in by_cat:
            by_cat[e.category][1].extend(x for x in ev if x not in by_cat[e.category][1])
        else:
            by_cat[e.category] = (e, list(ev))
    out = []
    for e, ev in by_cat.values():
        phase = e.phase or field_phase(ctx.facts.phases.stage)
        # a line that states the error is dead-rank evidence; a weak entry (configuration seen
        # beside a stall) ranks as a heuristic
        f = RULE.finding(e.confidence, e.summary_for(ev[0].text), ev[:5], fix=e.fix,
                         category=e.category, phase=phase, role=e.role,  # type: ignore[arg-type]
                         tier="dead-rank" if e.confidence >= 0.5 else "config")
        f.rule = e.id
        f.link = e.sources[0] if e.sources else None
        out.append(f)
    return out


RULE = Rule(
    id="catalogue",
    category="unknown",
    needs="the lines the catalogue entries name (sm120kit diagnose --explain ID)",
    tier="dead-rank",
    check=check,
    fix="the fix of the entry that matched (sm120kit diagnose --explain ID)",
)
