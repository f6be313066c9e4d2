"""Kernel log lines (Xid, AER) from ``dmesg`` / ``journalctl -k`` with a timeout, or a file."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

_XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)(?:, (.*))?")
XID_MEANING = {
    13: "graphics engine exception", 31: "GPU memory page fault", 43: "GPU stopped processing",
    45: "preemptive cleanup", 48: "double-bit ECC error", 61: "internal micro-controller "
    "breakpoint", 62: "internal micro-controller halt", 63: "row remapping event",
    64: "row remapping failure", 74: "NVLink error", 79: "GPU has fallen off the bus",
    92: "high single-bit ECC rate", 94: "contained ECC error", 95: "uncontained ECC error",
    119: "GSP RPC timeout", 120: "GSP error",
}
SEVERE_XIDS = {48, 64, 74, 79, 95, 119, 120}


def read_kernel_log(root: str = "/", timeout: float = 5.0) -> dict[str, Any]:
    """``{"source", "text"}``; for ``root != "/"`` reads ``var/log/kern.log`` or
    ``var/log/dmesg`` under it (tests), else ``dmesg`` then ``journalctl -k -b``."""
    if root not in ("/", ""):
        for rel in ("var/log/kern.log", "var/log/dmesg"):
            p = Path(root) / rel
            try:
                return {"source": str(p), "text": p.read_text(errors="replace")[-4_000_000:]}
            except OSError:
                continue
        return {"source": "no kernel log file under root", "text": None}
    for cmd in (["dmesg", "--notime"], ["journalctl", "-k", "-b", "--no-pager", "-q"]):
        if shutil.which(cmd[0]) is None:
            continue
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if proc.returncode == 0 and proc.stdout:
            return {"source": " ".join(cmd), "text": proc.stdout[-4_000_000:]}
    for rel in ("/var/log/kern.log", "/var/log/dmesg"):
        try:
            return {"source": rel, "text": Path(rel).read_text(errors="replace")[-4_000_000:]}
        except OSError:
            continue
    return {"source": "dmesg/journalctl not readable", "text": None}


def xids(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        m = _XID_RE.search(line)
        if m:
            out.append({"pci": m.group(1), "xid": int(m.group(2)),
                        "detail": (m.group(3) or "").strip()[:200]})
    return out
