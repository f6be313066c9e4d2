"""One pass over log lines → per-process state, records and named signals, in bounded memory.

``LogAnalysis.feed_stream(source, fh)`` streams a binary file through ``stream.scan`` and
``feed_line``. Everything it keeps is bounded: per-process tails are deques, record lists are
capped (``MAX_RECORDS``), named signals keep the first ``MAX_SIGNAL_EVIDENCE`` hits plus a count.
"""

from __future__ import annotations

import io
import re
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any

from sm120kit.evidence.logs.described import DescribedScan
from sm120kit.evidence.logs.nccl_diag import MARK as NCCL_DIAG_MARK
from sm120kit.evidence.logs.nccl_diag import NcclDiag
from sm120kit.evidence.logs.parsers import (
    Death,
    WatchdogRecord,
    exception_line,
    nccl_comm_rank,
    nccl_env,
    nccl_transport,
    nccl_version,
    parse_watchdog,
    rpc_timeout,
    shm_wait_seconds,
    worker_death,
)
from sm120kit.evidence.logs.paste import HEAD, PasteProfile, PasteReader
from sm120kit.evidence.logs.prefix import Origin, attribute, role_of, worker_parts
from sm120kit.evidence.logs.signals import match_signals
from sm120kit.evidence.logs.stream import StreamStats, scan
from sm120kit.evidence.logs.versions import VersionScan
from sm120kit.evidence.phases import (
    PHASE_INDEX,
    PhaseTracker,
    classify_line,
    stall_signal,
    strip_ansi,
)
from sm120kit.models.kv import KvLines, feed_kv_line

MAX_RECORDS = 2000
MAX_SIGNAL_EVIDENCE = 5
MAX_TEXT = 2000  # evidence text kept whole for JSON; renderers shorten at word boundaries
TAIL = 6
_EMBEDDED = re.compile(
    r"(?<=\S)\s?(?=\((?:Worker|VllmWorker|EngineCore|APIServer|ApiServer|RayWorker)\w*(?: rank=\d+)? pid=\d+)"
)
_RANK_ASSIGN = re.compile(r"\brank (?P<r>\d+) in world size (?P<w>\d+) is assigned as")
_WORLD_RANK = re.compile(r"world_size=(?P<w>\d+) rank=(?P<r>\d+) local_rank=")
_SOURCE_RANK = re.compile(r"(?:^|[^a-z])(?:rank|worker)[_-]?(?P<r>\d+)", re.IGNORECASE)
_FRAME = re.compile(r'^\s+File "[^"]+", line \d+')
# what makes a line a recorded failure (besides ERROR/CRITICAL levels, glog E/F, tracebacks and
# exception lines): timeouts, deaths, aborts, non-zero exits
_FAIL = re.compile(
    r"timed out|Timed out|[Tt]imeout at|TimeoutError|died\b|exit code:? -?[1-9]|exit(?:ed)? with "
    r"(?:code|status) -?[1-9]|\bRC=[1-9]|_RC=[1-9]|\brc=[1-9]|returncode[ =:]+-?[1-9]"
    r"|Aborted|Segmentation fault|core dumped|terminate called|Fatal Python error|\bFAILED\b"
    r"|SIG(?:ABRT|SEGV|KILL|BUS)|EngineDeadError|initialization failed|failed to start"
    r"|Watchdog caught|[Hh]eartbeat monitor timed out|CUDA error|NCCL error|ncclSystemError"
    r"|ncclInternalError|ncclUnhandledCudaError|ncclInvalidUsage|out of memory")
_FAIL_GATE = ("imed out", "imeout", "died", "exit", "RC=", "rc=", "returncode", "Abort", "ault",
              "dumped", "terminate", "Fatal", "FAILED", "SIG", "EngineDead", "failed", "atchdog",
              "eartbeat", "error", "ncclSystem", "ncclInternal", "ncclUnhandled", "ncclInvalid",
              "of memory")
