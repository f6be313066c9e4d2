"""Shared, lazily read facts for one doctor run (each read once, thread-safe).

Checks read facts only through the context, so tests can point it at a tmp ``root`` (sysfs /
procfs trees), a ``paths`` list (unpacked release trees instead of site-packages), an environ
mapping and an NVML seam.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sm120kit.doctor.launch import LaunchPlan
from sm120kit.facts import cuda, flashinfer, host, nvml, vllm

T = TypeVar("T")


class DoctorContext:
    def __init__(
        self,
        *,
        root: str = "/",
        environ: Mapping[str, str] | None = None,
        paths: Sequence[str] | None = None,
        launch: LaunchPlan | None = None,
        dcp_planned: int | None = None,
        series_root: Path | None = None,
        nvml_seam: Any = None,
        nvml_timeout: float = 5.0,
        deep_timeout: float = 120.0,
    ) -> None:
        self.root = root
        self.environ: Mapping[str, str] = dict(os.environ) if environ is None else environ
        self.paths = list(paths) if paths is not None else None
        self.launch = launch
        self._dcp = dcp_planned
        self.series_root = series_root
        self.nvml_seam = nvml_seam
        self.nvml_timeout = nvml_timeout
        self.deep_timeout = deep_timeout
        self._cache: dict[str, Any] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    @property
    def dcp(self) -> int | None:
        """Planned DCP size: the launch's (``--dcp N`` already applied to it by
        ``ServeArgs.override``), else ``--dcp N`` alone; ``None`` = not planned."""
        if self.launch is not None:
            return self.launch.serve.dcp
        return self._dcp

    def cached(self, key: str, fn: Callable[[], T]) -> T:
        with self._guard:
            if key in self._cache:
                return self._cache[key]
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._cache:
                self._cache[key] = fn()
            return self._cache[key]

    def preset(self, key: str, value: Any) -> None:
        """Put a fact in the cache (used for facts read outside the run, e.g. a recording)."""
        with self._guard:
            self._cache[key] = value

    # -- facts -----------------------------------------------------------------------------
    def flashinfer(self) -> Any:
        return self.cached("flashinfer", lambda: flashinfer.inspect(self.paths))

    def vllm(self) -> Any:
        return self.cached("vllm", lambda: vllm.inspect(self.paths, series_root=self.series_root))

    def torch(self) -> dict[str, Any] | None:
        return self.cached("torch", lambda: cuda.torch_build(self.paths))

    def nvcc(self) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            path = cuda.find_nvcc(self.environ, self.root)
            return {"path": path, "version": cuda.nvcc_version(path) if path else None}

        return self.cached("nvcc", read)

    def nvml(self) -> Any:
        return self.cached("nvml", lambda: nvml.snapshot(self.nvml_timeout, seam=self.nvml_seam,
                                                         environ=self.environ))

    def has(self, key: str) -> bool:
        with self._guard:
            return key in self._cache

    def peek(self, key: str) -> Any:
        """A fact already read (e.g. the NVML snapshot), else ``None``; never reads it."""
        with self._guard:
            return self._cache.get(key)

    def gpu_bus_ids(self) -> list[str]:
        """NVML bus ids of the visible GPUs when NVML answered, else NVIDIA devices in sysfs."""
        def read() -> list[str]:
            snap = self.peek("nvml")
            if snap is not None and snap.available and snap.gpus:
                return [g.pci_bus_id for g in snap.gpus if g.pci_bus_id]
            return host.nvidia_pci_devices(self.root)

        return self.cached("gpu_bus_ids", read)
