"""The check registry: every check module registers its functions with :func:`check`.

A check is a function ``(ctx) -> Outcome`` with an id (``area.name``), a tier (0 stdlib, 1 NVML,
2 deep), a timeout and a ``kind``: ``base`` (always), ``launch`` (only with a launch config) or
``layout`` (only with ``--layout``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sm120kit.doctor.context import DoctorContext
    from sm120kit.doctor.model import Outcome

CheckFn = Callable[["DoctorContext"], "Outcome"]

#: every check module with the (tier, kind) pairs of the checks it registers, so that a run
#: imports only the modules it can use (the deep tier's process tools, the capacity planner and
#: the layout self-test load only when asked); tests/doctor/test_registry_modules.py keeps this
#: table equal to what the modules register.
CHECK_MODULES: dict[str, frozenset[tuple[int, str]]] = {
    "sm120kit.doctor.checks.packages": frozenset({(0, "base")}),
    "sm120kit.doctor.checks.flashinfer": frozenset({(0, "base")}),
    "sm120kit.doctor.checks.vllm": frozenset({(0, "base")}),
    "sm120kit.doctor.checks.cuda": frozenset({(0, "base"), (1, "base")}),
    "sm120kit.doctor.checks.host": frozenset({(0, "base")}),
    "sm120kit.doctor.checks.nccl": frozenset({(0, "base")}),
    "sm120kit.doctor.checks.gpu": frozenset({(1, "base")}),
    "sm120kit.doctor.checks.launch": frozenset({(0, "base"), (0, "launch"), (1, "launch")}),
    "sm120kit.doctor.checks.capacity": frozenset({(0, "launch"), (0, "log")}),
    "sm120kit.doctor.checks.traps": frozenset({(0, "base"), (0, "launch"), (1, "base")}),
    "sm120kit.doctor.checks.deep": frozenset({(2, "base")}),
    "sm120kit.doctor.checks.layout": frozenset({(0, "layout"), (1, "layout")}),
}


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


def all_checks(tiers: Collection[int] | None = None,
               kinds: Collection[str] | None = None) -> list[Check]:
    """The registered checks; with ``tiers``/``kinds``, only the modules that hold such checks
    are imported (a module may register more: the caller still selects)."""
    for mod, held in CHECK_MODULES.items():
        if tiers is not None and not any(t in tiers for t, _ in held):
            continue
        if kinds is not None and not any(k in kinds for _, k in held):
            continue
        importlib.import_module(mod)
    return list(_REGISTRY.values())
