"""The verdicts of a ``LogAnalysis`` read from its parts: where a pasted excerpt stopped, whether
the run is still progressing, whether shm_broadcast waits stayed open. The facts themselves are
read through ``facts.log_facts`` (typed, built once); each lives in one part of the analysis."""

from __future__ import annotations

import re
from typing import Any

from sm120kit.evidence.logs.described import DescribedScan
from sm120kit.evidence.logs.failures import Failures
from sm120kit.evidence.logs.hits import SignalBook
from sm120kit.evidence.logs.incidents import Incidents
from sm120kit.evidence.logs.records import Evidence
from sm120kit.evidence.logs.runs import Runs
from sm120kit.evidence.logs.serving import ServingView
from sm120kit.evidence.phases import PHASE_INDEX

_DONE = re.compile(r"\btook [\d.]+ ?s|\btakes? [\d.]+ ?s(?:econds)? in total|Init COMPLETE|"
                   r"\bfinished\b|\bcompleted? in\b|Loading weights took")
# vLLM's engine config echo (llm_engine.py V0, v1/engine/core.py V1)
_BANNER = re.compile(r"Initializing an? (?:V\d )?LLM engine \(v\S+\) with config")
# startup steps that legitimately run for minutes with little output
_SLOW = frozenset({"autotune", "kernel-warmup", "cuda-graph-capture", "torch-compile", "model-load"})


class AnalysisView:
    """The verdicts read from the analysis' parts (``runs``, ``incidents``, ``fails``,
    ``serving``, ``book``), once the input is read. Everything else is read through
    ``sm120kit.evidence.logs.facts.log_facts``: typed facts, built once."""

    # set by LogAnalysis.__init__
    runs: Runs
    incidents: Incidents
    fails: Failures
    serving: ServingView
    book: SignalBook
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
        inc = self.incidents
        return bool(inc.shm_count) and self.runs.global_tracker.high <= inc.shm_high_last

    def finished_last(self) -> bool:
        """The last line reports a step as finished ('took 4.5 s', 'Init COMPLETE')."""
        t = self.last_text.text if self.last_text else ""
        return bool(_DONE.search(t))

    def stopped_excerpt(self) -> str | None:
        """A pasted excerpt that ends during a short startup step (no progress bar, no slow
        phase running): the run stopped there or the failure is after the excerpt. None for
        logs, for slow phases (autotune, warmup, capture, a weight-load bar) and for runs that
        reached ready."""
        if not self.is_ticket() or self.fails.failures:
            return None
        stage = self.runs.global_tracker.stage
        if stage is None or PHASE_INDEX.get(stage, 0) >= PHASE_INDEX["engine-ready"] or \
                stage == "engine-init" or self.described.praise:
            return None
        if stage in _SLOW and not self.finished_last():
            return None
        if self.banner_only(stage):
            return None
        bar = self.serving.progress
        if bar is not None and bar[1] < bar[2] and \
                self.last_text is not None and bar[3].line >= self.last_text.line - 2:
            return None
        return stage

    def banner_only(self, stage: str) -> bool:
        """The excerpt's only record of ``stage`` is its last line and that line is the engine's
        config echo (``Initializing a V1 LLM engine (v0.8.4) with config: ...``): a config dump
        pasted for context, not a position where the run stopped."""
        ev = self.runs.phase_ev.get(stage)
        last = self.last_text
        return ev is not None and last is not None and ev.line == last.line and \
            bool(_BANNER.search(last.text))

    def progressing_verdict(self) -> str | None:
        """``progressing: autotune 14/22 after 9 min`` when the last run is still starting up
        without a recorded failure; None otherwise."""
        d = self.described
        inc = self.incidents
        if self.fails.failures or inc.watchdog or inc.rpc_timeouts or inc.deaths or d.symptoms \
                or d.complaints or d.stacks:
            return None
        stage = self.runs.global_tracker.stage
        jit = self.book.signals.get("jit-compile")
        if stage is None and inc.shm_count and jit:
            return "progressing: JIT compile (shm_broadcast waits while nvcc runs are expected)"
        if stage is None or PHASE_INDEX.get(stage, 0) >= PHASE_INDEX["engine-ready"]:
            return None
        if self.stopped_excerpt() is not None:
            return None
        if self.shm_wait_open() and not jit:
            return None  # minutes of shm_broadcast waits with no progress after them
        return f"progressing: {self._progress_words(stage)}{self._span()}"

    def _progress_words(self, stage: str) -> str:
        if self.serving.progress is not None:
            what, done, tot, _ev = self.serving.progress
            if done < tot:
                return f"{what} {done}/{tot}"
        return stage

    def _span(self) -> str:
        if self.t_first is not None and self.t_last is not None and self.t_last > self.t_first:
            mins = (self.t_last - self.t_first) / 60.0
            return f" after {mins:.0f} min" if mins >= 1 else f" after {self.t_last - self.t_first:.0f} s"
        return ""