_METRICS = re.compile(r"generation throughput: (?P<g>[\d.]+) tokens/s, Running: (?P<r>\d+) req")
_PROGRESS = re.compile(r"(?:(?P<pct>\d{1,3})%\|[^|]*\| ?|\b)(?P<d>\d+)/(?P<t>\d+) ?(?:\[(?P<el>[\d:]+)|\b)")
_VLLM_VER = re.compile(r"(?i)\bvllm(?: version|[ =:]+v?|==)(?P<v>\d+\.\d+\.\d+[\w.+]*)|version (?P<b>\d+\.\d+\.\d+\S*)$"
                       r"|LLM engine \(v(?P<e>\d+\.\d+\.\d+\S*?)\)")
_LAUNCH = re.compile(r"█\s+version\s+\S|vLLM API server version|non-default args:|Launching vLLM")
# startup steps that legitimately run for minutes with little output
_SLOW = frozenset({"autotune", "kernel-warmup", "cuda-graph-capture", "torch-compile", "model-load"})
_DONE = re.compile(r"\btook [\d.]+ ?s|\btakes? [\d.]+ ?s(?:econds)? in total|Init COMPLETE|"
                   r"\bfinished\b|\bcompleted? in\b|Loading weights took")
_OPCOUNT = re.compile(r"(?P<op>\w+): opCount (?P<n>[0-9a-f]+) .*?comm (?P<comm>0x[0-9a-f]+)")


BORING_AFTER = 16  # a call site is "boring" after this many lines with nothing but a phase
NEVER = -(1 << 40)
MAX_TEMPLATES = 50_000
_NODIGITS = str.maketrans("", "", "0123456789")
# lines with these words always take the full path, whatever their call site did before
_RISKY = ("rror", "xception", "imeout", "imed out", "died", "atchdog", "NCCL", "Killed", "ault",
          "bort", "raceback", "atal", "ssert", "ailed", "emory", "nccl", "ersion", "DCP", "LSE",
          "rank", "utotun", "arm", "vailable", "P2P", "shm", "space", "SIG", "oom", "OOM")


def _template(o: Origin, msg: str, text: str) -> tuple[str, str] | None:
    """The call-site key of an ordinary vLLM/plain line, or None when it must be fully parsed."""
    if o.kind not in ("vllm", "plain") or o.level in ("ERROR", "CRITICAL"):
        return None
    if not msg or msg[0] in " \t":
        return None
    for w in _RISKY:
        if w in msg:
            return None
    return (o.name or "", o.loc or msg[:40].translate(_NODIGITS))


@dataclass
class Evidence:
    source: str
    line: int
    text: str

    @property
    def ref(self) -> str:
        return f"{self.source}:{self.line}"

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "line": self.line, "text": self.text}


def _clip(s: str) -> str:
    s = s.replace("\r", " ").strip()
    return s if len(s) <= MAX_TEXT else s[: MAX_TEXT - 3] + "..."


@dataclass
class Proc:
    """One process or rank stream."""

    key: str
    name: str | None = None
    pid: int | None = None
    rank: int | None = None
    role: str = "main"
    host: str | None = None
    ip: str | None = None
    devs: set[int] = field(default_factory=set)
    tracker: PhaseTracker = field(default_factory=PhaseTracker)
    lines: int = 0
    first: Evidence | None = None
    last: Evidence | None = None
    last_t: float | None = None
    first_error: Evidence | None = None
    first_error_t: float | None = None  # log time of the first error (None: no timestamps)
    first_error_order: int = 0  # global line sequence of the first error
    exception: tuple[str, str] | None = None  # first exception (type, message)
    exception_ev: Evidence | None = None
    death: Evidence | None = None
    exit_code: int | None = None
    stalls: dict[str, int] = field(default_factory=dict)
    tail: deque[Evidence] = field(default_factory=lambda: deque(maxlen=TAIL))
    phase_ev: dict[str, Evidence] = field(default_factory=dict)
    nccl_keys: set[str] = field(default_factory=set)
    traceback: bool = False  # printed a traceback (frames), with or without its exception line

    @property
    def label(self) -> str:
        bits = [self.name or self.role]
        if self.rank is not None and (self.name is None or "rank" not in self.name):
            bits.append(f"rank {self.rank}")
        if self.pid is not None:
            bits.append(f"pid {self.pid}")
        return " ".join(bits)

    def to_dict(self) -> dict[str, Any]:
        return {
            "process": self.name,
            "role": self.role,
            "rank": self.rank,
            "pid": self.pid,
            "host": self.host or self.ip,
            "devices": sorted(self.devs),
            "lines": self.lines,
            "phase": self.tracker.current,
            "stage": self.tracker.stage,  # last non-terminal phase: where it stopped
            "phases": self.tracker.phases_seen(),
            "last_line": self.last.to_dict() if self.last else None,
            "first_error": self.first_error.to_dict() if self.first_error else None,
            "exception": f"{self.exception[0]}: {self.exception[1]}".rstrip(": ")
            if self.exception else None,
            "died": self.death.to_dict() if self.death else None,
            "exit_code": self.exit_code,
            "stalls": dict(self.stalls),
        }


