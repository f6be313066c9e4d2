"""Host facts from procfs / sysfs (tier 0), all relative to a ``root`` (default ``/``).

Tests lay out ``proc/``, ``sys/``, ``etc/`` trees under a tmp dir and pass it as ``root``.
Readers return plain values or ``None`` when the file is absent or unreadable; they never raise.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

NVIDIA_VENDOR = "0x10de"
_BDF_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def _p(root: str | os.PathLike[str], rel: str) -> Path:
    return Path(root) / rel.lstrip("/")


def read(root: str | os.PathLike[str], rel: str, limit: int = 1 << 20) -> str | None:
    try:
        with open(_p(root, rel), "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def cmdline(root: str = "/") -> str | None:
    s = read(root, "proc/cmdline")
    return s.replace("\x00", " ").strip() if s is not None else None


def cmdline_params(text: str | None) -> dict[str, str]:
    """``"a=1 b quiet"`` -> ``{"a": "1", "b": "", "quiet": ""}`` (last one wins)."""
    out: dict[str, str] = {}
    for tok in (text or "").split():
        k, _, v = tok.partition("=")
        out[k] = v
    return out


def container(root: str = "/", environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Container signals: ``/.dockerenv``, ``/run/.containerenv``, cgroup paths, ``$container``."""
    signals: list[str] = []
    kind: str | None = None
    if _p(root, ".dockerenv").exists():
        signals.append("/.dockerenv")
        kind = "docker"
    if _p(root, "run/.containerenv").exists():
        signals.append("/run/.containerenv")
        kind = kind or "podman"
    cg = read(root, "proc/1/cgroup") or ""
    for word, k in (("kubepods", "kubernetes"), ("docker", "docker"), ("containerd", "containerd"),
                    ("libpod", "podman"), ("lxc", "lxc")):
        if word in cg:
            signals.append(f"/proc/1/cgroup mentions {word}")
            kind = kind or k
            break
    env = environ or {}
    if env.get("container"):
        signals.append(f"$container={env['container']}")
        kind = kind or env["container"]
    if env.get("KUBERNETES_SERVICE_HOST"):
        signals.append("$KUBERNETES_SERVICE_HOST")
        kind = kind or "kubernetes"
    return {"in_container": bool(signals), "kind": kind, "signals": signals}


def shm(root: str = "/") -> dict[str, Any] | None:
    """Size and free bytes of ``/dev/shm`` (``statvfs``), ``None`` when absent."""
    p = _p(root, "dev/shm")
    try:
        st = os.statvfs(p)
    except OSError:
        return None
    return {"path": str(p), "total": st.f_blocks * st.f_frsize, "free": st.f_bavail * st.f_frsize}


def rlimits() -> dict[str, dict[str, int]]:
    """Soft and hard RLIMIT_MEMLOCK / STACK / NOFILE of this process (-1 = unlimited)."""
    import resource

    def conv(v: int) -> int:
        return -1 if v == resource.RLIM_INFINITY else int(v)

    out: dict[str, dict[str, int]] = {}
    for name in ("RLIMIT_MEMLOCK", "RLIMIT_STACK", "RLIMIT_NOFILE"):
        soft, hard = resource.getrlimit(getattr(resource, name))
        out[name] = {"soft": conv(soft), "hard": conv(hard)}
    return out


def nvidia_pci_devices(root: str = "/") -> list[str]:
    """Bus ids (``0000:01:00.0``) of NVIDIA display/3D controllers in ``/sys/bus/pci/devices``."""
    base = _p(root, "sys/bus/pci/devices")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    out = []
    for n in names:
        vendor = (read(root, f"sys/bus/pci/devices/{n}/vendor") or "").strip().lower()
        cls = (read(root, f"sys/bus/pci/devices/{n}/class") or "").strip().lower()
        if vendor == NVIDIA_VENDOR and cls.startswith(("0x0300", "0x0302")):
            out.append(n.lower())
    return out


def iommu(root: str = "/", bus_ids: list[str] | None = None) -> dict[str, Any]:
    """Active IOMMU units and each GPU's IOMMU group and its type (DMA, DMA-FQ, identity)."""
    try:
        units = sorted(os.listdir(_p(root, "sys/class/iommu")))
    except OSError:
        units = []
    groups: dict[str, dict[str, Any]] = {}
    for bdf in bus_ids if bus_ids is not None else nvidia_pci_devices(root):
        link = _p(root, f"sys/bus/pci/devices/{bdf}/iommu_group")
        try:
            group = os.path.basename(os.readlink(link))
        except OSError:
            groups[bdf] = {"group": None, "type": None}
            continue
        gtype = read(root, f"sys/kernel/iommu_groups/{group}/type")
        groups[bdf] = {"group": group, "type": gtype.strip() if gtype else None}
    return {"units": units, "groups": groups}


