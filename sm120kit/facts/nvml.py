"""NVML facts (tier 1): one snapshot of every visible GPU, read through the seam, never raising.

``snapshot()`` initialises NVML (no CUDA context is created), reads driver and per-GPU facts and
the pairwise P2P / topology matrices of the GPUs visible under ``CUDA_VISIBLE_DEVICES``, and shuts
NVML down. Every call is wrapped on its own: a ``NotSupported`` field is recorded as ``None`` with
its error kind in ``GpuInfo.na`` ("n/a"), never a failure. No driver, no pynvml, a hang past the
timeout: ``available=False`` with a one-line ``error``.

P2P capability indices are plain ints (READ=0, WRITE=1, NVLINK=2, ATOMICS=3, PCI=4): pynvml's
``NVML_P2P_CAPS_INDEX_READ`` is the tuple ``(0,)`` (a trailing comma in pynvml.py), which makes
``nvmlDeviceGetP2PStatus`` raise ``ctypes.ArgumentError``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from sm120kit.facts.nvml_seam import NvmlError, NvmlSeam, PynvmlSeam, RecordingSeam

P2P_CAPS: dict[str, int] = {"read": 0, "write": 1, "nvlink": 2, "atomics": 3, "pci": 4}
P2P_STATUS: dict[int, str] = {
    0: "OK",
    1: "CHIPSET_NOT_SUPPORTED",
    2: "GPU_NOT_SUPPORTED",
    3: "IOH_TOPOLOGY_NOT_SUPPORTED",
    4: "DISABLED_BY_REGKEY",
    5: "NOT_SUPPORTED",
    6: "UNKNOWN",
}
TOPOLOGY: dict[int, str] = {
    0: "INTERNAL",
    10: "SINGLE (PIX)",
    20: "MULTIPLE (PXB)",
    30: "HOSTBRIDGE (PHB)",
    40: "NODE",
    50: "SYSTEM (SYS)",
}
CLOCK_EVENT_BITS: dict[int, str] = {
    0x1: "GpuIdle",
    0x2: "ApplicationsClocksSetting",
    0x4: "SwPowerCap",
    0x8: "HwSlowdown",
    0x10: "SyncBoost",
    0x20: "SwThermalSlowdown",
    0x40: "HwThermalSlowdown",
    0x80: "HwPowerBrakeSlowdown",
    0x100: "DisplayClockSetting",
}
_CLOCK_SM, _CLOCK_MEM = 1, 2
_TEMP_GPU = 0
_ECC_UNCORRECTED, _ECC_VOLATILE = 1, 0


@dataclass
class GpuInfo:
    index: int  # CUDA (visible) index
    nvml_index: int  # physical NVML index (PCI order)
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None  # sysfs form, e.g. "0000:01:00.0"
    compute_capability: tuple[int, int] | None = None
    memory_total: int | None = None
    memory_used: int | None = None
    memory_free: int | None = None
    memory_reserved: int | None = None  # driver-reserved (nvmlMemory_v2); excluded from used
    bar1_total: int | None = None
    bar1_used: int | None = None
    bar1_free: int | None = None
    utilization_gpu: int | None = None
    utilization_memory: int | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: int | None = None
    clock_sm_mhz: int | None = None
    clock_mem_mhz: int | None = None
    clock_sm_max_mhz: int | None = None
    clock_mem_max_mhz: int | None = None
    clock_event_reasons: int | None = None
    clock_event_names: list[str] = field(default_factory=list)
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None  # device + system (slot) max
    pcie_gen_gpu_max: int | None = None  # what the GPU itself supports
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    pcie_replay_counter: int | None = None
    persistence_mode: bool | None = None
    mig_mode_current: int | None = None
    mig_mode_pending: int | None = None
    ecc_mode_current: int | None = None
    ecc_mode_pending: int | None = None
    ecc_uncorrected_volatile: int | None = None
    compute_mode: int | None = None
    compute_processes: list[dict[str, Any]] = field(default_factory=list)
    na: dict[str, str] = field(default_factory=dict)  # field -> NVML error kind ("n/a")

    @property
    def sm(self) -> str:
        """``"SM120"`` style label, or ``"SM?"``."""
        cc = self.compute_capability
        return f"SM{cc[0]}{cc[1]}" if cc else "SM?"


@dataclass
class NvmlSnapshot:
    available: bool
    error: str | None = None
    error_kind: str | None = None
    driver_version: str | None = None
    cuda_driver_version: int | None = None  # e.g. 12080
    nvml_version: str | None = None
    device_count: int | None = None  # physical GPUs NVML sees
    cuda_visible_devices: str | None = None
    visible_note: str | None = None  # problems resolving CUDA_VISIBLE_DEVICES
    order_note: str | None = None  # CUDA_DEVICE_ORDER caveat (information only)
    gpus: list[GpuInfo] = field(default_factory=list)
    p2p: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0

    @property
    def cuda_driver_version_str(self) -> str | None:
        v = self.cuda_driver_version
        return f"{v // 1000}.{(v % 1000) // 10}" if isinstance(v, int) and v > 0 else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for g in d["gpus"]:
            if g["compute_capability"] is not None:
                g["compute_capability"] = list(g["compute_capability"])
        d["cuda_driver_version_str"] = self.cuda_driver_version_str
        return d


def _s(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def sysfs_bus_id(bus_id: Any) -> str:
    """NVML ``00000000:01:00.0`` (bytes or str) -> sysfs ``0000:01:00.0`` (lower case)."""
    s = _s(bus_id).strip().lower()
    if ":" in s:
        dom, rest = s.split(":", 1)
        if len(dom) > 4:
            dom = dom[-4:]
        s = f"{dom}:{rest}"
    return s


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _memory_v2(seam: NvmlSeam, h: Any) -> Any:
    """Memory info in the v2 layout (``used`` without driver-reserved memory), else None."""
    try:
        return seam.call("nvmlDeviceGetMemoryInfo_v2", h)
    except NvmlError:
        return None


def resolve_visible(
    cvd: str | None, count: int, uuids: list[str | None]
) -> tuple[list[int], str | None]:
    """Map ``CUDA_VISIBLE_DEVICES`` to NVML indices, as the CUDA runtime does.

    Unset → all. Integers are indices, ``GPU-…`` tokens match UUIDs by prefix; parsing stops at the
    first invalid token (as CUDA does). Returns (indices, note about anything odd).
    """
    if cvd is None:
        return list(range(count)), None
    tokens = [t.strip() for t in cvd.split(",")]
    if cvd.strip() == "":
        return [], "CUDA_VISIBLE_DEVICES is empty: no GPU is visible"
    out: list[int] = []
    notes: list[str] = []
    for tok in tokens:
        idx: int | None = None
        if tok.lstrip("-").isdigit():
            n = int(tok)
            if 0 <= n < count:
                idx = n
        elif tok.upper().startswith("GPU-"):
            matches = [i for i, u in enumerate(uuids) if u and u.lower().startswith(tok.lower())]
            if len(matches) == 1:
                idx = matches[0]
        elif tok.upper().startswith("MIG-"):
            notes.append(f"MIG device {tok} cannot be mapped through NVML here")
            break
        if idx is None:
            notes.append(f"CUDA_VISIBLE_DEVICES token {tok!r} matches no GPU; CUDA stops there")
            break
        if idx in out:
            notes.append(f"GPU {tok} listed twice in CUDA_VISIBLE_DEVICES")
            break
        out.append(idx)
    return out, "; ".join(notes) or None


def _default_seam() -> NvmlSeam:
    return PynvmlSeam()


def _collect(seam: NvmlSeam, environ: Mapping[str, str]) -> NvmlSnapshot:
    snap = NvmlSnapshot(available=False, cuda_visible_devices=environ.get("CUDA_VISIBLE_DEVICES"))
    try:
        seam.call("nvmlInit")
    except NvmlError as exc:
        snap.error_kind = exc.kind
        if exc.kind in ("library_not_found", "driver_not_loaded"):
            snap.error = f"no NVIDIA driver ({exc.kind.replace('_', ' ')}: {exc})"
        else:
            snap.error = f"NVML init failed ({exc.kind}): {exc}"
        return snap
    try:
        _fill(seam, snap, environ)
        snap.available = True
    except NvmlError as exc:
        snap.error_kind = exc.kind
        snap.error = f"NVML query failed ({exc.kind}): {exc}"
    finally:
        try:
            seam.call("nvmlShutdown")
        except NvmlError:
            pass
    return snap


def _fill(seam: NvmlSeam, snap: NvmlSnapshot, environ: Mapping[str, str]) -> None:
    def opt(fn: str, *args: Any) -> Any:
        try:
            return seam.call(fn, *args)
        except NvmlError:
            return None

    v = opt("nvmlSystemGetDriverVersion")
    snap.driver_version = _s(v) if v is not None else None
    cv = opt("nvmlSystemGetCudaDriverVersion_v2")
    if cv is None:
        cv = opt("nvmlSystemGetCudaDriverVersion")
    snap.cuda_driver_version = int(cv) if cv is not None else None
    nv = opt("nvmlSystemGetNVMLVersion")
    snap.nvml_version = _s(nv) if nv is not None else None
    count = int(seam.call("nvmlDeviceGetCount"))
    snap.device_count = count
    handles: list[Any] = []
    handle_errors: dict[int, str] = {}
    for i in range(count):
        try:
            handles.append(seam.call("nvmlDeviceGetHandleByIndex", i))
        except NvmlError as exc:  # e.g. GPU_IS_LOST / NO_PERMISSION for one GPU
            handles.append(None)
            handle_errors[i] = exc.kind
    uuids: list[str | None] = []
    for h in handles:
        u = opt("nvmlDeviceGetUUID", h) if h is not None else None
        uuids.append(_s(u) if u is not None else None)
    visible, note = resolve_visible(environ.get("CUDA_VISIBLE_DEVICES"), count, uuids)
    order = environ.get("CUDA_DEVICE_ORDER")
    if environ.get("CUDA_VISIBLE_DEVICES") and order != "PCI_BUS_ID" and len(visible) > 1:
        snap.order_note = ("CUDA_DEVICE_ORDER is not PCI_BUS_ID: indices in CUDA_VISIBLE_DEVICES "
                           "were read in NVML's PCI order; CUDA orders fastest first (the same "
                           "for identical GPUs)")
    snap.visible_note = note
    for cuda_idx, phys in enumerate(visible):
        if handles[phys] is None:
            snap.gpus.append(GpuInfo(index=cuda_idx, nvml_index=phys,
                                     na={"handle": handle_errors[phys]}))
            continue
        snap.gpus.append(_gpu(seam, cuda_idx, phys, handles[phys], uuids[phys]))
    snap.p2p = _pairs(seam, [handles[p] for p in visible])


def _gpu(seam: NvmlSeam, idx: int, phys: int, h: Any, uuid: str | None) -> GpuInfo:
    g = GpuInfo(index=idx, nvml_index=phys, uuid=uuid)

    def get(name: str, fn: str, *args: Any) -> Any:
        try:
            return seam.call(fn, *args)
        except NvmlError as exc:
            g.na[name] = exc.kind
            return None

    n = get("name", "nvmlDeviceGetName", h)
    g.name = _s(n) if n is not None else None
    pci = get("pci_bus_id", "nvmlDeviceGetPciInfo", h)
    if pci is not None:
        g.pci_bus_id = sysfs_bus_id(_get(pci, "busId"))
    cc = get("compute_capability", "nvmlDeviceGetCudaComputeCapability", h)
    if cc is not None:
        g.compute_capability = (int(cc[0]), int(cc[1]))
    _gpu_memory(g, get, seam, h)
    _gpu_clocks(g, get, seam, h)
    g.pcie_gen_current = get("pcie_gen_current", "nvmlDeviceGetCurrPcieLinkGeneration", h)
    g.pcie_gen_max = get("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", h)
    g.pcie_gen_gpu_max = get("pcie_gen_gpu_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration", h)
    g.pcie_width_current = get("pcie_width_current", "nvmlDeviceGetCurrPcieLinkWidth", h)
    g.pcie_width_max = get("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth", h)
    g.pcie_replay_counter = get("pcie_replay_counter", "nvmlDeviceGetPcieReplayCounter", h)
    _gpu_settings(g, get, h)
    return g


_Get = Callable[..., Any]  # get(field name, NVML function, *args): the value, or None (noted in na)


def _gpu_memory(g: GpuInfo, get: _Get, seam: NvmlSeam, h: Any) -> None:
    """Framebuffer (v2 when the driver has it), BAR1 and utilization."""
    mem = _memory_v2(seam, h)
    if mem is None:
        mem = get("memory", "nvmlDeviceGetMemoryInfo", h)
    if mem is not None:
        g.memory_total, g.memory_used, g.memory_free = (
            int(_get(mem, "total")), int(_get(mem, "used")), int(_get(mem, "free")))
        reserved = _get(mem, "reserved")
        g.memory_reserved = int(reserved) if reserved is not None else None
    bar1 = get("bar1", "nvmlDeviceGetBAR1MemoryInfo", h)
    if bar1 is not None:
        g.bar1_total, g.bar1_used, g.bar1_free = (
            int(_get(bar1, "bar1Total")), int(_get(bar1, "bar1Used")), int(_get(bar1, "bar1Free")))
    util = get("utilization", "nvmlDeviceGetUtilizationRates", h)
    if util is not None:
        g.utilization_gpu, g.utilization_memory = int(_get(util, "gpu")), int(_get(util, "memory"))


def _gpu_clocks(g: GpuInfo, get: _Get, seam: NvmlSeam, h: Any) -> None:
    """Power, temperature, clocks and the clock-event (throttle) reasons."""
    p = get("power_draw", "nvmlDeviceGetPowerUsage", h)
    g.power_draw_w = p / 1000.0 if p is not None else None
    p = get("power_limit", "nvmlDeviceGetEnforcedPowerLimit", h)
    g.power_limit_w = p / 1000.0 if p is not None else None
    g.temperature_c = get("temperature", "nvmlDeviceGetTemperature", h, _TEMP_GPU)
    g.clock_sm_mhz = get("clock_sm", "nvmlDeviceGetClockInfo", h, _CLOCK_SM)
    g.clock_mem_mhz = get("clock_mem", "nvmlDeviceGetClockInfo", h, _CLOCK_MEM)
    g.clock_sm_max_mhz = get("clock_sm_max", "nvmlDeviceGetMaxClockInfo", h, _CLOCK_SM)
    g.clock_mem_max_mhz = get("clock_mem_max", "nvmlDeviceGetMaxClockInfo", h, _CLOCK_MEM)
    try:
        reasons = seam.call("nvmlDeviceGetCurrentClocksEventReasons", h)
    except NvmlError:
        reasons = get("clock_event_reasons", "nvmlDeviceGetCurrentClocksThrottleReasons", h)
    if reasons is not None:
        g.clock_event_reasons = int(reasons)
        g.clock_event_names = [nm for bit, nm in CLOCK_EVENT_BITS.items() if int(reasons) & bit]


def _gpu_settings(g: GpuInfo, get: _Get, h: Any) -> None:
    """Persistence, MIG, ECC (and its uncorrected count), compute mode and compute processes."""
    pm = get("persistence_mode", "nvmlDeviceGetPersistenceMode", h)
    g.persistence_mode = bool(pm) if pm is not None else None
    mig = get("mig_mode", "nvmlDeviceGetMigMode", h)
    if mig is not None:
        g.mig_mode_current, g.mig_mode_pending = int(mig[0]), int(mig[1])
    ecc = get("ecc_mode", "nvmlDeviceGetEccMode", h)
    if ecc is not None:
        g.ecc_mode_current, g.ecc_mode_pending = int(ecc[0]), int(ecc[1])
        if g.ecc_mode_current:
            g.ecc_uncorrected_volatile = get(
                "ecc_uncorrected_volatile", "nvmlDeviceGetTotalEccErrors", h,
                _ECC_UNCORRECTED, _ECC_VOLATILE)
    g.compute_mode = get("compute_mode", "nvmlDeviceGetComputeMode", h)
    procs = get("compute_processes", "nvmlDeviceGetComputeRunningProcesses", h)
    for pr in procs or []:
        used = _get(pr, "usedGpuMemory")
        g.compute_processes.append({"pid": int(_get(pr, "pid")),
                                    "used_memory": int(used) if used is not None else None})


def _pairs(seam: NvmlSeam, handles: list[Any]) -> dict[str, Any]:
    n = len(handles)
    caps: dict[str, list[list[int | None]]] = {}
    errors: dict[str, str] = {}
    for cap, cap_idx in P2P_CAPS.items():
        m: list[list[int | None]] = [[None] * n for _ in range(n)]
        for i in range(n):
            for j in range(n):
                if i == j or handles[i] is None or handles[j] is None:
                    continue
                try:
                    m[i][j] = int(seam.call("nvmlDeviceGetP2PStatus", handles[i], handles[j],
                                            cap_idx))
                except NvmlError as exc:
                    errors[f"{cap}[{i}][{j}]"] = exc.kind
        caps[cap] = m
    topo: list[list[int | None]] = [[None] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if i == j or handles[i] is None or handles[j] is None:
                continue
            try:
                topo[i][j] = int(seam.call("nvmlDeviceGetTopologyCommonAncestor", handles[i],
                                           handles[j]))
            except NvmlError as exc:
                errors[f"topology[{i}][{j}]"] = exc.kind
    return {"caps": caps, "topology": topo, "errors": errors,
            "status_names": {str(k): v for k, v in P2P_STATUS.items()},
            "topology_names": {str(k): v for k, v in TOPOLOGY.items()}}


def snapshot(
    timeout: float = 5.0,
    *,
    seam: NvmlSeam | Callable[[], NvmlSeam] | None = None,
    environ: Mapping[str, str] | None = None,
) -> NvmlSnapshot:
    """Read NVML once; never raises. ``seam``: a seam or a factory (default: real pynvml)."""
    import time

    env = os.environ if environ is None else environ
    t0 = time.perf_counter()
    box: list[NvmlSnapshot] = []

    def work() -> None:
        try:
            s: Any = seam if seam is not None else _default_seam
            the_seam = s() if callable(s) and not hasattr(s, "call") else s
            box.append(_collect(the_seam, env))
        except NvmlError as exc:
            msg = ("nvidia-ml-py (pynvml) is not installed: pip install nvidia-ml-py"
                   if exc.kind == "no_pynvml" else str(exc))
            box.append(NvmlSnapshot(available=False, error=msg, error_kind=exc.kind))
        except Exception as exc:  # a broken binding must not take doctor down
            box.append(NvmlSnapshot(available=False, error=f"NVML read crashed: "
                                    f"{type(exc).__name__}: {exc}", error_kind="exception"))

    th = threading.Thread(target=work, name="sm120kit-nvml", daemon=True)
    th.start()
    th.join(timeout)
    if not box:
        snap = NvmlSnapshot(available=False, error=f"NVML did not answer within {timeout:g} s "
                            "(driver hung? try nvidia-smi)", error_kind="timeout")
    else:
        snap = box[0]
    snap.cuda_visible_devices = env.get("CUDA_VISIBLE_DEVICES")
    snap.duration_s = round(time.perf_counter() - t0, 4)
    return snap


def main(argv: list[str] | None = None) -> int:
    """``python -m sm120kit.facts.nvml [--record FILE] [--timeout S]``: print the snapshot as
    JSON; ``--record`` also writes every NVML answer for replay through ``RecordedSeam``."""
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m sm120kit.facts.nvml")
    ap.add_argument("--record", metavar="FILE")
    ap.add_argument("--timeout", type=float, default=10.0)
    a = ap.parse_args(argv)
    rec: list[RecordingSeam] = []

    def factory() -> NvmlSeam:
        r = RecordingSeam(PynvmlSeam())
        rec.append(r)
        return r

    snap = snapshot(a.timeout, seam=factory if a.record else None)
    print(json.dumps(snap.to_dict(), indent=2))
    if a.record and rec:
        with open(a.record, "w") as fh:
            json.dump(rec[0].answers, fh, indent=1, sort_keys=True)
    return 0 if snap.available else 2


if __name__ == "__main__":
    import sys

    sys.exit(main())
