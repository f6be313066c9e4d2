"""Stacks in a bundle: most ranks wait in a collective or host sync, one is elsewhere."""

from __future__ import annotations

from collections import Counter

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence


def check(ctx: RuleContext) -> list[Finding]:
    b = ctx.bundle
    if b is None:
        return []
    ws = [s for s in b.stacks if (s.role in (None, "worker") or s.rank is not None) and s.frames]
    if len(ws) < 2:
        return []
    waiting = [s for s in ws if s.waiting]
    other = [s for s in ws if not s.waiting]
    if not waiting or not other or len(other) > max(1, len(ws) // 2):
        return []
    where = Counter(s.collective or s.sync for s in waiting).most_common(1)[0][0]
    ev = [Evidence(s.source, 0, f"{s.label or s.pid}: {s.frames[0]}") for s in other[:3]]
    ev += [Evidence(s.source, 0, f"{s.label or s.pid}: {s.frames[0]}") for s in waiting[:2]]
    ranks = sorted(s.rank for s in other if s.rank is not None)
    names = ", ".join(str(s.label or s.pid) for s in other)
    tops = "; ".join(f"{s.label or s.pid} in {s.top or s.frames[0]}" for s in other[:3])
    return [RULE.finding(
        0.76, f"{len(waiting)} rank(s) wait in {where} while {names} is elsewhere: {tops}", ev,
        ranks=ranks)]


RULE = Rule(
    id="stack-asymmetry",
    category="collective-desync",
    needs="bundle stacks/<pid>.json of two or more ranks",
    tier="stacks",
    check=check,
    fix="The rank that is not in the collective is the suspect: what its stack shows (JIT "
        "compile, autotune, a rank-local branch, an RPC dequeue) keeps it from the collective.",
    link="https://github.com/benfred/py-spy",
)
