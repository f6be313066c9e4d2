"""Named signals of each line (the diagnose catalogue's signals and entries, through the scanner
the analysis is given): counts, first evidence, values."""

from __future__ import annotations

import re
from collections.abc import Callable

from sm120kit.evidence.logs.records import MAX_SIGNAL_EVIDENCE, Evidence, Proc, SignalHits

Scanner = Callable[[str], list[tuple[str, re.Match[str]]]]
MAX_PROCS = 64
MAX_VALUES = 4096


class SignalBook:
    def __init__(self, scanner: Scanner | None = None) -> None:
        #: named signals and signatures per line (the diagnose catalogue): ``line -> [(id, m)]``;
        #: without one (tests of the parsers alone) no line has a named signal
        self.scanner = scanner
        self.signals: dict[str, SignalHits] = {}
        self.total = 0  # hits of every signal (a line that changed nothing has none)

    def feed(self, text: str, p: Proc, ev: Evidence) -> None:
        if self.scanner is None:
            return
        hits = self.scanner(text)
        for sid, m in hits:
            h = self.signals.get(sid)
            if h is None:
                h = self.signals[sid] = SignalHits()
            h.count += 1
            h.last = ev
            self.total += 1
            if len(h.evidence) < MAX_SIGNAL_EVIDENCE:
                h.evidence.append(ev)
            if p.key not in h.procs and len(h.procs) < MAX_PROCS:
                h.procs.append(p.key)
            _value(h, m)


def _value(h: SignalHits, m: re.Match[str]) -> None:
    """Keep the match's first named group that matched."""
    if m.groupdict() and len(h.values) < MAX_VALUES:
        v = next((x for x in m.groupdict().values() if x is not None), None)
        if v is not None:
            h.values.add(v)
