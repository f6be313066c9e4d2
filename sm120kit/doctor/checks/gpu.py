"""GPU state from NVML (tier 1, no CUDA context): capability, memory, PCIe, clocks, P2P."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from sm120kit.doctor.context import DoctorContext
from sm120kit.doctor.model import Outcome, fail, ok, skip, warn
from sm120kit.doctor.registry import check
from sm120kit.facts.nvml import P2P_STATUS, TOPOLOGY, GpuInfo

GiB = 1 << 30
BAD_CLOCK_BITS = {"HwSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown", "SwThermalSlowdown"}


def _snap_or_skip(ctx: DoctorContext) -> tuple[Any, Outcome | None]:
    snap = ctx.nvml()
    if not snap.available:
        return snap, skip("NVML unavailable (see gpu.nvml)")
    if not snap.gpus:
        return snap, skip("no GPU visible" + (f" ({snap.visible_note})"
                                              if snap.visible_note else ""))
    return snap, None


def _with_gpus(fn: Callable[[DoctorContext, Any], Outcome]) -> Callable[[DoctorContext], Outcome]:
    """A check over the NVML snapshot: skipped when NVML is unavailable or no GPU is visible."""

    @functools.wraps(fn)
    def run(ctx: DoctorContext) -> Outcome:
        snap, sk = _snap_or_skip(ctx)
        return sk if sk else fn(ctx, snap)

    return run


def _label(g: GpuInfo) -> str:
    return f"GPU {g.index} {g.name or '?'}"


@check("gpu.nvml", tier=1, title="NVIDIA driver reachable through NVML", timeout=10.0)
def nvml(ctx: DoctorContext) -> Outcome:
    snap = ctx.nvml()
    ev = {"snapshot": snap.to_dict()}
    if not snap.available:
        if snap.error_kind == "no_pynvml":
            return warn(snap.error or "pynvml missing", "pip install nvidia-ml-py", **ev)
        if snap.error_kind in ("library_not_found", "driver_not_loaded"):
            return fail(snap.error or "no NVIDIA driver", "install/load the NVIDIA driver "
                        "(and run with --gpus all / the NVIDIA container runtime in Docker)", **ev)
        return fail(snap.error or "NVML failed", "check `nvidia-smi`; a hung driver needs a "
                    "reset or reboot", **ev)
    msg = (f"driver {snap.driver_version}, CUDA {snap.cuda_driver_version_str}, "
           f"{len(snap.gpus)} of {snap.device_count} GPU(s) visible")
    if snap.visible_note:
        return warn(f"{msg}; {snap.visible_note}", "fix CUDA_VISIBLE_DEVICES (indices or "
                    "GPU-UUIDs); set CUDA_DEVICE_ORDER=PCI_BUS_ID", **ev)
    if not snap.gpus:
        return fail(f"{msg}: no GPU", "check CUDA_VISIBLE_DEVICES", **ev)
    lost = [g for g in snap.gpus if "handle" in g.na]
    if lost:
        return fail(f"{msg}; NVML cannot open " + ", ".join(
            f"GPU {g.index} (NVML {g.nvml_index}: {g.na['handle']})" for g in lost),
            "check `nvidia-smi` and the kernel log (Xid 79 = fallen off the bus); reboot or "
            "reset the GPU", **ev)
    return ok(msg, **ev)


@check("gpu.sm120", tier=1, title="Every visible GPU is SM120 (compute capability 12.0)")
@_with_gpus
def sm120(ctx: DoctorContext, snap: Any) -> Outcome:
    per = {str(g.index): {"name": g.name, "cc": list(g.compute_capability)
                          if g.compute_capability else None} for g in snap.gpus}
    bad = [g for g in snap.gpus if g.compute_capability != (12, 0)]
    if not bad:
        names = sorted({g.name or "?" for g in snap.gpus})
        return ok(f"{len(snap.gpus)} SM120 GPU(s): {', '.join(names)}", gpus=per)
    unknown = [g for g in bad if g.compute_capability is None]
    other12 = [g for g in bad if g.compute_capability and g.compute_capability[0] == 12]
    hard = [g for g in bad if g not in unknown and g not in other12]
    msgs = [f"{_label(g)} is {g.sm} ({g.compute_capability[0]}.{g.compute_capability[1]}), "
            "not SM120" for g in hard if g.compute_capability]
    if hard:
        return fail("; ".join(msgs), "FLASHINFER_MLA_SPARSE_SM120 needs SM120 GPUs (RTX PRO 6000 "
                    "Blackwell / RTX 5090); use another attention backend on this GPU", gpus=per)
    if other12:
        return warn("; ".join(f"{_label(g)} is {g.sm} ({g.compute_capability[0]}."
                              f"{g.compute_capability[1]}): CC major 12 but not 12.0; FlashInfer "
                              "needs CUDA >= 12.9 there" for g in other12 if g.compute_capability),
                    None, gpus=per)
    return warn("NVML did not report the compute capability of "
                + ", ".join(_label(g) for g in unknown), None, gpus=per)


@check("gpu.memory", tier=1, title="GPU memory free, stray compute processes")
@_with_gpus
def memory(ctx: DoctorContext, snap: Any) -> Outcome:
    per: dict[str, Any] = {}
    probs: list[str] = []
    for g in snap.gpus:
        per[str(g.index)] = {"total": g.memory_total, "used": g.memory_used,
                             "processes": g.compute_processes}
        if g.compute_processes:
            pids = ", ".join(str(p["pid"]) for p in g.compute_processes)
            probs.append(f"{_label(g)}: compute processes {pids}")
        elif g.memory_used and g.memory_total and g.memory_used > 2 * GiB:
            probs.append(f"{_label(g)}: {g.memory_used / GiB:.1f} GiB used by no listed process")
    if probs:
        return warn("; ".join(probs), "stop the other processes before launching (vLLM sizes "
                    "its KV cache from --gpu-memory-utilization of the total)", gpus=per)
    tot = sum(g.memory_total or 0 for g in snap.gpus)
    return ok(f"{tot / GiB:.0f} GiB total, no compute process running", gpus=per)


@check("gpu.bar1", tier=1, title="BAR1 size (Resizable BAR)")
@_with_gpus
def bar1(ctx: DoctorContext, snap: Any) -> Outcome:
    small = [g for g in snap.gpus if g.bar1_total is not None and g.memory_total
             and g.bar1_total < min(g.memory_total, 32 * GiB)]
    per = {str(g.index): {"bar1_total": g.bar1_total, "memory_total": g.memory_total}
           for g in snap.gpus}
    if small:
        return warn("small BAR1: " + ", ".join(f"{_label(g)} {g.bar1_total / GiB:.2f} GiB"
                                              for g in small if g.bar1_total is not None)
                    + " (P2P over PCIe is crippled)", "enable Resizable BAR and Above 4G "
                    "decoding in the BIOS", gpus=per)
    if all(g.bar1_total is None for g in snap.gpus):
        return skip("BAR1 n/a from NVML", gpus=per)
    return ok("BAR1 covers GPU memory", gpus=per)


@check("gpu.pcie", tier=1, title="PCIe link: max gen/width, replay counters")
@_with_gpus
def pcie(ctx: DoctorContext, snap: Any) -> Outcome:
    per: dict[str, Any] = {}
    probs: list[str] = []
    for g in snap.gpus:
        per[str(g.index)] = {"gen": [g.pcie_gen_current, g.pcie_gen_max, g.pcie_gen_gpu_max],
                             "width": [g.pcie_width_current, g.pcie_width_max],
                             "replays": g.pcie_replay_counter}
        if g.pcie_gen_max and g.pcie_gen_gpu_max and g.pcie_gen_max < g.pcie_gen_gpu_max:
            probs.append(f"{_label(g)}: slot limits the link to Gen{g.pcie_gen_max} "
                         f"(GPU supports Gen{g.pcie_gen_gpu_max})")
        if g.pcie_width_max and g.pcie_width_max < 16:
            probs.append(f"{_label(g)}: link width x{g.pcie_width_max}")
        if g.pcie_replay_counter:
            probs.append(f"{_label(g)}: {g.pcie_replay_counter} PCIe replays")
    if probs:
        return warn("; ".join(probs), "reseat the GPU / riser, check BIOS bifurcation and "
                    "Gen setting; replays mean signal-integrity errors", gpus=per)
    return ok("links at their max gen/width capability; no replays "
              "(current gen drops at idle: normal)", gpus=per)


@check("gpu.clocks", tier=1, title="Clock-event reasons (throttling)")
@_with_gpus
def clocks(ctx: DoctorContext, snap: Any) -> Outcome:
    per = {str(g.index): {"reasons": g.clock_event_names, "sm_mhz": g.clock_sm_mhz,
                          "sm_max_mhz": g.clock_sm_max_mhz, "temperature_c": g.temperature_c,
                          "power_w": g.power_draw_w, "power_limit_w": g.power_limit_w}
           for g in snap.gpus}
    bad = [(g, sorted(set(g.clock_event_names) & BAD_CLOCK_BITS)) for g in snap.gpus]
    bad = [(g, b) for g, b in bad if b]
    if bad:
        return warn("; ".join(f"{_label(g)}: {', '.join(b)}" for g, b in bad),
                    "check cooling, power cabling and power limits (nvidia-smi -q -d "
                    "PERFORMANCE)", gpus=per)
    return ok("no hardware/thermal slowdown", gpus=per)


@check("gpu.settings", tier=1, title="Persistence, MIG, ECC, compute mode")
@_with_gpus
def settings(ctx: DoctorContext, snap: Any) -> Outcome:
    per: dict[str, Any] = {}
    fails: list[str] = []
    warns: list[str] = []
    for g in snap.gpus:
        per[str(g.index)] = {"persistence": g.persistence_mode, "mig": g.mig_mode_current,
                             "ecc": g.ecc_mode_current, "ecc_uncorrected": g.ecc_uncorrected_volatile,
                             "compute_mode": g.compute_mode,
                             "na": {k: v for k, v in g.na.items()
                                    if k in ("persistence_mode", "mig_mode", "ecc_mode")}}
        if g.ecc_uncorrected_volatile:
            fails.append(f"{_label(g)}: {g.ecc_uncorrected_volatile} uncorrected ECC errors")
        if g.mig_mode_current == 1:
            warns.append(f"{_label(g)}: MIG enabled")
        if g.persistence_mode is False:
            warns.append(f"{_label(g)}: persistence mode off")
        if g.compute_mode in (2, 3):
            warns.append(f"{_label(g)}: compute mode exclusive/prohibited ({g.compute_mode})")
    if fails:
        return fail("; ".join(fails + warns), "drain the GPU and check `nvidia-smi -q -d ECC`; "
                    "a reset clears volatile counts", gpus=per)
    if warns:
        return warn("; ".join(warns), "sudo nvidia-smi -pm 1; nvidia-smi -mig 0; nvidia-smi "
                    "-c DEFAULT (as applicable)", gpus=per)
    return ok("persistence on, MIG off, no uncorrected ECC (n/a fields tolerated)", gpus=per)


@check("gpu.p2p", tier=1, title="Pairwise P2P status and topology (NVML)")
@_with_gpus
def p2p(ctx: DoctorContext, snap: Any) -> Outcome:
    n = len(snap.gpus)
    if n < 2:
        return skip("one GPU visible: no pairs")
    caps = snap.p2p.get("caps", {})
    topo = snap.p2p.get("topology", [])
    bad: list[str] = []
    for cap in ("read", "write"):
        m = caps.get(cap) or []
        for i in range(n):
            for j in range(n):
                if i != j and i < len(m) and m[i][j] not in (0, None):
                    bad.append(f"{cap} {i}->{j} {P2P_STATUS.get(m[i][j], m[i][j])}")
    far = [f"{i}-{j} {TOPOLOGY.get(topo[i][j], topo[i][j])}" for i in range(n)
           for j in range(i + 1, n) if i < len(topo) and topo[i][j] is not None
           and topo[i][j] >= 40]
    ev = {"p2p": snap.p2p}
    note = ("NVML 'OK' does not prove P2P works (IOMMU/ACS can still hang NCCL): run "
            "`sm120kit doctor --deep`")
    if bad:
        return warn(f"P2P not supported: {', '.join(bad[:8])}{' ...' if len(bad) > 8 else ''}",
                    "stock drivers disable P2P on GeForce; NCCL then uses SHM (slower). "
                    + note, **ev)
    if far:
        return warn(f"GPU pairs across CPU/NUMA (NODE/SYS): {', '.join(far[:8])}: P2P is "
                    "staged through system memory", "place TP groups under one PCIe switch / "
                    "root complex where possible", **ev)
    return ok(f"P2P read/write OK for all {n * (n - 1)} ordered pairs. {note}", **ev)
