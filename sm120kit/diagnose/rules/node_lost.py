"""Multi-node bundles (``collect --ray``): a node that left the cluster or never answered during
the collect; its ranks stopped first, the ranks on the other nodes wait for them."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence


def check_lost(ctx: RuleContext) -> list[Finding]:
    b = ctx.bundle
    if b is None:
        return []
    out = []
    for n in b.nodes:
        if n.get("status") not in ("lost", "timeout"):
            continue
        node = str(n.get("folder", "")).split("/", 1)[-1]
        workers = [str(w) for w in n.get("workers") or []]
        ev = [Evidence("manifest.json", 0, f"node {node}: {n.get('status')}: {n.get('error')}")]
        who = f" with {len(workers)} worker actor(s) ({', '.join(workers[:4])})" if workers else ""
        out.append(LOST.finding(
            0.84 if n.get("status") == "lost" else 0.6,
            f"node {node}{who} {'left the cluster' if n.get('status') == 'lost' else 'never answered'}"
            " during the collect: its ranks stopped first; the ranks on the other nodes wait for "
            "them", ev))
    return out


LOST = Rule(
    id="node-lost",
    category="rank-crashed",
    needs="multi-node bundle manifest: a node recorded lost or timeout",
    tier="disagreement",
    check=check_lost,
    fix="Check the lost node first (raylet/dmesg/OOM killer, network, GPU Xid): its ranks died "
        "or hang there; the other nodes' ranks only wait.",
    link="https://docs.ray.io/en/latest/ray-observability/user-guides/cli-sdk.html",
)
