"""Failure lines that are messages of the message index (``diagnose.msgindex``): the module
that raises or logs one names its category (``catalogue/index_map.toml``). Moderate confidence:
a catalogue entry wins a line it matches; warnings, crash messages and templates without a
category are never findings. The template's releases are version evidence too."""

from __future__ import annotations

from sm120kit.diagnose.catalogue import not_evidence
from sm120kit.diagnose.msgindex import Match
from sm120kit.diagnose.msgindex.lines import cause_match, is_frame
from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence


def _lines(ctx: RuleContext) -> list[Evidence]:
    """Each failed process's exception line first, in the order the processes failed (the
    first failing traceback's exception is what an engineer reads first), then the recorded
    failure lines and each process's first error, without traceback frames."""
    lf = ctx.facts
    if not lf.failures:
        return []
    procs = sorted((p for p in lf.procs.values() if p.first_error is not None),
                   key=lambda p: p.first_error_order)
    out = [p.exception_ev for p in procs if p.exception_ev is not None]
    out += [e for e in (*lf.failures, *(p.first_error for p in procs))
            if e is not None and not is_frame(e.text)]
    return list({e.ref: e for e in out}.values())[:24]


def _version_note(ctx: RuleContext, m: Match) -> str:
    have = ctx.versions.get(m.template.project)
    if not isinstance(have, str):
        return ""
    inside = m.template.in_range(have)
    if inside is False:
        return (f"; this log's {m.template.project} {have} is outside those releases (a fork, "
                "a patched tree or a newer release)")
    return f"; consistent with this log's {m.template.project} {have}" if inside else ""


def check(ctx: RuleContext) -> list[Finding]:
    by_cat: dict[str, list[tuple[Evidence, Match]]] = {}
    for ev in _lines(ctx):
        if not_evidence(ev.text) or (ctx.catalogue is not None and ctx.catalogue.scan(ev.text)):
            continue  # advice/completion; or a curated entry names this line: it wins
        m = cause_match(ev.text)
        if m is not None:
            by_cat.setdefault(m.template.category, []).append((ev, m))
    out = []
    for cat, hits in by_cat.items():
        ev, m = hits[0]
        t = m.template
        conf = 0.55 if t.kind in ("raise", "check") else 0.45
        out.append(RULE.finding(
            conf, f"{t.source()}: \"{t.text[:160]}\"" + _version_note(ctx, m),
            [ev] + [e for e, _ in hits[1:4]], category=cat, role="cause",
            fix=f"Read the condition at {t.file}:{t.line} ({t.function or 'module level'}) "
                "for what it checks: that module's meaning gives the category."))
    return out


RULE = Rule(
    id="index-match",
    category="unknown",
    needs="a failure line that is a message of the message index (error level or a raise) "
          "whose module or wording has a category",
    tier="dead-rank",
    check=check,
    fix="Read the condition where the message is raised (the finding names file:line).",
    role="cause",
)