@dataclass
class SignalHits:
    count: int = 0
    evidence: list[Evidence] = field(default_factory=list)
    procs: list[str] = field(default_factory=list)
    values: set[str] = field(default_factory=set)  # the first named group of each match


Scanner = Callable[[str], list[tuple[str, re.Match[str]]]]


class LogAnalysis:
    """Accumulated facts of every line fed so far."""

    def __init__(self, scanner: Scanner | None = None) -> None:
        #: extra named signatures per line (the diagnose catalogue): ``line -> [(id, match)]``
        self.scanner = scanner
        self.procs: dict[str, Proc] = {}
        self.vs = VersionScan()
        self.watchdog: list[tuple[WatchdogRecord, Evidence, str]] = []
        self.shm_waits: list[tuple[int, Evidence, str]] = []
        self.shm_count = 0
        self.shm_high_last = -1  # global phase index when the last shm wait was logged
        self.rpc_timeouts: list[tuple[str, Evidence, str]] = []
        self.deaths: list[tuple[Death, Evidence, str]] = []
        self.nccl_warns: list[Evidence] = []
        self.nccl_warn_count = 0
        self.transports: dict[str, set[str]] = {}
        self.nccl_env: dict[str, str] = {}
        self.nccl_comms: dict[str, dict[int, str]] = {}  # comm -> rank -> proc key
        # NCCL COLL traces: comm -> proc key -> (last opCount, op, evidence)
        self.nccl_ops: dict[str, dict[str, tuple[int, str, Evidence]]] = {}
        self.signals: dict[str, SignalHits] = {}
        self.global_tracker = PhaseTracker()
        self.phase_ev: dict[str, Evidence] = {}
        self.sources: list[dict[str, Any]] = []
        self.stats: dict[str, StreamStats] = {}
        self.order = 0  # lines parsed, a global sequence for "first" across sources
        self._last_key: dict[str, str] = {}
        self._source_default: dict[str, str] = {}
        self._t_last: dict[str, float] = {}
        self._tmpl: dict[tuple[str, str], tuple[int, str | None]] = {}
        self._sig_total = 0
        self.fast_lines = 0  # lines of learned boring call sites (parsers skipped)
        self.kv = KvLines()  # vLLM's KV cache lines (sm120kit.models.kv)
        self.nccl_diag = NcclDiag()  # NCCL >= 2.31 'NCCL DIAG' report
        # what people describe: topology tables, GPU state, the symptom in words
        self.described = DescribedScan()
        # recorded failures (no false all-clear): the first few lines and how many
        self.failures: list[Evidence] = []
        self.failure_count = 0
        # launches in this input (a paste may hold several): never compared with each other
        self.run = 0
        self.run_versions: list[str | None] = [None]
        self.earlier_runs: list[PhaseTracker] = []
        # serving: metrics intervals with 0.0 tokens/s while requests run
        self.served = False
        self.metrics_lines = 0
        self.zero_streak = 0
        self.zero_streak_max = 0
        self.zero_streak_open = False
        self.zero_streak_ev: list[Evidence] = []
        # startup progress bars: (field words, done, total, evidence)
        self.progress: tuple[str, int, int, Evidence] | None = None
        self.zero_progress: Evidence | None = None  # "0/16 [..., 0.00 toks/s]" as the last bar
        self.last_text: Evidence | None = None  # the input's last line (an excerpt's end)
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.paste: dict[str, dict[str, Any]] = {}
        self.binary_sources: list[str] = []
        self._ticket: dict[str, bool] = {}  # source → pasted report (Markdown around the log)

    # -- input ------------------------------------------------------------------------------
    def feed_stream(self, source: str, fh: IO[bytes]) -> StreamStats:
        st = StreamStats()
        self.stats[source] = st
        m = _SOURCE_RANK.search(source.rsplit("/", 1)[-1])
        if m:
            self._source_default[source] = f"rank {int(m.group('r'))}"
        head = fh.read(HEAD + 1)
        whole = len(head) <= HEAD
        if head and _binary(head):
            self.binary_sources.append(source)
        prof = PasteProfile.detect(head, whole)
        self._ticket[source] = prof.markdown
        stream: IO[bytes] = _Prefixed(head, fh)  # type: ignore[assignment]
        try:
            if prof.active:
                rd = PasteReader(prof)
                rows = ((n, r.decode("utf-8", "replace")) for n, r in scan(stream, stats=st))
                for lineno, text in rd.lines(rows):
                    self.feed_text(source, lineno, text)
                self.paste[source] = {"joined_lines": rd.joined, "fences": rd.fenced,
                                      "repairs": [k for k, v in vars(prof).items() if v is True]}
            else:
                for lineno, raw in scan(stream, stats=st):
                    self.feed_line(source, lineno, raw)
            self._bulk_metrics(source, st)
        finally:  # a truncated stream still reports what it read
            for lineno, raw in st.last_nccl.values():
                self.feed_line(source, lineno, raw, tail_only=True)
            self.sources.append({"source": source, "bytes": st.bytes_read, "lines": st.lines,
                                 "long_lines": st.long_lines,
                                 "nccl_lines_skipped": st.nccl_skipped})
        return st

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
        # a Python log line glued onto the end of an NCCL line (output interleaving)
        if " pid=" in text and " NCCL " in text:
            parts = _EMBEDDED.split(text)
            if len(parts) > 1:
                for p in parts:
                    if p.strip():
                        self._one(source, lineno, p, tail_only)
                return
        self._one(source, lineno, text, tail_only)

    # -- per line ---------------------------------------------------------------------------
    def _proc_for(self, source: str, o: Origin, text: str) -> Proc:
        if o.kind == "plain" and o.pid is None and o.rank is None:
            # continuation lines (traceback frames, wrapped messages) belong to the previous
            # line's process; other unprefixed lines to the source's default process
            prev = self._last_key.get(source)
            if prev is not None and (text[:1] in " \t" or text.startswith(("Traceback", "During",
                                     "The above")) or exception_line(text) is not None):
                return self.procs[prev]
            key = self._source_default.get(source, "main")
            if self.run:
                key = f"{key}#{self.run + 1}"
        else:
            key = o.key
        p = self.procs.get(key)
        if p is None:
            p = Proc(key=key)
            if key.startswith("rank ") and o.rank is None:
                p.rank = int(key.split()[1])
            self.procs[key] = p
        if o.name and o.name != p.name and (p.name is None or len(o.name) >= len(p.name)
                                            or p.name in ("Worker",)):
            p.name = o.name
            p.role = role_of(o.name)
        elif o.kind == "nccl" and p.role == "main":
            p.role = "worker"
        if o.rank is not None and p.rank is None:
            p.rank = o.rank
        if o.pid is not None and p.pid is None:
            p.pid = o.pid
        if o.host:
            p.host = o.host
        if o.ip:
            p.ip = o.ip
        if o.dev is not None:
            p.devs.add(o.dev)
        return p

    def _one(self, source: str, lineno: int, text: str, tail_only: bool) -> None:
        self.order += 1
        o = attribute(text)
        p = self._proc_for(source, o, text)
        self._last_key[source] = p.key
        ev = Evidence(source, lineno, _clip(text))
        t = o.t if o.t is not None else self._t_last.get(source)
        if o.t is not None:
            self._t_last[source] = o.t
            if self.t_first is None:
                self.t_first = o.t
            self.t_last = o.t
        p.lines += 1
        if p.first is None:
            p.first = ev
        p.last = ev
        if t is not None:
            p.last_t = t
        p.tail.append(ev)
        if not tail_only and len(o.message.strip()) >= 12:
            self.last_text = ev
        if tail_only:
            if "opCount" in text:
                m = _OPCOUNT.search(text)
                if m and len(self.nccl_ops) < 256:
                    self.nccl_ops.setdefault(m.group("comm"), {})[p.key] = (
                        int(m.group("n"), 16), m.group("op"), ev)
            return
        msg = o.message
        if "KV cache" in text or "concurrency for" in text:
            feed_kv_line(self.kv, text)
        if NCCL_DIAG_MARK in text:
            self.nccl_diag.feed(text)
        ts = t if t is not None else float(self.order)
        tkey = _template(o, msg, text)
        if tkey is not None:
            c = self._tmpl.get(tkey)
            if c is not None and c[0] >= BORING_AFTER:
                # a call site that never said anything beyond its phase: skip the parsers
                self.fast_lines += 1
                if c[1] is not None:
                    self._observe(p, c[1], ts, source, ev)
                return
            before = self._snap(p)
        phase = "nccl-init" if o.kind == "nccl" and o.level != "WARN" else classify_line(text)
        if phase is not None:
            self._observe(p, phase, ts, source, ev)
        self._analyse(p, o, text, msg, ev, t, ts, phase)
        if tkey is not None:
            c = self._tmpl.get(tkey)
            if self._snap(p) != before:
                self._tmpl[tkey] = (NEVER, phase)
            elif c is None:
                if len(self._tmpl) < MAX_TEMPLATES:
                    self._tmpl[tkey] = (1, phase)
            elif c[0] != NEVER:
                self._tmpl[tkey] = (c[0] + 1, phase) if c[1] == phase else (0, phase)

    def _observe(self, p: Proc, phase: str, ts: float, source: str, ev: Evidence) -> None:
        if phase not in p.phase_ev:
            p.phase_ev[phase] = ev
        p.tracker.observe(phase, ts, source)
        if phase not in self.phase_ev:
            self.phase_ev[phase] = ev
        self.global_tracker.observe(phase, ts, source)

    def _snap(self, p: Proc) -> tuple[Any, ...]:
        """Everything a line can change besides its phase (to learn boring call sites)."""
        return (len(self.watchdog), len(self.deaths), len(self.rpc_timeouts), self.shm_count,
                self._sig_total, p.first_error, p.exception, p.rank, len(self.vs.versions),
                len(self.vs.config), self.vs.world_size, len(p.stalls), sum(p.stalls.values()))

    def _analyse(self, p: Proc, o: Origin, text: str, msg: str, ev: Evidence, t: float | None,
                 ts: float, phase: str | None) -> None:
        # a new launch in the same input: its own timeline, its own watchdog sequence numbers
        if phase == "engine-init" or "vllm" in text or "vLLM" in text:
            self._launch(text, phase)
        # versions / config
        self.vs.feed(text)
        self.described.feed(ev.source, ev.line, text)
        if o.kind == "plain" and o.level is None and self._ticket.get(ev.source):
            self.described.feed_prose(ev.source, ev.line, msg)
        if o.kind != "nccl":
            self._failure(o, msg, text, ev)
        if phase == "serving":
            self.served = True
        if "throughput" in msg:
            self._metrics(msg, ev)
        if "/" in msg and (phase is not None or "%|" in msg or "it/s" in msg or "s/it" in msg):
            self._progress(msg, ev, phase or p.tracker.stage)
        # error bookkeeping
        is_err = (
            o.level in ("ERROR", "CRITICAL")
            or msg.startswith("Traceback")
            or (o.kind == "torch" and o.level == "ERROR")
            or (o.kind == "plain" and exception_line(msg) is not None)
        )
        if o.kind == "nccl":
            self._nccl(p, o, msg, ev)
            return
        if is_err and p.first_error is None and phase == "error":
            p.first_error, p.first_error_t, p.first_error_order = ev, t, self.order
        if not p.traceback and ("Traceback" in msg or (msg[:1] == " " and _FRAME.match(msg))):
            p.traceback = True
            if p.first_error is None:
                p.first_error, p.first_error_t, p.first_error_order = ev, t, self.order
        exc = exception_line(msg) if ("Error" in msg or "Exception" in msg or "c10::" in msg) else None
        if exc is not None and p.exception is None and not _FRAME.match(msg):
            p.exception = exc
            p.exception_ev = ev
            if p.first_error is None:
                p.first_error, p.first_error_t, p.first_error_order = ev, t, self.order
        # stalls and records
        sig = stall_signal(text)
        if sig is not None:
            p.stalls[sig] = p.stalls.get(sig, 0) + 1
        if sig == "shm-broadcast-wait":
            self.shm_count += 1
            self.shm_high_last = self.global_tracker.high
            secs = shm_wait_seconds(text) or 0
            if len(self.shm_waits) < MAX_RECORDS:
                self.shm_waits.append((secs, ev, p.key))
            else:
                self.shm_waits[-1] = (secs, ev, p.key)
        wd = parse_watchdog(text)
        if wd is not None:
            wd.run, wd.t = self.run, t
            if wd.rank is None:
                wd.rank = o.rank if o.rank is not None else p.rank
            if len(self.watchdog) < MAX_RECORDS:
                self.watchdog.append((wd, ev, p.key))
        if sig == "rpc-timeout":
            method = rpc_timeout(text)
            if method and len(self.rpc_timeouts) < MAX_RECORDS:
                self.rpc_timeouts.append((method, ev, p.key))
        d = worker_death(text)
        if d is not None and len(self.deaths) < MAX_RECORDS:
            self.deaths.append((d, ev, p.key))
        if "assigned as" in msg or "world_size=" in msg:
            m = _RANK_ASSIGN.search(msg) or _WORLD_RANK.search(msg)
            if m and p.rank is None and p.role in ("worker", "main"):
                p.rank = int(m.group("r"))
        self._signals(text, p, ev)

    def _nccl(self, p: Proc, o: Origin, msg: str, ev: Evidence) -> None:
        if o.host and o.pid is not None:
            p.nccl_keys.add(f"{o.host}:{o.pid}")
        if o.level == "WARN":
            self.nccl_warn_count += 1
            if len(self.nccl_warns) < 50:
                self.nccl_warns.append(ev)
            if "rror" in msg or "ailed" in msg or "imeout" in msg or "imed out" in msg:
                self._note_failure(ev)
            if p.first_error is None and ("rror" in msg or "ailure" in msg):
                p.first_error, p.first_error_order = ev, self.order
        if " via " in msg:
            t = nccl_transport(msg)
            if t:
                self.transports.setdefault(p.key, set()).add(t)
        if "NCCL version" in msg:
            v = nccl_version(msg)
            if v:
                self.vs.versions.setdefault("nccl", v[0])
                if v[1]:
                    self.vs.versions.setdefault("cuda", v[1])
        if " nRanks " in msg:
            c = nccl_comm_rank(msg)
            if c:
                comm, rank, n = c
                if len(self.nccl_comms) < 256:
                    self.nccl_comms.setdefault(comm, {})[rank] = p.key
                if self.vs.world_size is not None and n == self.vs.world_size and p.rank is None:
                    p.rank = rank
        if "set by environment" in msg:
            e = nccl_env(msg)
            if e and len(self.nccl_env) < 200:
                self.nccl_env[e[0]] = e[1]
        self._signals(msg, p, ev)

    def _signals(self, text: str, p: Proc, ev: Evidence) -> None:
        hits = match_signals(text)
        if self.scanner is not None:
            hits += self.scanner(text)
        for sid, m in hits:
            h = self.signals.get(sid)
            if h is None:
                h = self.signals[sid] = SignalHits()
            h.count += 1
            self._sig_total += 1
            if len(h.evidence) < MAX_SIGNAL_EVIDENCE:
                h.evidence.append(ev)
            if p.key not in h.procs and len(h.procs) < 64:
                h.procs.append(p.key)
            if m.groupdict() and len(h.values) < 4096:
                v = next((x for x in m.groupdict().values() if x is not None), None)
                if v is not None:
                    h.values.add(v)

    def _launch(self, text: str, phase: str | None) -> None:
        """Start a new run when a launch banner follows a run that got past its start, or when
        the line names another vLLM version than the current run's."""
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
            self.shm_high_last = -1
        elif ver is not None and cur is None:
            self.run_versions[self.run] = ver

    def _failure(self, o: Origin, msg: str, text: str, ev: Evidence) -> None:
        if o.level in ("ERROR", "CRITICAL") or msg.startswith("Traceback"):
            self._note_failure(ev)
            return
        if o.kind == "torch" and o.level is None and msg.startswith("[") and msg[1:2] in "EF":
            self._note_failure(ev)
            return
        if o.level in ("INFO", "DEBUG"):
            if "died" in msg or "imed out" in msg or "exit code" in msg:
                if _FAIL.search(msg):
                    self._note_failure(ev)
            return
        for g in _FAIL_GATE:
            if g in text:
                if _FAIL.search(text):
                    self._note_failure(ev)
                    return
                break
        if exception_line(msg) is not None or "AssertionError" in text or "Error: " in text:
            self._note_failure(ev)
        elif msg[:1] in " \tfF" and (_FRAME.match(msg) or msg.startswith("frame #")
                                      or (msg.startswith('File "') and ", line " in msg)):
            self._note_failure(ev)  # traceback frames (their exception line may be cut off)

    def _note_failure(self, ev: Evidence) -> None:
        self.failure_count += 1
        if len(self.failures) < 8:
            self.failures.append(ev)

    def _bulk_metrics(self, source: str, st: StreamStats) -> None:
        """Metrics lines the stream counted as chatter: a non-zero one after the last zero one
        closes the zero-throughput streak."""
        self.metrics_lines += st.metrics_bulk
        if st.metrics_bulk:
            self.served = True
        last = self.zero_streak_ev[-1] if self.zero_streak_ev else None
        if last is not None and last.source == source and st.metrics_nonzero_last > last.line:
            self.zero_streak = 0
            self.zero_streak_open = False
            self.zero_streak_ev = []

    def _metrics(self, msg: str, ev: Evidence) -> None:
        m = _METRICS.search(msg)
        if not m:
            return
        self.metrics_lines += 1
        self.served = True
        if float(m.group("g")) == 0.0 and int(m.group("r")) > 0:
            prev = self.zero_streak_ev[-1] if self.zero_streak_ev else None
            st = self.stats.get(ev.source)
            if prev is not None and st is not None and prev.source == ev.source and any(
                    prev.line < n < ev.line for n in st.metrics_nonzero):
                # a non-zero interval (read as chatter) came between: the streak restarts
                self.zero_streak, self.zero_streak_ev = 0, []
            self.zero_streak += 1
            self.zero_streak_open = True
            if len(self.zero_streak_ev) < 2:
                self.zero_streak_ev.append(ev)
            else:
                self.zero_streak_ev[-1] = ev
            self.zero_streak_max = max(self.zero_streak_max, self.zero_streak)
        elif self.zero_streak or self.zero_streak_open:
            self.zero_streak = 0
            self.zero_streak_open = False
            self.zero_streak_ev = []

    def _progress(self, msg: str, ev: Evidence, stage: str | None) -> None:
        # tqdm repeats its bar on one line (CR without LF): the last one counts
        bars = list(_PROGRESS.finditer(msg[-400:] if len(msg) > 400 else msg))
        if not bars:
            return
        m = bars[-1]
        d, tot = int(m.group("d")), int(m.group("t"))
        if tot <= 1 or d > tot or tot > 1_000_000:
            return
        what = stage or "startup"
        if self.shm_count and (self.progress is None or self.progress[1] != d):
            self.shm_high_last = -1  # progress after the shm_broadcast waits: not a stall
        self.progress = (what, d, tot, ev)
        if "toks/s" in msg or "tokens/s" in msg:
            self.zero_progress = ev if d == 0 else None

    def is_ticket(self) -> bool:
        """The input is a pasted report (Markdown), not a log file written by the run."""
        return any("markdown" in info.get("repairs", []) for info in self.paste.values())

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
        if self.progress is not None and self.progress[1] < self.progress[2] and \
                self.last_text is not None and self.progress[3].line >= self.last_text.line - 2:
            return None
        return stage

    def finished_last(self) -> bool:
        """The last line reports a step as finished ('took 4.5 s', 'Init COMPLETE')."""
        t = self.last_text.text if self.last_text else ""
        return bool(_DONE.search(t))

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
        words = stage
        if self.progress is not None:
            what, done, tot, _ev = self.progress
            if done < tot:
                words = f"{what} {done}/{tot}"
        span = ""
        if self.t_first is not None and self.t_last is not None and self.t_last > self.t_first:
            mins = (self.t_last - self.t_first) / 60.0
            span = f" after {mins:.0f} min" if mins >= 1 else f" after {self.t_last - self.t_first:.0f} s"
        return f"progressing: {words}{span}"

    # -- results ----------------------------------------------------------------------------
    def finish(self) -> None:
        """Merge rank-only streams (torch ``[rankN]:`` lines) into the process with that rank."""
        by_rank: dict[int, Proc] = {}
        for p in self.procs.values():
            if p.rank is None and p.role == "worker" and p.name:
                parts = worker_parts(p.name)
                if parts and set(parts) <= {"TP", "DCP", "EP", "PCP"}:
                    p.rank = parts.get("TP")
            if p.rank is not None and p.pid is not None and p.role == "worker":
                by_rank.setdefault(p.rank, p)
        for key in [k for k, p in self.procs.items() if p.pid is None and p.rank is not None]:
            q = self.procs[key]
            tgt = by_rank.get(q.rank) if q.rank is not None else None
            if tgt is None or tgt is q:
                q.role = "worker" if q.role == "main" else q.role
                continue
            _merge(tgt, q)
            del self.procs[key]
        ranks = {p.rank: p for p in self.procs.values() if p.rank is not None and p.role == "worker"}
        for d, ev, _k in self.deaths:
            tgt = ranks.get(d.rank) if d.rank is not None else None
            if tgt is None and d.pid is not None:
                tgt = self.procs.get(f"pid {d.pid}")
            if tgt is not None and tgt.death is None:
                tgt.death, tgt.exit_code = ev, d.exit_code
        self.vs.finish([p.name for p in self.procs.values() if p.name and p.role == "worker"])

    def shm_wait_open(self) -> bool:
        """shm_broadcast waits that no later startup progress resolved."""
        return bool(self.shm_count) and self.global_tracker.high <= self.shm_high_last

    def workers(self) -> list[Proc]:
        ws = [p for p in self.procs.values() if p.role == "worker"]
        return sorted(ws, key=lambda p: (p.rank if p.rank is not None else 1 << 30, p.pid or 0))


