"""Multi-node bundles (``collect --ray``): a node that never answered, and the rank on one node
that is outside the collective the ranks on the other nodes wait in — the one that stopped first."""

from __future__ import annotations

from collections import Counter

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext, StackView
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


def check(ctx: RuleContext) -> list[Finding]:
    b = ctx.bundle
    if b is None or not b.nodes:
        return []
    out: list[Finding] = []
    ws = [s for s in b.stacks if s.node and s.frames and
          (s.role in ("worker", "warmup-rank") or s.rank is not None)]
    if len({s.node for s in ws}) < 2:
        return out
    waiting = [s for s in ws if s.waiting]
    other = [s for s in ws if not s.waiting]
    if not waiting or not other or len(other) > max(1, len(ws) // 2):
        return out
    where = Counter(s.collective or s.sync for s in waiting).most_common(1)[0][0]
    wnodes = sorted({str(s.node) for s in waiting})

    def who(s: StackView) -> str:
        r = f"rank {s.rank}" if s.rank is not None else str(s.label or s.pid)
        return f"{r} ({s.label}, pid {s.pid}) on node {s.node}"

    ev = [Evidence(s.source, 0, f"node {s.node} {s.label or s.pid}: {s.frames[0]}") for s in other]
    ev += [Evidence(s.source, 0, f"node {s.node} {s.label or s.pid}: {s.frames[0]}")
           for s in waiting[:3]]
    first = sorted(other, key=lambda s: (s.rank is None, s.rank or 0))
    tops = "; ".join(f"{who(s)} is at {s.top or s.frames[0]}" for s in first[:3])
    out.append(RULE.finding(
        0.78, f"{tops} — not in {where}, which {len(waiting)} rank(s) on node(s) "
              f"{', '.join(wnodes)} wait in: it stopped first", ev,
        ranks=sorted(s.rank for s in other if s.rank is not None)))
    return out


RULE = Rule(
    id="cross-node-divergence",
    category="collective-desync",
    needs="multi-node bundle (collect --ray): nodes/<id>/stacks of ranks on two or more nodes",
    tier="stacks",
    check=check,
    fix="Look at the named rank on the named node: its stack shows what keeps it from the "
        "collective (a rank-local branch, JIT/autotune, a host-side wait); the ranks on the other "
        "nodes are only waiting for it.",
    link="https://docs.ray.io/en/latest/ray-observability/user-guides/cli-sdk.html",
)

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
