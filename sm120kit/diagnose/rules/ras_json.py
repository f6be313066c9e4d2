"""NCCL RAS JSON snapshots (NCCL >= 2.28): per-communicator collective counts of every rank.
Structure for the ``ras-state`` rule."""

from __future__ import annotations

from typing import Any

from sm120kit.diagnose.facts import BundleFacts
from sm120kit.diagnose.rules.base import Finding, Rule
from sm120kit.evidence.logs.analyze import Evidence


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


def json_findings(b: BundleFacts, rule: Rule) -> list[Finding]:
    """Ranks of one communicator that launched fewer collectives (frozen across snapshots)."""
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
        out.append(rule.finding(
            0.87 if frozen else 0.72,
            f"NCCL RAS counts: rank(s) {behind} of communicator {comm} launched fewer collectives "
            f"({', '.join(f'{r}: {per[r]}' for r in behind)} vs {hi})"
            + (", unchanged between the two snapshots" if frozen else ""),
            [Evidence(name, 0, f"communicator {comm}: {dict(sorted(per.items()))}")],
            ranks=behind))
    return out
