"""Host readiness (tier 0): container, /dev/shm, rlimits, kernel cmdline, IOMMU, UVM HMM, ZFS."""

from __future__ import annotations

from sm120kit.doctor.context import DoctorContext
from sm120kit.doctor.model import Outcome, fail, ok, skip, warn
from sm120kit.doctor.registry import check
from sm120kit.facts import host

GiB = 1 << 30
MiB = 1 << 20


def _gib(n: int) -> str:
    return f"{n / GiB:.1f} GiB" if n >= GiB else f"{n / MiB:.0f} MiB"


@check("host.container", tier=0, title="Container detection")
def container(ctx: DoctorContext) -> Outcome:
    c = ctx.cached("container", lambda: host.container(ctx.root, ctx.environ))
    if c["in_container"]:
        return ok(f"inside a container ({c['kind']}); shm and ulimit checks matter here", **c)
    return ok("not inside a container", **c)


@check("host.shm", tier=0, title="/dev/shm size (NCCL, vLLM shm broadcast)")
def shm(ctx: DoctorContext) -> Outcome:
    s = host.shm(ctx.root)
    fix = "run the container with --ipc=host or --shm-size=16g"
    if s is None:
        return fail("/dev/shm does not exist", fix)
    if s["total"] < 512 * MiB:
        return fail(f"/dev/shm is only {_gib(s['total'])} (Docker's default is 64 MiB): NCCL "
                    "fails creating its shared-memory segments", fix, **s)
    if s["total"] < 8 * GiB:
        return warn(f"/dev/shm is {_gib(s['total'])}; multi-GPU vLLM wants >= 8 GiB", fix, **s)
    if s["free"] < 1 * GiB:
        return warn(f"/dev/shm has only {_gib(s['free'])} free of {_gib(s['total'])}",
                    "remove stale /dev/shm/nccl-* / psm_* segments of dead processes", **s)
    return ok(f"/dev/shm {_gib(s['total'])} ({_gib(s['free'])} free)", **s)


@check("host.rlimits", tier=0, title="RLIMIT_MEMLOCK / STACK / NOFILE")
def rlimits(ctx: DoctorContext) -> Outcome:
    lim = ctx.cached("rlimits", host.rlimits)
    probs: list[str] = []
    mem = lim["RLIMIT_MEMLOCK"]["soft"]
    if mem != -1 and mem < 64 * GiB:
        probs.append(f"memlock {_gib(mem)} (want unlimited)")
    stack = lim["RLIMIT_STACK"]["soft"]
    if stack != -1 and stack < 8 * MiB:
        probs.append(f"stack {_gib(stack)} (< 8 MiB)")
    nofile = lim["RLIMIT_NOFILE"]
    if nofile["hard"] != -1 and nofile["hard"] < 65536:
        probs.append(f"nofile hard {nofile['hard']} (< 65536; vLLM raises the soft limit up to it)")
    if probs:
        return warn("; ".join(probs), "docker: `--ulimit memlock=-1 --ulimit stack=67108864 "
                    "--ulimit nofile=1048576`; bare metal: /etc/security/limits.conf", **lim)
    return ok(f"memlock {'unlimited' if mem == -1 else _gib(mem)}, stack "
              f"{'unlimited' if stack == -1 else _gib(stack)}, nofile {nofile['soft']}/"
              f"{nofile['hard']}", **lim)


def _gpus(ctx: DoctorContext) -> list[str]:
    return ctx.gpu_bus_ids()


@check("host.cmdline", tier=0, title="Kernel cmdline: iommu, pcie_aspm, pcie_port_pm")
def cmdline(ctx: DoctorContext) -> Outcome:
    text = host.cmdline(ctx.root)
    if text is None:
        return skip("/proc/cmdline is not readable")
    p = host.cmdline_params(text)
    keys = ("iommu", "intel_iommu", "amd_iommu", "pcie_aspm", "pcie_port_pm", "pci")
    ev = {"cmdline": text[:500], "params": {k: p[k] for k in keys if k in p}}
    gpus = _gpus(ctx)
    if not gpus:
        return skip("no NVIDIA GPU found in sysfs; cmdline not judged", **ev)
    probs: list[str] = []
    iommu_on = p.get("intel_iommu") == "on" or p.get("amd_iommu") == "on"
    if iommu_on and p.get("iommu") not in ("pt", "off") and len(gpus) > 1:
        probs.append("IOMMU enabled in translated mode (no iommu=pt): P2P between GPUs may "
                     "hang NCCL")
    if p.get("pcie_aspm") != "off" and len(gpus) > 1:
        probs.append("pcie_aspm=off not set")
    if p.get("pcie_port_pm") != "off" and len(gpus) > 1:
        probs.append("pcie_port_pm=off not set (link-down lockups under load)")
    if probs:
        return warn("; ".join(probs), "add `iommu=pt pcie_aspm=off pcie_port_pm=off` to the "
                    "kernel cmdline (GRUB_CMDLINE_LINUX), update-grub, reboot", **ev)
    return ok("cmdline has no known multi-GPU trap", **ev)