class _Prefixed(io.RawIOBase):
    """A binary stream that first returns ``head`` (already read to look at), then ``fh``."""

    def __init__(self, head: bytes, fh: IO[bytes]) -> None:
        self._head = head
        self._fh = fh

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if self._head:
            if n < 0 or n >= len(self._head):
                out, self._head = self._head, b""
                if n < 0:
                    return out + self._fh.read()
                return out
            out, self._head = self._head[:n], self._head[n:]
            return out
        return self._fh.read(n)


def _binary(head: bytes) -> bool:
    """No text evidence: NUL bytes, or mostly bytes that are neither UTF-8 nor printable."""
    sample = head[:8192]
    if sample.count(b"\x00") > len(sample) // 100:
        return True
    text = sample.decode("utf-8", "replace")
    bad = text.count("\ufffd") + sum(1 for c in text if ord(c) < 32 and c not in "\t\n\r\x1b\x0c")
    return bad > len(text) // 10


def _merge(dst: Proc, src: Proc) -> None:
    dst.lines += src.lines
    if src.first_error and (dst.first_error is None or (
            src.first_error_t is not None and dst.first_error_t is not None
            and src.first_error_t < dst.first_error_t)):
        dst.first_error = src.first_error
        dst.first_error_t = src.first_error_t
        dst.first_error_order = src.first_error_order
    if dst.exception is None:
        dst.exception, dst.exception_ev = src.exception, src.exception_ev
    for k, v in src.stalls.items():
        dst.stalls[k] = dst.stalls.get(k, 0) + v
    if dst.death is None:
        dst.death, dst.exit_code = src.death, src.exit_code
    for ph, ev in src.phase_ev.items():
        dst.phase_ev.setdefault(ph, ev)
        dst.tracker.observe(ph, src.tracker.last_t or 0.0)
    later = src.last is not None and (
        dst.last is None
        or (src.last_t is not None and (dst.last_t is None or src.last_t > dst.last_t))
        or ((src.last_t == dst.last_t or src.last_t is None) and src.last.source == dst.last.source
            and src.last.line > dst.last.line))
    if later:
        dst.last_t, dst.last = src.last_t or dst.last_t, src.last
