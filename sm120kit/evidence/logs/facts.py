"""What a log analysis found, as typed facts built once: the one read surface of the rules.

``log_facts(analysis)`` is called after ``LogAnalysis.finish()``; every verdict the analysis
derives (where the run stopped, whether it is still progressing, whether a pasted excerpt ends
in a short startup step, whether shm_broadcast waits stayed open) is computed here once and
kept as a value. The records are tuples of the analysis' own objects (``Evidence``, ``Proc``,
``WatchdogRecord``, ``Death``); rules read them and never write.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from sm120kit.evidence.logs.analyze import LogAnalysis
from sm120kit.evidence.logs.described import DescribedScan
from sm120kit.evidence.logs.elastic import ElasticFailure
from sm120kit.evidence.logs.frames import Traceback
from sm120kit.evidence.logs.nccl_diag import NcclDiag
from sm120kit.evidence.logs.parsers import Death, WatchdogRecord
from sm120kit.evidence.logs.records import Evidence, Proc, SignalHits
from sm120kit.models.kv import KvLines


@dataclass(frozen=True)
class PhaseFacts:
    """The run's phase timeline: the stage it reached (where it stopped) and first appearances."""

    stage: str | None
    first_seen: Mapping[str, Evidence]
    timeline: tuple[tuple[str, float, str | None], ...]  # (phase, first time, stream)
    run: int  # launches seen in the input (0: the first)


@dataclass(frozen=True)
class ProgressFacts:
    """Serving metrics, progress bars and the verdicts read from them."""

    served: bool
    metrics_lines: int
    zero_streak: int  # consecutive 0.0 tokens/s metrics intervals with running requests
    zero_streak_open: bool  # ... up to the end of the log
    zero_streak_ev: tuple[Evidence, ...]
    bar: tuple[str, int, int, Evidence] | None  # the last progress bar: (what, done, total, ev)
    elapsed: str | None  # the bar's elapsed clock
    zero_progress: Evidence | None  # a first generation bar stuck at 0
    progressing: str | None  # "progressing: autotune 14/22 after 9 min", or None
    stopped_excerpt: str | None  # the short startup step a pasted excerpt ends in, or None
    last_step: Evidence | None  # the last line that carried a phase (advice lines left out)


@dataclass(frozen=True)
class WaitFacts:
    """Stall and death records: torch watchdog, shm_broadcast waits, RPC timeouts, deaths."""

    watchdog: tuple[tuple[WatchdogRecord, Evidence, str], ...]
    shm_waits: tuple[tuple[int, Evidence, str], ...]
    shm_count: int
    shm_open: bool  # shm_broadcast waits that no later startup progress resolved
    rpc_timeouts: tuple[tuple[str, Evidence, str], ...]
    deaths: tuple[tuple[Death, Evidence, str], ...]


@dataclass(frozen=True)
class NcclFacts:
    """NCCL's own lines: WARNs, transports per process, opCounts, the NCCL DIAG report."""

    warns: tuple[Evidence, ...]
    warn_count: int
    env: Mapping[str, str]
    transports: Mapping[str, frozenset[str]]
    ops: Mapping[str, Mapping[str, tuple[int, str, Evidence]]]
    diag: NcclDiag


@dataclass(frozen=True)
class LogFacts:
    procs: Mapping[str, Proc]
    workers: tuple[Proc, ...]
    phases: PhaseFacts
    progress: ProgressFacts
    waits: WaitFacts
    nccl: NcclFacts
    failures: tuple[Evidence, ...]
    failure_count: int
    retried: tuple[Evidence, ...]  # failures the program said it retries (failures.py)
    signals: Mapping[str, SignalHits]
    versions: Mapping[str, Any]
    config: Mapping[str, Any]
    described: DescribedScan
    ticket: bool  # a pasted report (Markdown around the log), not a log file
    last_text: Evidence | None
    kv: KvLines
    fast_lines: int  # lines of boring call sites that skipped the parsers
    engine: str  # the program that wrote the log (engines.py)
    elastic: tuple[ElasticFailure, ...]  # torchrun's failure summary entries (elastic.py)
    elastic_root: ElasticFailure | None  # its "Root Cause (first observed failure)" entry
    first_traceback: Traceback | None  # the input's first traceback with frames (frames.py)
    tracebacks: tuple[Traceback, ...]  # every kept traceback with frames, in input order
    # lines the software prints on healthy runs too (catalogue benign.toml): the first few, and
    # how many; never failures, cues or evidence for a cause
    advice: tuple[Evidence, ...] = ()
    advice_count: int = 0

    def hits(self, sid: str) -> list[Evidence]:
        h = self.signals.get(sid)
        return list(h.evidence) if h else []

    def completed(self) -> Evidence | None:
        """The last line saying the run reached its goal (signal ``run-completed``), unless a run
        began after it (signal ``run-started``: the next benchmark, a relaunch) in the same
        stream: then the run the log ends in is still open. None without one."""
        done, start = self.signals.get("run-completed"), self.signals.get("run-started")
        last = done.last if done is not None else None
        later = start.last if start is not None else None
        if last is None or (later is not None and later.source == last.source and
                            later.line > last.line):
            return None
        return last


def _ro(d: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(d))


def log_facts(an: LogAnalysis) -> LogFacts:
    """The facts of a finished analysis (call ``an.finish()`` first), read from its parts."""
    runs, inc, sv, nc = an.runs, an.incidents, an.serving, an.nccl
    return LogFacts(
        procs=_ro(an.proc_table.procs), workers=tuple(an.workers()),
        phases=PhaseFacts(runs.global_tracker.stage, _ro(runs.phase_ev),
                          tuple(runs.global_tracker.timeline), runs.run),
        progress=ProgressFacts(
            sv.served, sv.metrics_lines, sv.zero_streak, sv.zero_streak_open,
            tuple(sv.zero_streak_ev), sv.progress, sv.progress_elapsed, sv.zero_progress,
            an.progressing_verdict(), an.stopped_excerpt(), an.last_step),
        waits=WaitFacts(tuple(inc.watchdog), tuple(inc.shm_waits), inc.shm_count,
                        an.shm_wait_open(), tuple(inc.rpc_timeouts), tuple(inc.deaths)),
        nccl=NcclFacts(tuple(nc.nccl_warns), nc.nccl_warn_count, _ro(nc.nccl_env),
                       _ro({k: frozenset(v) for k, v in nc.transports.items()}),
                       _ro({k: _ro(v) for k, v in nc.nccl_ops.items()}), an.nccl_diag),
        failures=tuple(an.fails.failures), failure_count=an.fails.failure_count,
        retried=tuple(an.fails.retried),
        signals=_ro(an.book.signals), versions=_ro(an.vs.versions), config=_ro(an.vs.config),
        described=an.described, ticket=an.is_ticket(), last_text=an.last_text, kv=an.kv,
        fast_lines=an.sites.fast_lines, engine=an.engines.engine,
        elastic=tuple(an.elastic.failures), elastic_root=an.elastic.root,
        first_traceback=an.tracebacks.first(),
        tracebacks=tuple(t for t in an.tracebacks.order if t.frames),
        advice=tuple(an.advice), advice_count=an.advice_count)
