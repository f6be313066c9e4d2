"""GPU and host facts for a bundle: NVML snapshots (through ``sm120kit.facts.nvml``) and cheap
host facts. Each function never raises and is bounded in time. (The doctor tiers 0-1 a bundle
also holds are run by ``sm120kit.services.snapshot``.)"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from sm120kit.evidence.stacks import ptrace_facts, py_spy_path
from sm120kit.facts.nvml import snapshot


def nvml_snapshot(timeout: float = 5.0) -> dict[str, Any]:
    """``sm120kit.facts.nvml.snapshot()`` as a dict; ``available: False`` with a reason otherwise."""
    t0 = time.time()
    snap = snapshot(timeout=timeout)
    d = snap.to_dict()
    d["taken"] = t0
    return d


def _read(path: str, limit: int = 65536) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def _run(cmd: list[str], timeout: float = 3.0) -> dict[str, Any]:
    exe = shutil.which(cmd[0])
    if exe is None:
        return {"status": "skipped", "error": f"{cmd[0]} not found"}
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "seconds": timeout}
    except OSError as exc:
        return {"status": "error", "error": str(exc)}
    return {"status": "ok" if r.returncode == 0 else "error", "rc": r.returncode,
            "stdout": r.stdout[-200_000:], "stderr": r.stderr[-4000:]}


def host_facts() -> dict[str, Any]:
    """Kernel, CPU, memory, /dev/shm, load, kernel cmdline (IOMMU flags), tool versions, the
    kernel log tail (Xid lines) when readable, ``nvidia-smi`` topology when present."""
    facts: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "time": time.time(),
    }
    try:
        facts["loadavg"] = os.getloadavg()
    except OSError:
        pass
    try:
        import psutil

        vm = psutil.virtual_memory()
        facts["memory"] = {"total": vm.total, "available": vm.available, "percent": vm.percent}
        facts["boot_time"] = psutil.boot_time()
    except Exception:
        pass
    try:
        du = shutil.disk_usage("/dev/shm")
        facts["dev_shm"] = {"total": du.total, "used": du.used, "free": du.free}
    except OSError:
        facts["dev_shm"] = None
    facts["kernel_cmdline"] = (_read("/proc/cmdline") or "").strip() or None
    facts["ptrace"] = ptrace_facts()
    facts["py_spy"] = py_spy_path()
    versions: dict[str, str | None] = {}
    for dist in ("torch", "vllm", "flashinfer-python", "nvidia-nccl-cu12", "nvidia-nccl-cu13",
                 "py-spy", "nvidia-ml-py"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    facts["versions"] = versions
    if Path("/proc/driver/nvidia/version").exists():
        facts["nvidia_driver"] = (_read("/proc/driver/nvidia/version") or "").strip()
        facts["nvidia_smi_topo"] = _run(["nvidia-smi", "topo", "-m"], timeout=5.0)
    dm = _run(["dmesg", "--ctime", "--level=err,warn"], timeout=2.0)
    if dm.get("status") == "ok":
        lines = dm.get("stdout", "").splitlines()
        facts["dmesg_tail"] = lines[-200:]
        facts["xid_lines"] = [ln for ln in lines if "Xid" in ln or "NVRM" in ln][-100:]
    else:
        facts["dmesg_tail"] = dm
    return facts
