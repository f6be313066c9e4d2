"""Which process or rank each line belongs to, and what each one did (errors, exception, death)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from sm120kit.evidence.logs.parsers import Death, exception_line
from sm120kit.evidence.logs.prefix import Origin, role_of, worker_parts
from sm120kit.evidence.logs.records import Evidence, Proc, merge_proc

FRAME = re.compile(r'^\s+File "[^"]+", line \d+')
_CONTINUES = ("Traceback", "During", "The above")


class ProcTable:
    """Processes by key (``pid 12``, ``rank 3``, ``main``), with the last one of each source."""

    def __init__(self) -> None:
        self.procs: dict[str, Proc] = {}
        self.last_key: dict[str, str] = {}
        self.source_default: dict[str, str] = {}

    def name_source(self, source: str, default: str | None) -> None:
        if default is not None:
            self.source_default[source] = default

    def proc_for(self, source: str, o: Origin, text: str, run: int) -> Proc:
        key = self._key(source, o, text, run)
        if isinstance(key, Proc):
            return key
        p = self.procs.get(key)
        if p is None:
            p = Proc(key=key)
            if key.startswith("rank ") and o.rank is None:
                p.rank = int(key.split()[1])
            self.procs[key] = p
        _update(p, o)
        return p

    def _key(self, source: str, o: Origin, text: str, run: int) -> str | Proc:
        if not (o.kind == "plain" and o.pid is None and o.rank is None):
            return o.key
        # continuation lines (traceback frames, wrapped messages) belong to the previous
        # line's process; other unprefixed lines to the source's default process
        prev = self.last_key.get(source)
        if prev is not None and (text[:1] in " \t" or text.startswith(_CONTINUES)
                                 or exception_line(text) is not None):
            return self.procs[prev]
        key = self.source_default.get(source, "main")
        return f"{key}#{run + 1}" if run else key

    def finish(self, deaths: Iterable[tuple[Death, Evidence, str]]) -> None:
        """Merge rank-only streams (torch ``[rankN]:`` lines) into the process with that rank,
        then give each worker death to its process."""
        by_rank = self._pid_workers_by_rank()
        for key in [k for k, p in self.procs.items() if p.pid is None and p.rank is not None]:
            q = self.procs[key]
            tgt = by_rank.get(q.rank) if q.rank is not None else None
            if tgt is None or tgt is q:
                q.role = "worker" if q.role == "main" else q.role
                continue
            merge_proc(tgt, q)
            del self.procs[key]
        ranks = {p.rank: p for p in self.procs.values() if p.rank is not None and p.role == "worker"}
        for d, ev, _k in deaths:
            dead = ranks.get(d.rank) if d.rank is not None else None
            if dead is None and d.pid is not None:
                dead = self.procs.get(f"pid {d.pid}")
            if dead is not None and dead.death is None:
                dead.death, dead.exit_code = ev, d.exit_code

    def _pid_workers_by_rank(self) -> dict[int, Proc]:
        by_rank: dict[int, Proc] = {}
        for p in self.procs.values():
            if p.rank is None and p.role == "worker" and p.name:
                parts = worker_parts(p.name)
                if parts and set(parts) <= {"TP", "DCP", "EP", "PCP"}:
                    p.rank = parts.get("TP")
            if p.rank is not None and p.pid is not None and p.role == "worker":
                by_rank.setdefault(p.rank, p)
        return by_rank

    def worker_names(self) -> list[str]:
        return [p.name for p in self.procs.values() if p.name and p.role == "worker"]

    def workers(self) -> list[Proc]:
        ws = [p for p in self.procs.values() if p.role == "worker"]
        return sorted(ws, key=lambda p: (p.rank if p.rank is not None else 1 << 30, p.pid or 0))


def _update(p: Proc, o: Origin) -> None:
    """What a line's prefix tells about its process: name, role, rank, pid, host, device."""
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


def note_errors(p: Proc, o: Origin, msg: str, ev: Evidence, t: float | None, order: int,
                phase: str | None) -> None:
    """A process's first error, whether it printed a traceback, and its first exception."""
    is_err = (
        o.level in ("ERROR", "CRITICAL")
        or msg.startswith("Traceback")
        or (o.kind == "torch" and o.level == "ERROR")
        or (o.kind == "plain" and exception_line(msg) is not None)
    )
    if is_err and p.first_error is None and phase == "error":
        p.first_error, p.first_error_t, p.first_error_order = ev, t, order
    if not p.traceback and ("Traceback" in msg or (msg[:1] == " " and FRAME.match(msg))):
        p.traceback = True
        if p.first_error is None:
            p.first_error, p.first_error_t, p.first_error_order = ev, t, order
    exc = exception_line(msg) if ("Error" in msg or "Exception" in msg or "c10::" in msg) else None
    if exc is not None and p.exception is None and not FRAME.match(msg):
        p.exception = exc
        p.exception_ev = ev
        if p.first_error is None:
            p.first_error, p.first_error_t, p.first_error_order = ev, t, order


_RANK_ASSIGN = re.compile(r"\brank (?P<r>\d+) in world size (?P<w>\d+) is assigned as")
_WORLD_RANK = re.compile(r"world_size=(?P<w>\d+) rank=(?P<r>\d+) local_rank=")


def assign_rank(p: Proc, msg: str) -> None:
    """vLLM's 'rank N in world size W is assigned as' / 'world_size=W rank=N' names the rank."""
    if "assigned as" in msg or "world_size=" in msg:
        m = _RANK_ASSIGN.search(msg) or _WORLD_RANK.search(msg)
        if m and p.rank is None and p.role in ("worker", "main"):
            p.rank = int(m.group("r"))
