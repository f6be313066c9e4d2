"""No false all-clear on a failure stated in a shape the line reader does not record (``unknown``,
0.3, the line as evidence): a process' last line that the message index knows as an error its
program logs or raises (SGLang prints no level; its source logs "Received sigquit from a child
process ..." with ``logger.error``; INFO/DEBUG/WARNING, NCCL and advice lines never count), or a
failure the program said it retries (``LogFacts.retried``) when the run never got ready.
``index_source`` names a line's source for ``recorded-failure`` too."""

from __future__ import annotations

from sm120kit.diagnose.catalogue import not_evidence
from sm120kit.diagnose.msgindex import Match, try_load
from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext, field_phase
from sm120kit.evidence.logs.analyze import Evidence
from sm120kit.evidence.logs.prefix import attribute
from sm120kit.evidence.phases import PHASE_INDEX
from sm120kit.report import clip_words

MIN_LITERAL, MIN_COVER = 24, 0.5  # the template's literal length; the share of the line it covers


def _error_match(line: str, cover: float = MIN_COVER) -> Match | None:
    idx = try_load()
    for m in idx.match(line) if idx is not None else []:
        if m.template.is_error and m.template.litlen >= MIN_LITERAL and m.coverage >= cover:
            return m
    return None


def index_source(line: str) -> str:
    """``; logged by sglang/srt/...py:1977 in f (error), SGLang 0.4–0.5`` or ``""``."""
    m = _error_match(line, 0.3)
    return f"; {m.template.source()}" if m is not None else ""


def _stated(ctx: RuleContext) -> tuple[Evidence, Match] | None:
    lf = ctx.facts
    for ev in [e for p in lf.procs.values() for e in p.tail] + [x for x in [lf.last_text] if x]:
        o = attribute(ev.text)
        quiet = o.kind == "nccl" or o.level in ("INFO", "DEBUG", "WARNING", "WARN")
        m = None if quiet or not_evidence(ev.text) else _error_match(o.message)
        if m is not None:
            return ev, m
    return None


def check(ctx: RuleContext) -> list[Finding]:
    lf = ctx.facts
    if lf.failures:
        return []  # recorded failures: the rules (and recorded-failure) report them
    stage, hit = lf.phases.stage, _stated(ctx)
    phase = field_phase(stage)
    if hit is not None:
        ev, m = hit
        return [RULE.finding(
            0.3, f"the log states a failure: \"{clip_words(ev.text, 240)}\" is an error its program "
            f"reports ({m.template.source()}); no rule names its cause", [ev], phase=phase,
            role="effect")]
    ready = stage is not None and PHASE_INDEX.get(stage, 0) >= PHASE_INDEX["engine-ready"]
    if lf.retried and not ready and not lf.progress.served:
        ev = lf.retried[-1]
        return [RULE.finding(
            0.3, f"the run retried a failure and never got ready: \"{clip_words(ev.text, 240)}\" "
            f"({len(lf.retried)} retried failure line(s)); phase {phase or 'unknown'}",
            list(lf.retried[-4:]), phase=phase, role="effect")]
    return []


RULE = Rule(
    id="stated-failure",
    category="unknown",
    needs="no recorded failure line, but a process' last lines hold a message its program logs "
          "at error level or raises (message index), or the program retried a failure and the "
          "run never got ready",
    tier="config",
    check=check,
    fix="Read the stated line and the lines before it; if the log is an excerpt, paste the "
        "whole output (or `sm120kit collect -- <command>`).",
    link=None,
)
