"""Flight Recorder dumps in a bundle: a rank missing from a collective the others joined, or
ranks that joined the same sequence number with different ops."""

from __future__ import annotations

import re

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence
from sm120kit.report import clip_words

_MISSING = re.compile(r"missing ranks: \{(?P<r>[\d, ]*)\}")


def check(ctx: RuleContext) -> list[Finding]:
    b = ctx.bundle
    if b is None:
        return []
    out: list[Finding] = []
    groups = (b.flight or {}).get("groups") or []
    for g in groups if isinstance(groups, list) else []:
        if not isinstance(g, dict):
            continue
        summ = g.get("summary") or {}
        nj = summ.get("not_joined") if isinstance(summ, dict) else None
        for item in (nj or [])[:1] if isinstance(nj, list) else []:
            if not isinstance(item, dict):
                continue
            src = f"flight/index.json ({g.get('dir', 'dumps')})"
            if item.get("missing_ranks"):
                ranks = [int(r) for r in item["missing_ranks"] if isinstance(r, int)]
                out.append(RULE.finding(
                    0.86, f"Flight Recorder: rank(s) {ranks} never joined collective "
                    f"{item.get('op')} #{item.get('seq')} of PG {item.get('pg')} that ranks "
                    f"{item.get('ranks_with')} entered", [Evidence(src, 0, clip_words(str(item), 300))],
                    ranks=ranks))
            elif item.get("mismatch"):
                out.append(RULE.finding(
                    0.86, f"Flight Recorder: collective #{item.get('seq')} of PG {item.get('pg')} "
                    f"differs across ranks: {item.get('mismatch')}",
                    [Evidence(src, 0, clip_words(str(item), 300))]))
    for name, text in b.flight_text:
        for i, line in enumerate(text.splitlines(), 1):
            m = _MISSING.search(line)
            if m and not out:
                ranks = [int(x) for x in m.group("r").replace(" ", "").split(",") if x]
                out.append(RULE.finding(
                    0.85, f"Flight Recorder analyzer: missing ranks {ranks}",
                    [Evidence(name, i, line.strip())], ranks=ranks))
    return out


RULE = Rule(
    id="flight-recorder-desync",
    category="collective-desync",
    needs="bundle flight/index.json (per-rank Flight Recorder summary) or the fr_trace output",
    tier="disagreement",
    check=check,
    fix="The missing rank never called that collective: compare its stack and last log lines "
        "with the others'; FR only sees torch process-group ops (not PyNccl).",
    link="https://pytorch.org/tutorials/prototype/flight_recorder_tutorial.html",
)
