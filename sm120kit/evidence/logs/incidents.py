"""Stall and death records: watchdog timeouts, shm_broadcast waits, RPC timeouts, worker deaths."""

from __future__ import annotations

from sm120kit.evidence.logs.parsers import (
    Death,
    WatchdogRecord,
    parse_watchdog,
    rpc_timeout,
    shm_wait_seconds,
    worker_death,
)
from sm120kit.evidence.logs.prefix import Origin
from sm120kit.evidence.logs.records import MAX_RECORDS, Evidence, Proc
from sm120kit.evidence.phases import stall_signal


class Incidents:
    """Records of one kind each, capped at ``MAX_RECORDS``, with the process key that logged it."""

    def __init__(self) -> None:
        self.watchdog: list[tuple[WatchdogRecord, Evidence, str]] = []
        self.shm_waits: list[tuple[int, Evidence, str]] = []
        self.shm_count = 0
        self.shm_high_last = -1  # global phase index when the last shm wait was logged
        self.rpc_timeouts: list[tuple[str, Evidence, str]] = []
        self.deaths: list[tuple[Death, Evidence, str]] = []

    def feed(self, p: Proc, o: Origin, text: str, ev: Evidence, t: float | None, run: int,
             high: int) -> None:
        """One line of process ``p`` in launch ``run``; ``high`` is the global phase index."""
        sig = stall_signal(text)
        if sig is not None:
            p.stalls[sig] = p.stalls.get(sig, 0) + 1
        if sig == "shm-broadcast-wait":
            self._shm_wait(p, text, ev, high)
        wd = parse_watchdog(text)
        if wd is not None:
            wd.run, wd.t = run, t
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

    def _shm_wait(self, p: Proc, text: str, ev: Evidence, high: int) -> None:
        self.shm_count += 1
        self.shm_high_last = high
        secs = shm_wait_seconds(text) or 0
        if len(self.shm_waits) < MAX_RECORDS:
            self.shm_waits.append((secs, ev, p.key))
        else:
            self.shm_waits[-1] = (secs, ev, p.key)

    def progress_seen(self) -> None:
        """Startup progress after the shm_broadcast waits (or a new launch): not a stall."""
        self.shm_high_last = -1
