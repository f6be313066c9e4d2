"""Launches in one input (a paste may hold several) and the phase timeline of each."""

from __future__ import annotations

import re

from sm120kit.evidence.logs.records import Evidence, Proc
from sm120kit.evidence.phases import PHASE_INDEX, PhaseTracker

_VLLM_VER = re.compile(r"(?i)\bvllm(?: version|[ =:]+v?|==)(?P<v>\d+\.\d+\.\d+[\w.+]*)|version (?P<b>\d+\.\d+\.\d+\S*)$"
                       r"|LLM engine \(v(?P<e>\d+\.\d+\.\d+\S*?)\)")
_LAUNCH = re.compile(r"█\s+version\s+\S|vLLM API server version|non-default args:|Launching vLLM")


class Runs:
    """The current launch's timeline (``global_tracker``); earlier launches are never compared."""

    def __init__(self) -> None:
        self.run = 0
        self.run_versions: list[str | None] = [None]
        self.earlier_runs: list[PhaseTracker] = []
        self.global_tracker = PhaseTracker()
        self.phase_ev: dict[str, Evidence] = {}

    def launch(self, text: str, phase: str | None) -> bool:
        """Start a new run when a launch banner follows a run that got past its start, or when
        the line names another vLLM version than the current run's; True when one started."""
        m = _VLLM_VER.search(text)
        ver = (m.group("v") or m.group("b") or m.group("e")) if m else None
        cur = self.run_versions[self.run]
        new = False
        if ver is not None and cur is not None and ver != cur:
            new = True
        elif phase == "engine-init" and _LAUNCH.search(text) and \
                self.global_tracker._high > PHASE_INDEX["engine-init"]:
            new = True
        if new:
            self.earlier_runs.append(self.global_tracker)
            self.global_tracker = PhaseTracker()
            self.run += 1
            self.run_versions.append(ver)
        elif ver is not None and cur is None:
            self.run_versions[self.run] = ver
        return new

    def observe(self, p: Proc, phase: str, ts: float, source: str, ev: Evidence) -> None:
        if phase not in p.phase_ev:
            p.phase_ev[phase] = ev
        p.tracker.observe(phase, ts, source)
        if phase not in self.phase_ev:
            self.phase_ev[phase] = ev
        self.global_tracker.observe(phase, ts, source)
