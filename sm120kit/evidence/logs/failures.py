"""Recorded failures (no false all-clear): the first few failure lines of the input and how many,
and the failures the program said it retries (kept apart: a failure only where the run never got
ready, which the diagnose rules judge)."""

from __future__ import annotations

import re

from sm120kit.evidence.logs.cue import Cues
from sm120kit.evidence.logs.parsers import exception_line
from sm120kit.evidence.logs.prefix import Origin
from sm120kit.evidence.logs.procs import FRAME
from sm120kit.evidence.logs.records import Evidence

KEEP = 8
# advice states no failure: "If you are running out of memory, consider decreasing ..." (vLLM's
# CUDA-graph hint on every start) is read without its advice clause, whatever its prefix
_ADVICE = re.compile(r"(?i)\b(?:if you (?:are|see|encounter|get|hit|run)|if (?:an? )?out-of-memory "
                     r"error occurs|consider (?:decreas|increas|reduc|lower|rais|setting|using))"
                     r"[^.;]*")


class Failures:
    def __init__(self, cues: Cues | None = None) -> None:
        """``cues``: ``failure-words`` (timeouts, deaths, aborts, non-zero exits; catalogue
        cues.toml), ``failure-stated`` (failure statements in other shapes), ``failure-record``
        (error-level records of other logging formats), ``failure-exit`` (a supervisor's word
        that a process ended badly), ``failure-goes-on`` (the program retries) and
        ``record-below-error`` (a JSON/logfmt record whose own level is below error: read as
        an INFO line)."""
        self.failures: list[Evidence] = []
        self.failure_count = 0
        self.retried: list[Evidence] = []  # failures the program said it retries
        c = cues or {}
        self.words = c.get("failure-words")
        self.stated = tuple(x for x in (c.get("failure-stated"), c.get("failure-record"),
                                        c.get("failure-exit")) if x is not None)
        self.goes_on = c.get("failure-goes-on")
        self.quiet = c.get("record-below-error")

    def note(self, ev: Evidence) -> None:
        self.failure_count += 1
        if len(self.failures) < KEEP:
            self.failures.append(ev)

    def feed(self, o: Origin, msg: str, text: str, ev: Evidence) -> None:
        """Record the line when it is a failure (a non-NCCL line; NCCL WARNs are judged apart)."""
        if self.goes_on is not None and self.goes_on.find(msg) is not None:
            self._retry(o, msg, text, ev)
        elif self._is_failure(o, msg, text):
            self.note(ev)

    def _retry(self, o: Origin, msg: str, text: str, ev: Evidence) -> None:
        """A retry: the line itself when it states the failure, else the failure just before it
        (same source, at most three lines up) moves from the failures to ``retried``."""
        last = self.failures[-1] if self.failures else None
        if self._is_failure(o, msg, text):
            hit = ev
        elif last is not None and last.source == ev.source and 0 < ev.line - last.line <= 3 \
                and self.failure_count == len(self.failures):
            hit = self.failures.pop()
            self.failure_count -= 1
        else:
            return
        if len(self.retried) < KEEP:
            self.retried.append(hit)

    def _is_failure(self, o: Origin, msg: str, text: str) -> bool:
        level = o.level
        if level is None and self.quiet is not None and self.quiet.find(msg) is not None:
            level = "INFO"  # a structured record that states its own level, below error
        if level in ("ERROR", "CRITICAL") or msg.startswith("Traceback"):
            return True
        if o.kind == "torch" and level is None and msg.startswith("[") and msg[1:2] in "EF":
            return True
        words = self.words
        if level in ("INFO", "DEBUG"):  # an INFO line counts only for a death or timeout
            return ("died" in msg or "imed out" in msg or "exit code" in msg or "dead" in msg
                    or "DEAD" in msg) and words is not None and words.find(msg) is not None
        said = _ADVICE.sub("", text) if "f you" in text or "onsider" in text else text
        if words is not None and words.find(said) is not None:
            return True
        if exception_line(msg) is not None or "AssertionError" in text or "Error: " in text:
            return True
        for cue in self.stated:
            if cue.find(msg) is not None:
                return True
        return _frame(msg)


def _frame(msg: str) -> bool:
    # traceback frames (their exception line may be cut off)
    return msg[:1] in " \tfF" and bool(FRAME.match(msg) or msg.startswith("frame #")
                                        or (msg.startswith('File "') and ", line " in msg))
