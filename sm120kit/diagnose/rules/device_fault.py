"""A device-side fault: illegal memory access, launch failure, device assert, Xid."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext


def check(ctx: RuleContext) -> list[Finding]:
    ev = ctx.hits("illegal-memory") + ctx.hits("cuda-launch") + ctx.hits("device-assert")
    xid = ctx.hits("xid")
    if not ev and not xid:
        return []
    nccl = ctx.versions.get("nccl")
    hint = ""
    if isinstance(nccl, str) and nccl.startswith("2.26."):
        hint = f" NCCL {nccl} has a known illegal-memory-access bug for large collectives on " \
               "2x RTX PRO 6000 (NVIDIA/nccl#2418): upgrade NCCL."
    # placed in vLLM's custom all-reduce kernel: the catalogue entry names that cause
    # (catalogue/p2p.toml custom-all-reduce-fault); the fault itself is then its effect
    car = ctx.hits("cat:custom-all-reduce-fault") if ev else []
    return [RULE.finding(
        (0.6 if car else 0.75) if ev else 0.6,
        "a CUDA kernel faulted on the device" + (" (Xid reported)" if xid else ""),
        (ev + xid)[:5], tier="dead-rank" if ev else "gpu",
        fix=RULE.fix + hint)]


RULE = Rule(
    id="device-fault",
    category="kernel-hang",
    needs="'an illegal memory access was encountered', 'unspecified launch failure', "
          "'device-side assert triggered', kernel-log Xid lines",
    tier="dead-rank",
    check=check,
    fix="Rerun with CUDA_LAUNCH_BLOCKING=1 to name the kernel; try --enforce-eager and DCP=1 to "
        "isolate graph replay and the DCP path; check `dmesg` for Xid 79/48/94.",
    link="https://docs.nvidia.com/deploy/xid-errors/index.html",
)
