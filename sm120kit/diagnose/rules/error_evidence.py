"""No false all-clear: a log that records a failure always gets a finding.

When no rule names a cause, the errors, exceptions, tracebacks, assertions, timeouts, worker
deaths and non-zero exits the log records are reported as they are (category ``unknown``), with
the root error line (file:line), the phase the run was in and the three catalogue entries whose
wording is nearest (``catalogue.nearest``: token shingles and difflib), so a new signature
starts from its closest relative.
"""

from __future__ import annotations

from sm120kit.diagnose.catalogue import announces_long_step
from sm120kit.diagnose.catalogue.nearest import looks_like
from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext, field_phase, first_failing
from sm120kit.diagnose.rules.stated_failure import index_source
from sm120kit.evidence.logs.analyze import Evidence
from sm120kit.report import clip_words


def check(ctx: RuleContext) -> list[Finding]:
    lg = ctx.facts
    d = lg.described
    if not lg.failures:
        if lg.last_text is not None and announces_long_step(lg.last_text.text):
            return []  # the last line says the step takes minutes: progressing (engine verdict)
        said = d.symptoms[:2] + d.complaints[:2]
        if not said:
            return []
        stage = lg.phases.stage
        phase = field_phase(stage)
        ends = f"; the quoted log ends in {stage}" if stage else ""
        return [RULE.finding(
            0.3, f"the report describes a failure the quoted lines do not record: "
            f"\"{clip_words(said[0][2], 200)}\"{ends}", [Evidence(*x) for x in said], phase=phase,
            role="effect")]
    root = _root(ctx)
    n = lg.failure_count
    phase = field_phase(lg.phases.stage)
    more = f" (and {n - 1} more failure line(s))" if n > 1 else ""
    return [RULE.finding(
        0.35, f"the log records a failure no catalogue entry or rule recognises: "
        f"{clip_words(root.text, 300)}{more}; root error at {root.ref}, phase {phase or 'unknown'}"
        + index_source(root.text) + looks_like(ctx.catalogue, root.text), [root] + [e for e in lg.failures[:4] if e != root],
        phase=phase, role="effect")]


def _root(ctx: RuleContext) -> Evidence:
    """The earliest failing process's first exception (in a chained traceback Python prints the
    innermost cause first), else the first failure line."""
    p = first_failing(ctx)
    if p is not None and p.exception_ev is not None:
        return p.exception_ev
    return ctx.facts.failures[0]


RULE = Rule(
    id="recorded-failure",
    category="unknown",
    needs="any error/exception/traceback/assertion, watchdog/RPC/engine-ready timeout, worker "
          "death or non-zero exit the log records",
    tier="config",
    check=check,
    fix="Read the first failure line and the lines before it; if it is a cascade (a timeout, "
        "EngineDeadError), the cause is earlier or on another rank: collect the full output of "
        "every process (`sm120kit collect -- vllm serve ...`).",
    link=None,
)
