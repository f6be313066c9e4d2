"""Conditions of a catalogue entry (``[entry.when]``): what else the same input must show.

A line pattern alone names a cause when the line states it; many causes are "X beside Y" (a
stale expert count *and then* an OOM at weight load; a fault *in* the custom all-reduce kernel).
``when`` says so as data, the way co-occurrence rules of other diagnosers do, so no rule module
is needed for a pair:

* ``with``: ids (a signal id, or ``cat:<entry id>``) that all have a hit in the input;
* ``with_any``: ids of which at least one has a hit;
* ``without``: ids none of which has a hit;
* ``phase``: the analysis phases (``sm120kit.evidence.phases``: ``nccl-init``, ``model-load``,
  ...; ``none`` when no phase was seen) one of which the run or a worker stopped in;
* ``stalled``: ``true``: the run was seen to stop (waits, timeouts, deaths, a described hang);
  ``false``: it was not;
* ``topology``: ``pcie`` or ``nvlink``: the GPU links the input shows (a ``nvidia-smi topo``
  table, a statement such as "PCIe only").

The first hit of each ``with``/``with_any`` id that holds joins the finding's evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from sm120kit.diagnose.catalogue.errors import CatalogueError
from sm120kit.evidence.logs.records import Evidence
from sm120kit.evidence.phases import PHASE_INDEX

TOPOLOGIES = ("pcie", "nvlink")
_LISTS = ("with", "with_any", "without", "phase")
_KEYS = {*_LISTS, "stalled", "topology"}


class Seen(Protocol):
    """What the input showed, as the conditions read it."""

    def first(self, sid: str) -> Evidence | None: ...

    @property
    def phases(self) -> frozenset[str]: ...

    @property
    def stalled(self) -> bool: ...

    @property
    def topology(self) -> frozenset[str]: ...


@dataclass(frozen=True)
class When:
    with_: tuple[str, ...] = ()
    with_any: tuple[str, ...] = ()
    without: tuple[str, ...] = ()
    phase: tuple[str, ...] = ()
    stalled: bool | None = None
    topology: str | None = None

    def holds(self, seen: Seen) -> list[Evidence] | None:
        """The evidence the conditions add (possibly none), or None when they do not hold."""
        got = [seen.first(s) for s in self.with_]
        if any(e is None for e in got):
            return None
        anyof = [e for e in (seen.first(s) for s in self.with_any) if e is not None]
        if self.with_any and not anyof:
            return None
        if any(seen.first(s) is not None for s in self.without):
            return None
        if self.phase and not (set(self.phase) & (seen.phases or frozenset({"none"}))):
            return None
        if self.stalled is not None and seen.stalled != self.stalled:
            return None
        if self.topology is not None and self.topology not in seen.topology:
            return None
        return [e for e in got + anyof if e is not None]


def parse_when(where: str, raw: Any) -> When | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise CatalogueError(f"{where}: key 'when': a table of conditions")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise CatalogueError(f"{where}: key 'when.{unknown[0]}': not a condition "
                             f"({', '.join(sorted(_KEYS))})")
    for k in _LISTS:
        v = raw.get(k, [])
        if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
            raise CatalogueError(f"{where}: key 'when.{k}': a list of non-empty strings")
    bad = [p for p in raw.get("phase", []) if p != "none" and p not in PHASE_INDEX]
    if bad:
        raise CatalogueError(f"{where}: key 'when.phase': {bad[0]!r} is not an analysis phase "
                             f"({', '.join(PHASE_INDEX)}, none)")
    if "stalled" in raw and not isinstance(raw["stalled"], bool):
        raise CatalogueError(f"{where}: key 'when.stalled': true or false")
    if raw.get("topology") is not None and raw["topology"] not in TOPOLOGIES:
        raise CatalogueError(f"{where}: key 'when.topology': one of {', '.join(TOPOLOGIES)}")
    return When(tuple(raw.get("with", [])), tuple(raw.get("with_any", [])),
                tuple(raw.get("without", [])), tuple(raw.get("phase", [])), raw.get("stalled"),
                raw.get("topology"))
