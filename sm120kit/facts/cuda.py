"""CUDA versions without importing torch: ``torch/version.py`` text and ``nvcc --version``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sm120kit.facts.packages import package_dir
from sm120kit.facts.source import read_text

_CUDA_RE = re.compile(r"^cuda\s*(?::[^=\n]*)?=\s*(?:'([^']*)'|\"([^\"]*)\"|None)", re.M)
_VER_RE = re.compile(r"^__version__\s*(?::[^=\n]*)?=\s*['\"]([^'\"]+)['\"]", re.M)


def torch_build(paths: Sequence[str] | None = None) -> dict[str, Any] | None:
    """``{"version", "cuda", "path"}`` from ``<site>/torch/version.py``; ``None`` if no torch."""
    d = package_dir("torch", paths)
    if d is None:
        return None
    p = d / "version.py"
    text = read_text(p)
    if text is None:
        return {"version": None, "cuda": None, "path": str(p), "readable": False}
    m = _CUDA_RE.search(text)
    cuda = (m.group(1) or m.group(2)) if m else None
    v = _VER_RE.search(text)
    return {"version": v.group(1) if v else None, "cuda": cuda or None, "path": str(p),
            "readable": True}


def find_nvcc(environ: Mapping[str, str] | None = None, root: str = "/") -> str | None:
    """nvcc the way FlashInfer's JIT finds it: CUDA_HOME / CUDA_PATH, PATH, /usr/local/cuda
    (under ``root``)."""
    env = os.environ if environ is None else environ
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(var):
            cand = Path(env[var]) / "bin" / "nvcc"
            if cand.exists():
                return str(cand)
    w = shutil.which("nvcc", path=env.get("PATH"))
    if w:
        return w
    cand = Path(root) / "usr/local/cuda/bin/nvcc"
    return str(cand) if cand.exists() else None


def nvcc_version(nvcc: str, timeout: float = 5.0) -> str | None:
    """``"12.8"`` from ``nvcc --version`` ("release 12.8,"), ``None`` on any failure."""
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True,
                             timeout=timeout).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else None
