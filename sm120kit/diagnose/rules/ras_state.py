"""NCCL RAS snapshots in a bundle: MISMATCH (ranks launched different op counts), DEAD or
INCOMPLETE processes."""

from __future__ import annotations

import re

from sm120kit.diagnose.rules import ras_json
from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence

_RX = re.compile(r"\b(MISMATCH|DEAD|INCOMPLETE|TIMEOUT)\b")


def check(ctx: RuleContext) -> list[Finding]:
    b = ctx.bundle
    if b is None:
        return []
    counted = ras_json.json_findings(b, RULE)
    if not b.ras:
        return counted
    kinds: dict[str, list[Evidence]] = {}
    for name, text in b.ras:
        for i, line in enumerate(text.splitlines(), 1):
            m = _RX.search(line)
            if m:
                kinds.setdefault(m.group(1), []).append(Evidence(name, i, line.strip()))
    out: list[Finding] = []
    if "DEAD" in kinds or "INCOMPLETE" in kinds:
        ev = kinds.get("DEAD", []) + kinds.get("INCOMPLETE", [])
        out.append(RULE.finding(
            0.85, "NCCL RAS: a job process is dead or not responding", ev[:4],
            category="rank-crashed", tier="dead-rank",
            fix="Find the process RAS names (pid/GPU) in the per-rank table; its log/stack shows "
                "why it stopped."))
    out += counted
    if "MISMATCH" in kinds and not counted:
        frozen = len({n for n, _t in b.ras}) >= 2
        out.append(RULE.finding(
            0.86 if frozen else 0.7,
            "NCCL RAS: ranks of a communicator launched different numbers of collectives"
            + (" (in both snapshots)" if frozen else ""), kinds["MISMATCH"][:4]))
    return out


RULE = Rule(
    id="ras-state",
    category="collective-desync",
    needs="bundle ras/status-*.txt (NCCL RAS VERBOSE STATUS) and ras/status-*.json "
          "(per-rank collective_counts)",
    tier="disagreement",
    check=check,
    fix="The ranks behind in the RAS counts never launched the next collective (PyNccl ops "
        "included): compare their stacks with the others'.",
    link="https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting/ras.html",
)
