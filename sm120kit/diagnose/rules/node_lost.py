"""Multi-node bundles (``collect --ray``): a node that left the cluster during the collect, said
only on evidence about the node itself; a node collect's own deadline cut short is no finding."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence


def check_lost(ctx: RuleContext) -> list[Finding]:
    """A node recorded ``lost``: collect saw evidence about the node itself (Ray's NodeDiedError /
    LocalRayletDiedError, or the GCS marking it dead). A node collect did not hear from before
    its own ``--deadline`` (``not-collected``; ``timeout`` in older bundles) or an interrupted
    collect is no finding: collect's limit says nothing about the node or its ranks."""
    b = ctx.bundle
    if b is None:
        return []
    out = []
    for n in b.nodes:
        if n.get("status") != "lost":
            continue
        node = str(n.get("folder", "")).split("/", 1)[-1]
        workers = [str(w) for w in n.get("workers") or []]
        ev = [Evidence("manifest.json", 0, f"node {node}: {n.get('status')}: {n.get('error')}")]
        who = (f"; the worker actor(s) placed there ({', '.join(workers[:4])}) went with it"
               if workers else "; no worker actor was placed there")
        out.append(LOST.finding(
            0.84 if workers else 0.5,
            f"node {node} left the cluster during the collect ({n.get('error')}){who}", ev))
    return out


LOST = Rule(
    id="node-lost",
    category="rank-crashed",
    needs="multi-node bundle manifest: a node recorded lost (node evidence, not a deadline)",
    tier="disagreement",
    check=check_lost,
    fix="Check the lost node first (raylet/dmesg/OOM killer, network, GPU Xid): the cluster "
        "lost it, and with it any rank placed there.",
    link="https://docs.ray.io/en/latest/ray-observability/user-guides/cli-sdk.html",
)
