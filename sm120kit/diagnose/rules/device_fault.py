"""A device-side fault: illegal memory access, launch failure, device assert, Xid."""

from __future__ import annotations

import re

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence


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
    car = _custom_all_reduce(ctx, ev)
    out = [RULE.finding(
        (0.6 if car else 0.75) if ev else 0.6,
        "a CUDA kernel faulted on the device" + (" (Xid reported)" if xid else ""),
        (ev + xid)[:5], tier="dead-rank" if ev else "gpu",
        fix=RULE.fix + hint)]
    if car:
        out.append(RULE.finding(
            0.75, "the fault is in vLLM's custom all-reduce kernel, which reads and writes the "
            "other GPUs' buffers through CUDA IPC peer mappings: the GPU peer-to-peer path",
            car[:2] + ev[:1], category="p2p-transport", tier="dead-rank", role="cause",
            fix="Start with --disable-custom-all-reduce (NCCL all-reduce instead) to confirm; "
                "check `nvidia-smi topo -p2p r` and ACS/IOMMU for the PCIe P2P path."))
    return out


# vLLM's custom all-reduce: csrc/custom_all_reduce.cuh (its CUDACHECK prints "Failed: Cuda error
# .../custom_all_reduce.cuh:164 '...'"), a traceback frame in custom_all_reduce.py, or the words.
# Not the logger prefix "custom_all_reduce.py:134]" of a healthy run's INFO/WARNING ("Custom
# allreduce is disabled because ...", tests/data/vllm-logs/log11.txt): that names no fault.
_CAR = re.compile(r"custom_all_reduce\.cuh|custom_all_reduce\.py\", line|[Cc]ustom all-?reduce "
                  r"kernel|CustomAllreduce::")


def _custom_all_reduce(ctx: RuleContext, ev: list[Evidence]) -> list[Evidence]:
    """Lines that place the device fault in the custom all-reduce kernel."""
    if not ev:
        return []
    return [e for e in ctx.logs.failures + ev if _CAR.search(e.text)]


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
