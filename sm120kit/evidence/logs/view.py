"""The public read surface of ``LogAnalysis``: each fact lives in one part, read through here.

``Via[T]("part")`` on a class reads and writes ``obj.part.<name>``, so rules and services keep
writing ``analysis.watchdog`` while the list lives in ``analysis.incidents``.
"""

from __future__ import annotations

import re
from typing import Any, Generic, TypeVar

from sm120kit.evidence.logs.described import DescribedScan
from sm120kit.evidence.logs.parsers import Death, WatchdogRecord
from sm120kit.evidence.logs.records import Evidence, Proc, SignalHits
from sm120kit.evidence.phases import PHASE_INDEX, PhaseTracker

T = TypeVar("T")
_DONE = re.compile(r"\btook [\d.]+ ?s|\btakes? [\d.]+ ?s(?:econds)? in total|Init COMPLETE|"
                   r"\bfinished\b|\bcompleted? in\b|Loading weights took")
# vLLM's engine config echo (llm_engine.py V0, v1/engine/core.py V1)
_BANNER = re.compile(r"Initializing an? (?:V\d )?LLM engine \(v\S+\) with config")
# startup steps that legitimately run for minutes with little output
_SLOW = frozenset({"autotune", "kernel-warmup", "cuda-graph-capture", "torch-compile", "model-load"})


class Via(Generic[T]):
    """An attribute kept by one part of the analysis (``part`` names the attribute holding it)."""

    def __init__(self, part: str) -> None:
        self.part = part
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> T:
        if obj is None:  # on the class (help(), inspect): the descriptor itself
            return self  # type: ignore[return-value]
        return getattr(getattr(obj, self.part), self.name)

    def __set__(self, obj: Any, value: T) -> None:
        setattr(getattr(obj, self.part), self.name, value)


class AnalysisView:
    """Facts by their long-standing names, and the verdicts read from them."""

    procs = Via[dict[str, Proc]]("proc_table")
    watchdog = Via[list[tuple[WatchdogRecord, Evidence, str]]]("incidents")
    shm_waits = Via[list[tuple[int, Evidence, str]]]("incidents")
    shm_count = Via[int]("incidents")
    shm_high_last = Via[int]("incidents")
    rpc_timeouts = Via[list[tuple[str, Evidence, str]]]("incidents")
    deaths = Via[list[tuple[Death, Evidence, str]]]("incidents")
    nccl_warns = Via[list[Evidence]]("nccl")
    nccl_warn_count = Via[int]("nccl")
    transports = Via[dict[str, set[str]]]("nccl")
    nccl_env = Via[dict[str, str]]("nccl")
    nccl_comms = Via[dict[str, dict[int, str]]]("nccl")
    nccl_ops = Via[dict[str, dict[str, tuple[int, str, Evidence]]]]("nccl")
    signals = Via[dict[str, SignalHits]]("book")
    global_tracker = Via[PhaseTracker]("runs")
    phase_ev = Via[dict[str, Evidence]]("runs")
    run = Via[int]("runs")
    run_versions = Via[list[str | None]]("runs")
    earlier_runs = Via[list[PhaseTracker]]("runs")
    failures = Via[list[Evidence]]("fails")
    failure_count = Via[int]("fails")
    served = Via[bool]("serving")
    metrics_lines = Via[int]("serving")
    zero_streak = Via[int]("serving")
    zero_streak_max = Via[int]("serving")
    zero_streak_open = Via[bool]("serving")
    zero_streak_ev = Via[list[Evidence]]("serving")
    progress = Via[tuple[str, int, int, Evidence] | None]("serving")
    progress_elapsed = Via[str | None]("serving")
    zero_progress = Via[Evidence | None]("serving")
    fast_lines = Via[int]("sites")
    # set by LogAnalysis.__init__
    paste: dict[str, dict[str, Any]]
    last_text: Evidence | None
    t_first: float | None
    t_last: float | None
    described: DescribedScan

    def is_ticket(self) -> bool:
        """The input is a pasted report (Markdown), not a log file written by the run."""
        return any("markdown" in info.get("repairs", []) for info in self.paste.values())

    def shm_wait_open(self) -> bool:
        """shm_broadcast waits that no later startup progress resolved."""
        return bool(self.shm_count) and self.global_tracker.high <= self.shm_high_last

    def finished_last(self) -> bool:
        """The last line reports a step as finished ('took 4.5 s', 'Init COMPLETE')."""
        t = self.last_text.text if self.last_text else ""
        return bool(_DONE.search(t))

    def stopped_excerpt(self) -> str | None:
        """A pasted excerpt that ends during a short startup step (no progress bar, no slow
        phase running): the run stopped there or the failure is after the excerpt. None for
        logs, for slow phases (autotune, warmup, capture, a weight-load bar) and for runs that
        reached ready."""
        if not self.is_ticket() or self.failures:
            return None
        stage = self.global_tracker.stage
        if stage is None or PHASE_INDEX.get(stage, 0) >= PHASE_INDEX["engine-ready"] or \
                stage == "engine-init" or self.described.praise:
            return None
        if stage in _SLOW and not self.finished_last():
            return None
        if self.banner_only(stage):
            return None
        if self.progress is not None and self.progress[1] < self.progress[2] and \
                self.last_text is not None and self.progress[3].line >= self.last_text.line - 2:
            return None
        return stage

    def banner_only(self, stage: str) -> bool:
        """The excerpt's only record of ``stage`` is its last line and that line is the engine's
        config echo (``Initializing a V1 LLM engine (v0.8.4) with config: ...``): a config dump
        pasted for context, not a position where the run stopped."""
        ev = self.phase_ev.get(stage)
        last = self.last_text
        return ev is not None and last is not None and ev.line == last.line and \
            bool(_BANNER.search(last.text))

    def progressing_verdict(self) -> str | None:
        """``progressing: autotune 14/22 after 9 min`` when the last run is still starting up
        without a recorded failure; None otherwise."""
        d = self.described
        if self.failures or self.watchdog or self.rpc_timeouts or self.deaths or d.symptoms \
                or d.complaints or d.stacks:
            return None
        stage = self.global_tracker.stage
        if stage is None and self.shm_count and self.signals.get("jit-compile"):
            return "progressing: JIT compile (shm_broadcast waits while nvcc runs are expected)"
        if stage is None or PHASE_INDEX.get(stage, 0) >= PHASE_INDEX["engine-ready"]:
            return None
        if self.stopped_excerpt() is not None:
            return None
        if self.shm_wait_open() and not self.signals.get("jit-compile"):
            return None  # minutes of shm_broadcast waits with no progress after them
        return f"progressing: {self._progress_words(stage)}{self._span()}"

    def _progress_words(self, stage: str) -> str:
        if self.progress is not None:
            what, done, tot, _ev = self.progress
            if done < tot:
                return f"{what} {done}/{tot}"
        return stage

    def _span(self) -> str:
        if self.t_first is not None and self.t_last is not None and self.t_last > self.t_first:
            mins = (self.t_last - self.t_first) / 60.0
            return f" after {mins:.0f} min" if mins >= 1 else f" after {self.t_last - self.t_first:.0f} s"
        return ""
