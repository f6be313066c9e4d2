"""NCCL (tier 0): trap environment variables, LD_PRELOAD interposers, the library selected."""

from __future__ import annotations

import os
import re
from typing import Any

from sm120kit.doctor.checks.traps import sm120_pcie_no_nvlink
from sm120kit.doctor.context import DoctorContext
from sm120kit.doctor.model import Outcome, fail, ok, warn
from sm120kit.doctor.registry import check
from sm120kit.facts import host
from sm120kit.facts.packages import get_dist, package_dir, version_tuple

# (version prefix, reason) from public reports (doctor-checks.md §3.2 #7)
BAD_NCCL = [
    ((2, 25), "NCCL 2.25.x fails on RTX 5090 / SM120 (NCCL #1637, fixed in 2.26)"),
    ((2, 26, 2), "NCCL 2.26.2: illegal memory access for collectives >= 512 KiB on 2x RTX PRO "
                 "6000 (NCCL #2418; fine with 2.31.2)"),
]


def _sm120_pcie_box(ctx: DoctorContext) -> bool:
    snap = ctx.peek("nvml")
    return bool(snap is not None and snap.available and sm120_pcie_no_nvlink(snap)[0])


def _graph_file(ctx: DoctorContext, fails: list[str], warns: list[str], fixes: list[str]) -> None:
    """NCCL_GRAPH_FILE: set but empty or missing; with a high --gpu-memory-utilization."""
    gf = ctx.environ.get("NCCL_GRAPH_FILE")
    if gf is None:
        return
    if not gf.strip():
        fails.append("NCCL_GRAPH_FILE is set to an empty string")
        fixes.append("unset NCCL_GRAPH_FILE")
    elif not os.path.isfile(gf):
        fails.append(f"NCCL_GRAPH_FILE={gf} does not exist")
        fixes.append("point NCCL_GRAPH_FILE at an existing topology XML or unset it")
    plan = ctx.launch.serve if ctx.launch else None
    if plan and plan.gpu_memory_utilization and plan.gpu_memory_utilization > 0.93:
        warns.append(f"NCCL_GRAPH_FILE with --gpu-memory-utilization "
                     f"{plan.gpu_memory_utilization} > 0.93: 'Failed to CUDA calloc'")
        fixes.append("lower --gpu-memory-utilization to <= 0.93")


def _p2p_disable(ctx: DoctorContext, warns: list[str], fixes: list[str]) -> None:
    """NCCL_P2P_DISABLE=1: without --disable-custom-all-reduce at TP 2; off an SM120 PCIe box."""
    if ctx.environ.get("NCCL_P2P_DISABLE") != "1":
        return
    plan = ctx.launch.serve if ctx.launch else None
    if plan is not None and plan.tp == 2 and not plan.disable_custom_all_reduce:
        warns.append("NCCL_P2P_DISABLE=1 without --disable-custom-all-reduce: custom "
                     "all-reduce still uses the broken P2P path")
        fixes.append("add --disable-custom-all-reduce")
    elif not _sm120_pcie_box(ctx):  # there it is the fix (nccl.p2p_pcie)
        warns.append("NCCL_P2P_DISABLE=1: P2P off (slower all-reduce; a workaround for "
                     "IOMMU/ACS hangs, fix those instead)")


@check("nccl.env", tier=0, title="NCCL environment variables that are known traps")
def nccl_env(ctx: DoctorContext) -> Outcome:
    env = ctx.environ
    seen = {k: v for k, v in env.items() if k.startswith("NCCL_")}
    fails: list[str] = []
    warns: list[str] = []
    fixes: list[str] = []
    _graph_file(ctx, fails, warns, fixes)
    _p2p_disable(ctx, warns, fixes)
    if env.get("NCCL_SHM_DISABLE") == "1":
        warns.append("NCCL_SHM_DISABLE=1: with P2P off too, NCCL falls back to sockets")
    for var in ("NCCL_PROTO", "NCCL_ALGO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS",
                "NCCL_P2P_LEVEL"):
        if var in env:
            warns.append(f"{var}={env[var]} overrides NCCL's tuning")
    if env.get("NCCL_CUMEM_ENABLE") == "0" and env.get("NCCL_P2P_DISABLE") != "1":
        warns.append("NCCL_CUMEM_ENABLE=0 (one report needed =1 with iommu=pt)")
    ev: dict[str, Any] = {"nccl_env": seen}
    if fails:
        return fail("; ".join(fails + warns), "; ".join(fixes) or None, **ev)
    if warns:
        return warn("; ".join(warns), "; ".join(fixes) or "unset the override unless it is a "
                    "deliberate fix for this box", **ev)
    return ok(f"{len(seen)} NCCL_* variable(s), none a known trap", **ev)


