"""The typed facts diagnose reads, in one place: ``LogFacts`` (what the log analysis found, built
once: ``sm120kit.evidence.logs.facts``) and ``BundleFacts`` (what a ``collect`` bundle holds
beyond its logs: stacks, NVML, RAS, Flight Recorder, doctor, the supervisor's stall record, the
nodes of a multi-node bundle), both handed to the rules in ``RuleContext``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sm120kit.evidence.logs.facts import LogFacts, NcclFacts, PhaseFacts, ProgressFacts, WaitFacts
from sm120kit.evidence.stall_record import StallRecord, read_stall


@dataclass
class StackView:
    """One process's main-thread position in a bundle (py-spy JSON or faulthandler)."""

    pid: int
    label: str | None = None
    rank: int | None = None
    role: str | None = None
    state: str | None = None  # blocked | spinning | progressing | unknown
    top: str | None = None
    collective: str | None = None
    sync: str | None = None
    frames: list[str] = field(default_factory=list)  # "func (file:line)", innermost first
    native: list[str] = field(default_factory=list)  # a --native sample's frames, innermost first
    source: str = ""
    node: str | None = None  # the Ray node folder (``nodes/<id>/``) of a multi-node bundle

    @property
    def waiting(self) -> bool:
        """In a collective or a host sync (where every rank sits when a peer is missing)."""
        return bool(self.collective or self.sync)


@dataclass
class BundleFacts:
    stacks: list[StackView] = field(default_factory=list)
    nvml: list[dict[str, Any]] = field(default_factory=list)  # snapshots
    ras: list[tuple[str, str]] = field(default_factory=list)  # (member, text)
    ras_json: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    flight: dict[str, Any] | None = None
    flight_text: list[tuple[str, str]] = field(default_factory=list)
    doctor: dict[str, Any] | None = None
    timeline: dict[str, Any] | None = None
    processes: dict[str, Any] = field(default_factory=dict)
    collectors: list[dict[str, Any]] = field(default_factory=list)
    env: dict[str, Any] = field(default_factory=dict)
    stall: dict[str, Any] | None = None  # stall.json: the supervisor's stall record
    #: multi-node (``collect --ray``) bundles: the manifest's per-node records (folder, status,
    #: error, workers, collectors); empty for one host
    nodes: list[dict[str, Any]] = field(default_factory=list)
    #: an interrupted / partial bundle says so (diagnose.completeness); None when whole
    incomplete: str | None = None

    @property
    def stall_record(self) -> StallRecord | None:
        """The supervisor's record of why the bundle was written (stall.json, timeline.json),
        typed; None when it was not written for a stall, a death or an exit."""
        return read_stall(self.timeline, self.stall)


__all__ = ["BundleFacts", "LogFacts", "NcclFacts", "PhaseFacts", "ProgressFacts", "StackView",
           "StallRecord", "WaitFacts"]
