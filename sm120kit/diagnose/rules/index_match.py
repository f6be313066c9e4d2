"""Failure lines that are messages of the message index (``diagnose.msgindex``): the module
that raises or logs one names its category (``catalogue/index_map.toml``). Moderate confidence:
a catalogue entry wins a line it matches; warnings, crash messages and templates without a
category are never findings. The template's releases are version evidence too."""

from __future__ import annotations

from sm120kit.diagnose.catalogue import not_evidence
from sm120kit.diagnose.msgindex import Match, try_load
from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.diagnose.rules.fold import GENERIC
from sm120kit.evidence.logs.analyze import Evidence

MIN_COVER, MIN_LITERAL = 0.3, 16  # share of the line the literal text covers; its length


def _lines(ctx: RuleContext) -> list[Evidence]:
    lf = ctx.facts
    if not lf.failures:
        return []
    out = list(lf.failures)
    for p in lf.procs.values():
        out += [e for e in (p.exception_ev, p.first_error) if e is not None]
    return list({e.ref: e for e in out}.values())[:16]


def _best(line: str) -> Match | None:
    idx = try_load()
    for m in idx.match(line) if idx is not None else []:
        t = m.template
        # crash messages are effects (the structural rules place them): causes only
        if t.is_error and t.category not in ("none", *GENERIC) and t.litlen >= MIN_LITERAL \
                and m.coverage >= MIN_COVER:
            return m
    return None


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
        m = _best(ev.text)
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