@check("nccl.ld_preload", tier=0, title="LD_PRELOAD interposers")
def ld_preload(ctx: DoctorContext) -> Outcome:
    libs = host.ld_preload(ctx.root, ctx.environ)
    if not libs:
        return ok("no LD_PRELOAD / /etc/ld.so.preload", libs=libs)
    gpu = [x for x in libs if re.search(r"nccl|cuda|cudart|nvidia|nvml", os.path.basename(x))]
    missing = [x for x in libs if os.path.isabs(x) and not os.path.exists(x)]
    if missing:
        return fail(f"LD_PRELOAD names missing files: {', '.join(missing)}",
                    "fix or unset LD_PRELOAD", libs=libs)
    if gpu:
        return warn(f"LD_PRELOAD interposes GPU libraries: {', '.join(gpu)} (overrides the "
                    "wheel's NCCL/CUDA; check it is the one you want)", None, libs=libs)
    return ok(f"LD_PRELOAD: {', '.join(libs)} (no GPU library)", libs=libs)


def nccl_selection(ctx: DoctorContext) -> dict[str, Any]:
    env = ctx.environ
    wheel_libs: list[str] = []
    nv = package_dir("nvidia", ctx.paths)
    if nv is not None:
        p = nv / "nccl" / "lib" / "libnccl.so.2"
        if p.exists():
            wheel_libs.append(str(p))
    wheels = {n: (d.version if d else None) for n in ("nvidia-nccl-cu12", "nvidia-nccl-cu13")
              for d in [get_dist(n, ctx.paths)]}
    preload = [x for x in host.ld_preload(ctx.root, env) if "nccl" in os.path.basename(x)]
    so = env.get("VLLM_NCCL_SO_PATH")
    if so:
        selected, how = so, "VLLM_NCCL_SO_PATH"
    elif preload:
        selected, how = preload[0], "LD_PRELOAD"
    elif wheel_libs:
        selected, how = wheel_libs[0], "wheel"
    else:
        selected, how = None, None
    return {"selected": selected, "by": how, "wheel_libs": wheel_libs, "wheels": wheels,
            "preload": preload, "vllm_nccl_so_path": so}


@check("nccl.library", tier=0, title="NCCL library vLLM will load")
def nccl_library(ctx: DoctorContext) -> Outcome:
    s = nccl_selection(ctx)
    versions = [v for v in s["wheels"].values() if v]
    if s["by"] in ("VLLM_NCCL_SO_PATH", "LD_PRELOAD") and not os.path.exists(s["selected"]):
        return fail(f"{s['by']} points at a missing NCCL library: {s['selected']}",
                    "fix the path or unset it", **s)
    if s["selected"] is None:
        if not ctx.vllm().installed and not ctx.torch():
            return ok("no NCCL installed (no torch/vLLM here)", **s)
        return warn("no NCCL library found (no nvidia-nccl wheel, no VLLM_NCCL_SO_PATH)",
                    "pip install nvidia-nccl-cu12 (or -cu13 matching torch)", **s)
    ver = None
    if s["by"] == "wheel" and versions:
        ver = versions[0]
    else:
        m = re.search(r"libnccl\.so\.(\d+\.\d+\.\d+)", s["selected"])
        ver = m.group(1) if m else None
    s["version"] = ver
    vt = version_tuple(ver)
    for prefix, why in BAD_NCCL:
        if ver and vt[: len(prefix)] == prefix:
            return warn(f"NCCL {ver} ({s['by']}): {why}",
                        "pip install -U nvidia-nccl-cu12 (>= 2.27), or VLLM_NCCL_SO_PATH to a "
                        "newer libnccl", **s)
    return ok(f"NCCL {ver or '?'} via {s['by']}: {s['selected']}", **s)
