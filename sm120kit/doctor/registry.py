"""The check registry: every check module registers its functions with :func:`check`.

A check is a function ``(ctx) -> Outcome`` with an id (``area.name``), a tier (0 stdlib, 1 NVML,
2 deep), a timeout and a ``kind``: ``base`` (always), ``launch`` (only with a launch config) or
``layout`` (only with ``--layout``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sm120kit.doctor.context import DoctorContext
    from sm120kit.doctor.model import Outcome

CheckFn = Callable[["DoctorContext"], "Outcome"]

CHECK_MODULES = (
    "sm120kit.doctor.checks.packages",
    "sm120kit.doctor.checks.flashinfer",
    "sm120kit.doctor.checks.vllm",
    "sm120kit.doctor.checks.cuda",
    "sm120kit.doctor.checks.host",
    "sm120kit.doctor.checks.nccl",
    "sm120kit.doctor.checks.gpu",
    "sm120kit.doctor.checks.launch",
    "sm120kit.doctor.checks.capacity",
    "sm120kit.doctor.checks.traps",
    "sm120kit.doctor.checks.deep",
    "sm120kit.doctor.checks.layout",
)


@dataclass(frozen=True)
class Check:
    id: str
    area: str
    tier: int
    title: str
    fn: CheckFn
    timeout: float = 5.0
    kind: str = "base"


_REGISTRY: dict[str, Check] = {}


def check(id: str, *, tier: int, title: str, timeout: float = 5.0,
          kind: str = "base") -> Callable[[CheckFn], CheckFn]:
    def deco(fn: CheckFn) -> CheckFn:
        area = id.split(".", 1)[0]
        _REGISTRY[id] = Check(id=id, area=area, tier=tier, title=title, fn=fn, timeout=timeout,
                              kind=kind)
        return fn

    return deco


def all_checks() -> list[Check]:
    for mod in CHECK_MODULES:
        importlib.import_module(mod)
    return list(_REGISTRY.values())
