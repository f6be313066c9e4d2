"""A stall inside the SM120 sparse-MLA warmup/autotune with DCP > 1.

Mechanism (vLLM ``flashinfer_sparse_mla_warmup``): the world leader runs the dummy forward inside
``flashinfer_autotune``, the other ranks run it without; the forward contains PyNccl DCP/TP
collectives, and afterwards every rank meets in ``broadcast_object`` + ``barrier``. Any per-rank
divergence (late JIT, a zero-local-KV DCP shape, a different number of collectives) leaves the
others waiting with no RPC timeout. Evidence: the leader's ``Autotuning FlashInfer SM120 sparse
MLA`` line without the per-rank ``autotune cache loaded on rank N`` lines, a stall while ranks are
in kernel-warmup/autotune, DCP > 1.
"""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence

_WARM = ("kernel-warmup", "autotune")


def check(ctx: RuleContext) -> list[Finding]:
    dcp = ctx.dcp()
    workers = ctx.workers()
    # the stage each rank stopped in (a later watchdog/error line does not hide it)
    stuck = [p for p in workers if p.tracker.stage in _WARM]
    glob = ctx.facts.phases.stage
    in_warm = bool(stuck) or glob in _WARM
    leader = ctx.hits("sm120-autotune-leader")
    warm = ctx.hits("sparse-mla-warmup") + ctx.hits("autotuner-start")
    stack_warm = []
    if ctx.bundle is not None:
        for s in ctx.bundle.stacks:
            if any("sparse_mla" in f or "autotun" in f or "kernel_warmup" in f for f in s.frames):
                stack_warm.append(s)
    if not (in_warm or stack_warm) or not (ctx.stalled() or stack_warm):
        return []
    if dcp <= 1 and not stack_warm:
        return []
    loaded = {int(v) for v in ctx.values("sm120-autotune-loaded") if v.isdigit()}
    ev: list[Evidence] = list(leader[:1]) + warm[:2]
    ev += [p.last for p in stuck[:4] if p.last is not None]
    if ctx.facts.waits.shm_waits:
        ev.append(ctx.facts.waits.shm_waits[-1][1])
    ranks = sorted(p.rank for p in stuck if p.rank is not None)
    n = ctx.config.get("tp") or len(workers)
    missing = sorted(set(range(int(n))) - loaded) if loaded and isinstance(n, int) else []
    parts = [f"the launch stalled in the sparse-MLA warmup/autotune stage with DCP={dcp}"]
    if leader:
        parts.append("the leader started autotuning")
    if missing:
        parts.append(f"ranks {missing} never logged 'autotune cache loaded'")
    if stack_warm:
        parts.append(f"{len(stack_warm)} stack(s) are inside warmup/autotune frames")
    conf = 0.7 + (0.1 if leader else 0) + (0.05 if stack_warm else 0)
    tier = "disagreement" if missing else ("stacks" if stack_warm else "disagreement")
    return [RULE.finding(conf, "; ".join(parts), ev, ranks=missing or ranks, tier=tier,
                         phase="autotune" if leader else "warmup", role="cause")]


RULE = Rule(
    id="dcp-warmup-stall",
    category="dcp-warmup",
    needs="phase of every rank (kernel-warmup/autotune), the leader's autotune line, per-rank "
          "'autotune cache loaded on rank N' lines, shm_broadcast waits, DCP size; stacks in "
          "flashinfer_sparse_mla_warmup frames",
    tier="disagreement",
    check=check,
    fix="Warm up with DCP-valid shapes: `sm120kit warmup` (or the patched warmup from "
        "`sm120kit apply`); as an A/B test disable the autotune "
        "(--kernel-config '{\"enable_flashinfer_autotune\": false}') or run DCP=1.",
    link="docs/warmup.md",
)