@check("host.iommu_groups", tier=0, title="IOMMU group type per GPU")
def iommu_groups(ctx: DoctorContext) -> Outcome:
    gpus = _gpus(ctx)
    if not gpus:
        return skip("no NVIDIA GPU found in sysfs")
    info = host.iommu(ctx.root, gpus)
    translated = {b: g["type"] for b, g in info["groups"].items()
                  if g["type"] and g["type"].upper().startswith("DMA")}
    if translated and len(gpus) > 1:
        lst = ", ".join(f"{b} ({t})" for b, t in translated.items())
        return warn(f"GPUs behind a translating IOMMU: {lst}; NCCL P2P can hang with P2P "
                    "reported OK", "boot with iommu=pt (or disable the IOMMU); fallback: "
                    "NCCL_P2P_DISABLE=1 plus --disable-custom-all-reduce", **info)
    if not info["units"] and not any(g["group"] for g in info["groups"].values()):
        return ok("no IOMMU active", **info)
    types = sorted({str(g["type"]) for g in info["groups"].values()})
    return ok(f"IOMMU group types: {', '.join(types)}", **info)


@check("host.uvm_hmm", tier=0, title="nvidia_uvm HMM disabled")
def uvm_hmm(ctx: DoctorContext) -> Outcome:
    u = host.uvm_hmm(ctx.root)
    val = (u["uvm_disable_hmm"] or "").strip().upper()
    if not u["module_loaded"]:
        if u["modprobe"]:
            return ok("nvidia_uvm not loaded; modprobe.d sets uvm_disable_hmm", **u)
        return skip("nvidia_uvm is not loaded", **u)
    if val in ("Y", "1"):
        return ok("nvidia_uvm uvm_disable_hmm=1", **u)
    if u["uvm_disable_hmm"] is None and u["modprobe"]:
        return ok("uvm_disable_hmm set in modprobe.d (not readable from sysfs)", **u)
    return warn("nvidia_uvm HMM is enabled (uvm_disable_hmm not set): reported NCCL P2P "
                "lockups", "`echo 'options nvidia_uvm uvm_disable_hmm=1' > "
                "/etc/modprobe.d/nvidia-uvm.conf`, then reload nvidia_uvm or reboot", **u)


@check("host.zfs_root", tier=0, title="Root filesystem is not ZFS")
def zfs_root(ctx: DoctorContext) -> Outcome:
    fs = host.root_fstype(ctx.root)
    if fs is None:
        return skip("cannot read /proc/self/mounts")
    if fs == "zfs":
        return warn("root filesystem is ZFS: several users report freezes under GPU load",
                    "put the model and caches on ext4/xfs (or tune ZFS ARC limits)", fstype=fs)
    return ok(f"root filesystem is {fs}", fstype=fs)


@check("host.nvidia_driver", tier=0, title="NVIDIA kernel module")
def nvidia_driver(ctx: DoctorContext) -> Outcome:
    v = host.driver_version(ctx.root)
    if v is None:
        gpus = _gpus(ctx)
        if gpus:
            return fail(f"{len(gpus)} NVIDIA GPU(s) in sysfs but no NVIDIA driver loaded "
                        "(/proc/driver/nvidia/version missing)",
                        "install/load the NVIDIA driver (>= 570 for CUDA 12.8)", gpus=gpus)
        return skip("no NVIDIA driver (/proc/driver/nvidia/version missing) and no NVIDIA GPU "
                    "in sysfs")
    return ok(v, version_line=v)
