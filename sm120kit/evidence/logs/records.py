"""The records a log analysis keeps: a line of evidence, one process's state, a signal's hits."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from sm120kit.evidence.phases import PhaseTracker

MAX_RECORDS = 2000
MAX_SIGNAL_EVIDENCE = 5
MAX_TEXT = 2000  # evidence text kept whole for JSON; renderers shorten at word boundaries
TAIL = 6


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


def clip(s: str) -> str:
    """The line as evidence: whole up to MAX_TEXT, else cut at the last space before it with "…"."""
    s = s.replace("\r", " ").strip()
    if len(s) <= MAX_TEXT:
        return s
    cut = s.rfind(" ", MAX_TEXT - 200, MAX_TEXT - 1)
    return s[: cut if cut > 0 else MAX_TEXT - 1] + "…"


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

    def saw(self, ev: Evidence, t: float | None) -> None:
        """One more line of this process (``t``: its log time, if known)."""
        self.lines += 1
        if self.first is None:
            self.first = ev
        self.last = ev
        if t is not None:
            self.last_t = t
        self.tail.append(ev)

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
    last: Evidence | None = None  # the last hit (evidence keeps the first few)



def merge_proc(dst: Proc, src: Proc) -> None:
    """Fold a rank-only stream ``src`` into the process ``dst`` that has its rank."""
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