def uvm_hmm(root: str = "/") -> dict[str, Any]:
    """``nvidia_uvm``'s ``uvm_disable_hmm`` (loaded value and modprobe.d setting)."""
    loaded = read(root, "sys/module/nvidia_uvm/parameters/uvm_disable_hmm")
    configured: list[str] = []
    d = _p(root, "etc/modprobe.d")
    try:
        confs = sorted(os.listdir(d))
    except OSError:
        confs = []
    for c in confs:
        text = read(root, f"etc/modprobe.d/{c}") or ""
        for line in text.splitlines():
            if "uvm_disable_hmm" in line and not line.lstrip().startswith("#"):
                configured.append(f"{c}: {line.strip()}")
    return {
        "module_loaded": _p(root, "sys/module/nvidia_uvm").exists(),
        "uvm_disable_hmm": loaded.strip() if loaded is not None else None,
        "modprobe": configured,
    }


def root_fstype(root: str = "/") -> str | None:
    """Filesystem type of ``/`` from ``/proc/self/mounts`` (the last mount on ``/`` wins)."""
    text = read(root, "proc/self/mounts") or read(root, "proc/mounts")
    if text is None:
        return None
    fstype = None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "/":
            fstype = parts[2]
    return fstype


def driver_version(root: str = "/") -> str | None:
    """The NVIDIA kernel module line of ``/proc/driver/nvidia/version``."""
    text = read(root, "proc/driver/nvidia/version")
    if not text:
        return None
    return text.splitlines()[0].strip()


def ld_preload(root: str = "/", environ: Mapping[str, str] | None = None) -> list[str]:
    """Libraries from ``$LD_PRELOAD`` and ``/etc/ld.so.preload``."""
    env = environ or {}
    out = [x for x in re.split(r"[:\s]+", env.get("LD_PRELOAD", "")) if x]
    text = read(root, "etc/ld.so.preload") or ""
    out += [x for x in text.split() if x and not x.startswith("#")]
    return out


def upstream_bridges(root: str, bdf: str) -> list[str]:
    """Bus ids of the PCI bridges above ``bdf`` (nearest first), from the sysfs device path."""
    link = _p(root, f"sys/bus/pci/devices/{bdf}")
    try:
        target = os.path.realpath(link)
    except OSError:
        return []
    parts = [p for p in Path(target).parts if _BDF_RE.match(p)]
    if parts and parts[-1] == bdf:
        parts = parts[:-1]
    return list(reversed(parts))


def aer_counters(root: str, bdf: str) -> dict[str, dict[str, int]] | None:
    """``aer_dev_correctable`` / ``_nonfatal`` / ``_fatal`` counters of a device (non-zero kept)."""
    out: dict[str, dict[str, int]] = {}
    found = False
    for kind in ("correctable", "nonfatal", "fatal"):
        text = read(root, f"sys/bus/pci/devices/{bdf}/aer_dev_{kind}")
        if text is None:
            continue
        found = True
        vals: dict[str, int] = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit() and int(parts[1]):
                vals[parts[0]] = int(parts[1])
        out[kind] = vals
    return out if found else None


ACS_CAP_ID = 0x000D
ACS_BITS = {0: "SrcValid", 1: "TransBlk", 2: "ReqRedir", 3: "CmpltRedir", 4: "UpstreamFwd",
            5: "EgressCtrl", 6: "DirectTrans"}


def acs_control(root: str, bdf: str) -> dict[str, Any]:
    """ACS control register from the extended config space (needs root: non-root reads 64 B).

    Returns ``{"readable": bool, "present": bool, "ctl": int|None, "bits": [...]}``.
    """
    try:
        with open(_p(root, f"sys/bus/pci/devices/{bdf}/config"), "rb") as fh:
            cfg = fh.read(4096)
    except OSError as exc:
        return {"readable": False, "reason": str(exc), "present": False, "ctl": None, "bits": []}
    if len(cfg) <= 256:
        return {"readable": False, "reason": f"only {len(cfg)} bytes of config space readable "
                "(extended space needs root)", "present": False, "ctl": None, "bits": []}
    off = 0x100
    seen: set[int] = set()
    while off and off not in seen and off + 8 <= len(cfg):
        seen.add(off)
        hdr = int.from_bytes(cfg[off: off + 4], "little")
        if hdr in (0, 0xFFFFFFFF):
            break
        cap_id, nxt = hdr & 0xFFFF, (hdr >> 20) & 0xFFC
        if cap_id == ACS_CAP_ID:
            ctl = int.from_bytes(cfg[off + 6: off + 8], "little")
            bits = [nm for b, nm in ACS_BITS.items() if ctl & (1 << b)]
            return {"readable": True, "present": True, "ctl": ctl, "bits": bits, "offset": off}
        off = nxt
    return {"readable": True, "present": False, "ctl": None, "bits": []}
