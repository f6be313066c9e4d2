"""What a launch's lines say, as they arrive: the startup phase (:class:`PhaseTracker`), the first
known hang/death message, and whether the server is ready. Thread-safe (fed by the readers)."""

from __future__ import annotations

import re
import threading
from typing import Any

from sm120kit.evidence.phases import PhaseTracker, stall_signal

READY_PHASES = ("api-server-ready",)
_READY_RX = re.compile(r"Application startup complete")
IMMEDIATE_SIGNALS = frozenset(
    {"watchdog-timeout", "rpc-timeout", "nccl-timeout", "worker-died", "engine-dead",
     "nccl-teardown"}
)
DEATH_SIGNALS = frozenset({"worker-died", "engine-dead", "nccl-teardown"})
#: what a waiting EngineCore prints once a minute during a hang: not activity
WAIT_SIGNAL = "shm-broadcast-wait"


class LineWatch:
    def __init__(self) -> None:
        self.tracker = PhaseTracker()
        self.lock = threading.Lock()
        self.signal_hit: tuple[str, str] | None = None
        self.ready = False

    def feed(self, line: str, t: float, src: str) -> tuple[str | None, bool]:
        """(new phase or None, whether the line is activity)."""
        sig = stall_signal(line)
        with self.lock:
            new_phase = self.tracker.feed(line, t, src)
            if sig in IMMEDIATE_SIGNALS and self.signal_hit is None:
                self.signal_hit = (sig, line.strip()[:300])
            if (new_phase in READY_PHASES or self.tracker.current in READY_PHASES
                    or _READY_RX.search(line)):
                self.ready = True
        return new_phase, sig != WAIT_SIGNAL

    @property
    def current(self) -> str | None:
        with self.lock:
            return self.tracker.current

    def hit(self) -> tuple[str, str] | None:
        with self.lock:
            return self.signal_hit

    def timeline(self) -> tuple[list[dict[str, Any]], str | None]:
        with self.lock:
            return ([{"phase": ph, "t": round(t, 3), "stream": s}
                     for ph, t, s in self.tracker.timeline], self.tracker.current)
