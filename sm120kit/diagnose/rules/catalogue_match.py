"""Findings from the failure-signature catalogue (``sm120kit/diagnose/catalogue/*.toml``).

One finding per category that an entry's patterns matched: the entry of the highest priority
(then confidence) names it, the other entries of that category add evidence. An entry that
``requires = "stall"`` counts only when the run was also seen to stop.
"""

from __future__ import annotations

from sm120kit.diagnose.catalogue import PREFIX, Entry
from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext, field_phase
from sm120kit.evidence.logs.analyze import Evidence
from sm120kit.report import clip_words


def matched(ctx: RuleContext) -> list[tuple[Entry, list[Evidence]]]:
    """Entries with evidence in the input, highest priority first (gates applied)."""
    cat = ctx.catalogue
    if cat is None:
        return []
    out = []
    for sid, hits in ctx.logs.signals.items():
        e = cat.get(sid) if sid.startswith(PREFIX) else None
        if e is None or not hits.evidence or (e.requires == "stall" and not ctx.stalled()):
            continue
        out.append((e, list(hits.evidence)))
    out.sort(key=lambda x: (-x[0].priority, -x[0].confidence, x[0].id))
    return _one_cause_per_line(out)


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


def _summary(e: Entry, ev: Evidence) -> str:
    msg = ev.text.split("] ")[-1].strip()
    return e.summary.replace("{line}", clip_words(msg, 240))


def check(ctx: RuleContext) -> list[Finding]:
    by_cat: dict[str, tuple[Entry, list[Evidence]]] = {}
    for e, ev in matched(ctx):
        if e.category in by_cat:
            by_cat[e.category][1].extend(x for x in ev if x not in by_cat[e.category][1])
        else:
            by_cat[e.category] = (e, list(ev))
    out = []
    for e, ev in by_cat.values():
        phase = e.phase or field_phase(ctx.logs.global_tracker.stage)
        # a line that states the error is dead-rank evidence; a weak entry (configuration seen
        # beside a stall) ranks as a heuristic
        f = RULE.finding(e.confidence, _summary(e, ev[0]), ev[:5], fix=e.fix,
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
