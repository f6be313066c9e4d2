"""One watchdog: the clocks of named progress channels.

A supervisor ``touch``-es a channel when it moves (a log line, a rank's message, bytes read, GPU
memory, changed py-spy frames); ``quiet`` is the time since the latest move of the channels
asked about. Used by collect's launch mode (output and sampler channels), by warmup's rank
supervisor (one channel per rank) and, through :meth:`Watchdog.guard`, by a rank under torchrun
(its own channel, no supervisor process). Thread-safe: readers touch from their own threads.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence


class Watchdog:
    def __init__(self, clock: Callable[[], float] = time.monotonic, history: int = 16) -> None:
        self.clock = clock
        self.started = clock()
        self._last: dict[str, float] = {}
        self._moves: dict[str, deque[float]] = {}
        self._history = history
        self._lock = threading.Lock()

    def touch(self, channel: str, t: float | None = None) -> None:
        t = self.clock() if t is None else t
        with self._lock:
            self._last[channel] = t
            self._moves.setdefault(channel, deque(maxlen=self._history)).append(t)

    def last(self, channels: Iterable[str] | None = None) -> float:
        """The latest move of ``channels`` (every channel when None); the start when none moved."""
        with self._lock:
            names = self._last if channels is None else channels
            return max((self._last[c] for c in names if c in self._last), default=self.started)

    def quiet(self, now: float | None = None, channels: Iterable[str] | None = None) -> float:
        now = self.clock() if now is None else now
        return now - self.last(channels)

    def moves(self, channels: Iterable[str], since: float) -> list[float]:
        """Times the channels moved at or after ``since`` (the last few per channel), sorted."""
        with self._lock:
            return sorted(t for c in channels for t in self._moves.get(c, ()) if t >= since)

    def longest_gap(self, channels: Iterable[str], since: float) -> float | None:
        """The longest interval between two consecutive moves since ``since`` (None: < 2)."""
        ts = self.moves(channels, since)
        if len(ts) < 2:
            return None
        return max(b - a for a, b in zip(ts, ts[1:], strict=False))

    def guard(self, channels: Sequence[str], limit: float, on_stall: Callable[[float], None], *,
              poll_s: float = 0.1, name: str = "watchdog") -> threading.Event:
        """Watch ``channels`` from a daemon thread: once they have been quiet for more than
        ``limit`` seconds, call ``on_stall(quiet)`` once and end. Setting the returned event
        ends the watch without a call (polled every ``poll_s``, so it ends within that)."""
        done = threading.Event()

        def loop() -> None:
            while not done.wait(poll_s):
                q = self.quiet(channels=channels)
                if q > limit:
                    done.set()
                    on_stall(q)

        threading.Thread(target=loop, name=name, daemon=True).start()
        return done
