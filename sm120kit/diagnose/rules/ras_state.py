"""NCCL RAS snapshots in a bundle: MISMATCH (ranks launched different op counts), DEAD or
INCOMPLETE processes."""

from __future__ import annotations

import re
from typing import Any

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence

_RX = re.compile(r"\b(MISMATCH|DEAD|INCOMPLETE|TIMEOUT)\b")


def _counts(snap: dict[str, Any]) -> dict[str, dict[int, int]]:
    """communicator hash → rank → total launched collectives (RAS JSON, NCCL >= 2.28)."""
    out: dict[str, dict[int, int]] = {}
    comms = snap.get("communicators")
    for c in comms if isinstance(comms, list) else []:
        if not isinstance(c, dict):
            continue
        per: dict[int, int] = {}
        ranks = c.get("ranks")
        for r in ranks if isinstance(ranks, list) else []:
            if not isinstance(r, dict) or not isinstance(r.get("rank"), int):
                continue
            cc = r.get("collective_counts")
            if isinstance(cc, dict):
                per[r["rank"]] = sum(v for v in cc.values() if isinstance(v, int))
        if per:
            out[str(c.get("hash", len(out)))] = per
    return out


def _json_findings(b: Any) -> list[Finding]:
    snaps = [(n, _counts(j)) for n, j in b.ras_json]
    if not snaps:
        return []
    name, last = snaps[-1]
    out: list[Finding] = []
    for comm, per in last.items():
        if len(set(per.values())) <= 1:
            continue
        hi = max(per.values())
        behind = sorted(r for r, v in per.items() if v < hi)
        frozen = len(snaps) >= 2 and snaps[0][1].get(comm) == per
        out.append(RULE.finding(
            0.87 if frozen else 0.72,
            f"NCCL RAS counts: rank(s) {behind} of communicator {comm} launched fewer collectives "
            f"({', '.join(f'{r}: {per[r]}' for r in behind)} vs {hi})"
            + (", unchanged between the two snapshots" if frozen else ""),
            [Evidence(name, 0, f"communicator {comm}: {dict(sorted(per.items()))}")],
            ranks=behind))
    return out


def check(ctx: RuleContext) -> list[Finding]:
    b = ctx.bundle
    if b is None:
        return []
    counted = _json_findings(b)
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
