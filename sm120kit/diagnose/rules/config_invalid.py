"""The launch configuration was rejected: argument errors, divisibility constraints
(tp % dcp, heads), backend/model routing, unsupported combinations."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.report import clip_words


def check(ctx: RuleContext) -> list[Finding]:
    ev = (ctx.hits("arg-error") + ctx.hits("divisible") + ctx.hits("backend-rejected")
          + ctx.hits("config-value-error"))
    # DCP rejections have their own rule
    ev = [e for e in ev if "DCP not supported" not in e.text and "softmax LSE" not in e.text]
    if not ev:
        return []
    seen: set[str] = set()
    uniq = []
    for e in ev:
        if e.text not in seen:
            seen.add(e.text)
            uniq.append(e)
    msg = uniq[0].text.split("] ")[-1]
    return [RULE.finding(0.88, f"vLLM rejected the configuration: {clip_words(msg, 240)}", uniq[:4])]


RULE = Rule(
    id="config-invalid",
    category="config-invalid",
    needs="argument parser errors, 'must be divisible by', ValueError/AssertionError lines that "
          "say 'not supported' / 'must be' / 'requires'",
    tier="dead-rank",
    check=check,
    fix="Change the flag the message names; `sm120kit doctor --tp N --dcp M ...` checks a "
        "planned sparse-MLA/DCP configuration before launch.",
    link="docs/doctor.md",
)
