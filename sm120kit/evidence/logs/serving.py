"""The serving and startup-progress view: metrics intervals with 0 tokens/s, the last progress bar."""

from __future__ import annotations

import re

from sm120kit.evidence.logs.records import Evidence
from sm120kit.evidence.logs.stream import StreamStats

_METRICS = re.compile(r"generation throughput: (?P<g>[\d.]+) tokens/s, Running: (?P<r>\d+) req")
# the queue beside it: vLLM V0 "Pending: N reqs", V1 "Waiting: N reqs"; and the prefill rate
_QUEUED = re.compile(r"\b(?:Pending|Waiting): (?P<w>\d+) req")
_PROMPT = re.compile(r"prompt throughput: (?P<p>[\d.]+) tokens/s")
_PROGRESS = re.compile(r"(?:(?P<pct>\d{1,3})%\|[^|]*\| ?|\b)(?P<d>\d+)/(?P<t>\d+) ?(?:\[(?P<el>[\d:]+)|\b)")


class ServingView:
    """Serving: metrics intervals with 0.0 tokens/s while requests run; startup progress bars."""

    def __init__(self, stats: dict[str, StreamStats]) -> None:
        self._stats = stats  # the analysis's per-source stream stats (non-zero metrics lines)
        self.served = False
        self.metrics_lines = 0
        self.zero_streak = 0
        self.zero_streak_max = 0
        self.zero_streak_open = False
        self.zero_streak_ev: list[Evidence] = []
        # startup progress bars: (field words, done, total, evidence)
        self.progress: tuple[str, int, int, Evidence] | None = None
        self.progress_elapsed: str | None = None  # tqdm's elapsed clock of that bar ("09:36")
        self.zero_progress: Evidence | None = None  # "0/16 [..., 0.00 toks/s]" as the last bar

    def _close_streak(self) -> None:
        self.zero_streak = 0
        self.zero_streak_open = False
        self.zero_streak_ev = []

    def bulk_metrics(self, source: str, st: StreamStats) -> None:
        """Metrics lines the stream counted as chatter: a non-zero one after the last zero one
        closes the zero-throughput streak."""
        self.metrics_lines += st.metrics_bulk
        if st.metrics_bulk:
            self.served = True
        last = self.zero_streak_ev[-1] if self.zero_streak_ev else None
        if last is not None and last.source == source and st.metrics_nonzero_last > last.line:
            self._close_streak()

    def metrics(self, msg: str, ev: Evidence) -> None:
        m = _METRICS.search(msg)
        if not m:
            return
        self.metrics_lines += 1
        self.served = True
        if float(m.group("g")) == 0.0 and (int(m.group("r")) > 0 or _queued_only(msg)):
            self._zero_interval(ev)
        elif self.zero_streak or self.zero_streak_open:
            self._close_streak()

    def _zero_interval(self, ev: Evidence) -> None:
        prev = self.zero_streak_ev[-1] if self.zero_streak_ev else None
        st = self._stats.get(ev.source)
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

    def bar(self, msg: str, ev: Evidence, stage: str | None) -> bool:
        """Keep the line's last progress bar; True when its count moved (or it is the first)."""
        # tqdm repeats its bar on one line (CR without LF): the last one counts
        bars = list(_PROGRESS.finditer(msg[-400:] if len(msg) > 400 else msg))
        if not bars:
            return False
        m = bars[-1]
        d, tot = int(m.group("d")), int(m.group("t"))
        if tot <= 1 or d > tot or tot > 1_000_000:
            return False
        moved = self.progress is None or self.progress[1] != d
        self.progress = (stage or "startup", d, tot, ev)
        self.progress_elapsed = m.group("el")
        if "toks/s" in msg or "tokens/s" in msg:
            self.zero_progress = ev if d == 0 else None
        return moved


def _queued_only(msg: str) -> bool:
    """Nothing running, requests waiting and no prefill in the interval: the scheduler admits
    none of the queued requests (a dead or stuck engine core behind a front end that still
    logs; vLLM V1 logs its last scheduler stats with the throughput of the interval)."""
    q, pr = _QUEUED.search(msg), _PROMPT.search(msg)
    return q is not None and int(q.group("w")) > 0 and pr is not None and float(pr.group("p")) == 0.0


def clock_seconds(clock: str) -> int | None:
    """Seconds of a tqdm clock, ``MM:SS`` or ``H:MM:SS``; None for anything else."""
    parts = clock.split(":")
    if not 2 <= len(parts) <= 3 or not all(x.isdigit() for x in parts):
        return None
    secs = 0
    for x in parts:
        secs = secs * 60 + int(x)
    return secs
