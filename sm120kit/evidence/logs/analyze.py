"""One pass over log lines → per-process state, records and named signals, in bounded memory.

``LogAnalysis.feed_stream(source, fh)`` streams a binary file through ``stream.scan`` and
``feed_line``. Everything it keeps is bounded: per-process tails are deques, record lists are
capped (``MAX_RECORDS``), named signals keep the first ``MAX_SIGNAL_EVIDENCE`` hits plus a count.

``LogAnalysis`` routes each line to its parts, one job each: ``proc_table`` (procs.py: which
process, its errors), ``runs`` (launches and phase timelines), ``incidents`` (stall and death
records), ``nccl`` (NCCL's own lines), ``book`` (named signals), ``fails`` (recorded failures),
``serving`` (metrics and progress bars), ``sites`` (boring call sites skip the parsers);
``view.AnalysisView`` reads the verdicts from them; ``facts.log_facts`` hands rules and the
engine typed facts, built once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import IO, Any

from sm120kit.evidence.logs.cue import Cues
from sm120kit.evidence.logs.described import DescribedScan
from sm120kit.evidence.logs.elastic import ElasticSummary
from sm120kit.evidence.logs.engines import EngineSniffer
from sm120kit.evidence.logs.envelope import Envelope
from sm120kit.evidence.logs.failures import Failures
from sm120kit.evidence.logs.fastpath import CallSites, site_of
from sm120kit.evidence.logs.frames import Tracebacks
from sm120kit.evidence.logs.hits import Scanner, SignalBook
from sm120kit.evidence.logs.incidents import Incidents
from sm120kit.evidence.logs.intake import read_stream
from sm120kit.evidence.logs.nccl_diag import MARK as NCCL_DIAG_MARK
from sm120kit.evidence.logs.nccl_diag import NcclDiag
from sm120kit.evidence.logs.nccl_state import NcclState
from sm120kit.evidence.logs.prefix import Origin, attribute
from sm120kit.evidence.logs.procs import ProcTable, assign_rank, note_errors
from sm120kit.evidence.logs.records import (  # noqa: F401  (the long-standing import place)
    MAX_RECORDS,
    MAX_SIGNAL_EVIDENCE,
    MAX_TEXT,
    TAIL,
    Evidence,
    Proc,
    SignalHits,
    clip,
)
from sm120kit.evidence.logs.runs import Runs
from sm120kit.evidence.logs.serving import ServingView
from sm120kit.evidence.logs.stream import StreamStats
from sm120kit.evidence.logs.versions import VersionScan
from sm120kit.evidence.logs.view import AnalysisView
from sm120kit.evidence.phases import classify_line, strip_ansi
from sm120kit.models.kv import KvLines, feed_kv_line

__all__ = ["MAX_RECORDS", "MAX_SIGNAL_EVIDENCE", "MAX_TEXT", "TAIL", "Evidence", "LogAnalysis",
           "Proc", "Scanner", "SignalHits"]

MAX_ADVICE = 50  # advice lines kept (all are counted)
_EMBEDDED = re.compile(
    r"(?<=\S)\s?(?=\((?:Worker|VllmWorker|EngineCore|APIServer|ApiServer|RayWorker)\w*(?: rank=\d+)? pid=\d+)"
)


class LogAnalysis(AnalysisView):
    """Accumulated facts of every line fed so far."""

    def __init__(self, scanner: Scanner | None = None, cues: Cues | None = None,
                 advice: Callable[[str], object] | None = None) -> None:
        """``scanner``: the named signals and signatures of a line; ``cues``: word cues (what a
        person writes, failure words and statements, NCCL WARN faults: ``cue.CUE_IDS``);
        ``advice``: not None for a line the software prints on healthy runs too (a warning or
        hint: never a failure, a cue or an NCCL fault); all the diagnose catalogue's data."""
        self.advice_of = advice
        self.advice: list[Evidence] = []  # the first advice lines (MAX_RECORDS) ...
        self.advice_count = 0  # ... and how many
        self.last_step: Evidence | None = None  # the last line that carried a phase (no advice)
        self.proc_table = ProcTable()
        self.runs = Runs()
        self.incidents = Incidents()
        self.nccl = NcclState(cues)
        self.book = SignalBook(scanner)
        self.fails = Failures(cues)
        self.request_error = (cues or {}).get("request-error")
        self._request_records: set[tuple[str, str, float | None]] = set()
        self.stats: dict[str, StreamStats] = {}
        self.serving = ServingView(self.stats)
        self.sites = CallSites()
        self.vs = VersionScan()
        self.kv = KvLines()  # vLLM's KV cache lines (sm120kit.models.kv)
        self.nccl_diag = NcclDiag()  # NCCL >= 2.31 'NCCL DIAG' report
        # what people describe: topology tables, GPU state, the symptom in words
        self.described = DescribedScan(cues=dict(cues or {}))
        self.engines = EngineSniffer()  # which program wrote the log (engines.py)
        self.elastic = ElasticSummary()  # torchrun's failure summary (elastic.py)
        self.tracebacks = Tracebacks()  # each process's traceback frames (frames.py)
        self.sources: list[dict[str, Any]] = []
        self.order = 0  # lines parsed, a global sequence for "first" across sources
        self.last_text: Evidence | None = None  # the input's last line (an excerpt's end)
        self.t_first: float | None = None
        self.t_last: float | None = None
        self._t_last: dict[str, float] = {}
        self.paste: dict[str, dict[str, Any]] = {}
        self.binary_sources: list[str] = []
        self.tickets: dict[str, bool] = {}  # source → pasted report (Markdown around the log)
        self.envelopes: dict[str, Envelope] = {}  # source → its line envelopes (envelope.py)

    # -- input ------------------------------------------------------------------------------
    def feed_stream(self, source: str, fh: IO[bytes]) -> StreamStats:
        return read_stream(self, source, fh)

    def feed_lines(self, source: str, lines: Iterable[str]) -> None:
        """Convenience for tests and live use: feed already split text lines."""
        for i, ln in enumerate(lines, 1):
            self.feed_line(source, i, ln.encode("utf-8", "surrogateescape"))

    def feed_line(self, source: str, lineno: int, raw: bytes, tail_only: bool = False) -> None:
        self.feed_text(source, lineno, raw.decode("utf-8", "replace"), tail_only)

    def feed_text(self, source: str, lineno: int, text: str, tail_only: bool = False) -> None:
        if "\x1b" in text:
            text = strip_ansi(text)
        if "\x00" in text:
            text = text.replace("\x00", "")
        if not text.strip():
            return
        env = self.envelopes.get(source)
        shown = None
        if env is not None:  # read without the envelope; quoted as written
            shown, text = text, env.strip(text)
        # a Python log line glued onto the end of an NCCL line (output interleaving)
        parts = _EMBEDDED.split(text) if " pid=" in text and " NCCL " in text else [text]
        for p in parts:
            if p.strip():
                self._one(source, lineno, p, tail_only, shown if len(parts) == 1 else None)

    # -- per line ---------------------------------------------------------------------------
    def _clock(self, source: str, o: Origin) -> float | None:
        """The line's log time, or the source's last one for a line without."""
        if o.t is None:
            return self._t_last.get(source)
        self._t_last[source] = o.t
        if self.t_first is None:
            self.t_first = o.t
        self.t_last = o.t
        return o.t

    def _one(self, source: str, lineno: int, text: str, tail_only: bool,
             shown: str | None = None) -> None:
        self.order += 1
        o = attribute(text)
        p = self.proc_table.proc_for(source, o, text, self.runs.run)
        self.proc_table.last_key[source] = p.key
        ev = Evidence(source, lineno, clip(shown or text))
        t = self._clock(source, o)
        p.saw(ev, t)
        if tail_only:
            self.nccl.op_count(text, p, ev)
            return
        if len(o.message.strip()) >= 12:
            self.last_text = ev
        if "KV cache" in text or "concurrency for" in text:
            feed_kv_line(self.kv, text)
        if NCCL_DIAG_MARK in text:
            self.nccl_diag.feed(text)
        self.engines.feed(text)
        self.elastic.feed(o.message, ev)
        if "File " in text or "Traceback" in text:
            self.tracebacks.feed(p.key, o.message, ev)
        ts = t if t is not None else float(self.order)
        site = site_of(o, o.message)
        if site is None:
            self._parse(p, o, text, ev, t, ts)
            return
        boring, phase = self.sites.boring(site)
        if boring:  # a call site that never said anything beyond its phase: skip the parsers
            if phase is not None:
                self.runs.observe(p, phase, ts, source, ev)
            return
        before = self._snap(p)
        phase = self._parse(p, o, text, ev, t, ts)
        self.sites.learn(site, self._snap(p) != before, phase)

    def _snap(self, p: Proc) -> tuple[Any, ...]:
        """Everything a line can change besides its phase (to learn boring call sites)."""
        inc = self.incidents
        return (len(inc.watchdog), len(inc.deaths), len(inc.rpc_timeouts), inc.shm_count,
                self.book.total, p.first_error, p.exception, p.rank, len(self.vs.versions),
                len(self.vs.config), self.vs.world_size, len(p.stalls), sum(p.stalls.values()),
                self.fails.failure_count)

    def _parse(self, p: Proc, o: Origin, text: str, ev: Evidence, t: float | None,
               ts: float) -> str | None:
        """Every parser over one line; returns its phase."""
        phase = "nccl-init" if o.kind == "nccl" and o.level != "WARN" else classify_line(text)
        adv = (self.advice_of is not None and self.advice_of(text) is not None) or \
            self._refused_request(p, o, ev, t)
        if phase is not None:
            self.runs.observe(p, phase, ts, ev.source, ev)
            if not adv:
                self.last_step = ev
        msg = o.message
        # a new launch in the same input: its own timeline, its own watchdog sequence numbers
        if (phase == "engine-init" or "vllm" in text or "vLLM" in text) and \
                self.runs.launch(text, phase):
            self.incidents.progress_seen()
        self.vs.feed(text)
        if adv:
            self._advice(ev)
        else:
            self.described.feed(ev.source, ev.line, text)
            if o.kind == "plain" and o.level is None and self.tickets.get(ev.source):
                self.described.feed_prose(ev.source, ev.line, msg)
        self._serving(p, msg, ev, phase)
        if o.kind == "nccl":
            self.nccl.feed(p, o, msg, ev, self.order, self.vs, self.fails.note, advice=adv)
            self.book.feed(msg, p, ev)
            return phase
        if not adv:
            self.fails.feed(o, msg, text, ev)
            note_errors(p, o, msg, ev, t, self.order, phase)
        self.incidents.feed(p, o, text, ev, t, self.runs.run, self.runs.global_tracker.high)
        assign_rank(p, msg)
        self.book.feed(text, p, ev)
        return phase

    def _refused_request(self, p: Proc, o: Origin, ev: Evidence, t: float | None) -> bool:
        """A line of a record the server's request handler logged for one request it refused
        (cue ``request-error``: vLLM's "Error in preprocessing prompt inputs" with the
        traceback of the ValueError it answers 400 with, TGI's one-line validation errors): the
        head, and every line after it of the same source, call site and time (vLLM prefixes
        each line of a record so). Such a line leaves the process's last lines, as it leaves
        its failures."""
        if self.request_error is None or o.level not in ("ERROR", "WARNING", None):
            return False
        key = (ev.source, o.loc or "", t)
        if not (o.loc and key in self._request_records):
            if self.request_error.find(o.message) is None:
                return False
            if o.loc:
                if len(self._request_records) > 64:
                    self._request_records.clear()
                self._request_records.add(key)
        if p.tail and p.tail[-1] is ev:
            p.tail.pop()
        return True

    def _advice(self, ev: Evidence) -> None:
        self.advice_count += 1
        if len(self.advice) < MAX_ADVICE:
            self.advice.append(ev)

    def _serving(self, p: Proc, msg: str, ev: Evidence, phase: str | None) -> None:
        sv = self.serving
        if phase == "serving":
            sv.served = True
        if "throughput" in msg:
            sv.metrics(msg, ev)
        if "/" in msg and (phase is not None or "%|" in msg or "it/s" in msg or "s/it" in msg):
            moved = sv.bar(msg, ev, phase or p.tracker.stage)
            if moved and self.incidents.shm_count:
                self.incidents.progress_seen()

    # -- results ----------------------------------------------------------------------------
    def finish(self) -> None:
        """Merge rank-only streams (torch ``[rankN]:`` lines) into the process with that rank."""
        self.proc_table.finish(self.incidents.deaths)
        self.vs.finish(self.proc_table.worker_names())

    def workers(self) -> list[Proc]:
        return self.proc_table.workers()
