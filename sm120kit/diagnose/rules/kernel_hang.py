"""Every rank inside the same collective/sync, matching watchdog records, and (when NVML is in
the bundle) GPUs busy at low power: a device-side spin, not a missing rank."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence


def _gpu_spin(ctx: RuleContext) -> tuple[list[Evidence], int]:
    b = ctx.bundle
    if b is None or not b.nvml:
        return [], 0
    ev: list[Evidence] = []
    busy = 0
    total = 0
    for si, snap in enumerate(b.nvml[-2:]):
        for g in snap.get("gpus") or []:
            if not isinstance(g, dict):
                continue
            total += 1
            util = g.get("utilization_gpu")
            pw, lim = g.get("power_draw_w"), g.get("power_limit_w")
            if isinstance(util, int | float) and util >= 90 and isinstance(pw, int | float) and (
                    not isinstance(lim, int | float) or pw < 0.45 * lim):
                busy += 1
                if len(ev) < 3:
                    ev.append(Evidence("nvml.json", 0, f"sample {si + 1} GPU {g.get('index')}: "
                                       f"{util}% util at {pw} W (limit {lim} W)"))
    return ev, (busy if total and busy >= max(1, total // 2) else 0)


def check(ctx: RuleContext) -> list[Finding]:
    out: list[Finding] = []
    gpu_ev, spinning = _gpu_spin(ctx)
    b = ctx.bundle
    all_wait = False
    st_ev: list[Evidence] = []
    if b is not None:
        ws = [s for s in b.stacks if s.frames]
        if len(ws) >= 2 and all(s.waiting for s in ws):
            all_wait = True
            st_ev = [Evidence(s.source, 0, f"{s.label or s.pid}: {s.frames[0]}") for s in ws[:3]]
    wd = ctx.facts.waits.watchdog
    same_seq = False
    if wd:
        seqs = {r.seq for r, _e, _k in wd if r.seq is not None}
        ranks = {r.rank for r, _e, _k in wd if r.rank is not None}
        same_seq = len(seqs) == 1 and len(ranks) >= 2
    dead = any(p.death or p.exception for p in ctx.workers())
    if dead:
        return out
    if spinning and (all_wait or same_seq):
        out.append(RULE.finding(
            0.64, f"all ranks wait in the same collective/sync while {spinning} GPU(s) run at "
            "high utilization and low power: a kernel is spinning (device-side hang or a peer "
            "write that never lands)", gpu_ev + st_ev + [e for _r, e, _k in wd[:2]], tier="gpu"))
    elif all_wait or same_seq:
        out.append(RULE.finding(
            0.55 if all_wait else 0.5,
            "every rank is inside the same collective with matching sequence numbers: the "
            "transport or a kernel is stuck, not a missing rank",
            st_ev + [e for _r, e, _k in wd[:3]], tier="stacks" if all_wait else "disagreement"))
    return out


RULE = Rule(
    id="all-ranks-in-collective",
    category="kernel-hang",
    needs="stacks of every rank in a collective/sync, equal watchdog SeqNums, NVML util/power",
    tier="gpu",
    check=check,
    fix="A/B runs: NCCL_P2P_DISABLE=1 plus --disable-custom-all-reduce (transport); "
        "--enforce-eager or cudagraph_mode=PIECEWISE (graph replay); DCP=1 (DCP collectives).",
    link="https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html",
)
