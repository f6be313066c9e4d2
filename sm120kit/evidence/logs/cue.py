"""Word cues the log analysis reads, as compiled data: what a person writes around a pasted log,
what makes a line a recorded failure, which NCCL WARNs state a fault. Their words are catalogue
data (``sm120kit/diagnose/catalogue/cues.toml``), handed in by the engine; an analysis given none
reads no words (its parsers still read levels, tracebacks and exception lines)."""

from __future__ import annotations

import re
from dataclasses import dataclass

#: what a person writes (DescribedScan): it hangs, it fails, it works
DESCRIBED = ("symptom", "complaint", "praise")
#: what makes a log line a recorded failure (Failures): failure words behind their gate,
#: failure statements in other shapes (uvicorn's "ERROR:", Ray's wrapped exceptions, ...), an
#: error-level record in a logging format the prefixes do not read (JSON, logrus, Python's own
#: formats), and a supervisor's word that a process or container ended badly (docker, k8s, the
#: shell, torchrun's summary); ``failure-goes-on``: a line saying the program retries what just
#: failed (the failure before it is a retried one: a failure only when the run never got ready);
#: ``record-below-error``: a structured record stating its own level below error (an INFO line);
#: ``request-error``: the head of a record a server's request handler logs for one request it
#: refused (a prompt longer than the context, an unknown model): the server goes on serving, so
#: the record (its head and the lines of the same call site and time after it) is no failure
FAILURE = ("failure-words", "failure-stated", "failure-record", "failure-exit", "failure-goes-on",
           "record-below-error", "request-error")
#: NCCL WARNs (NcclState): one that states a fault, one the run goes on from
NCCL_WARN = ("nccl-warn-fault", "nccl-warn-goes-on")
CUE_IDS = DESCRIBED + FAILURE + NCCL_WARN


@dataclass(frozen=True)
class ProseCue:
    """One cue: gate substrings (none: every line is tried), the regex, vetoing substrings and an
    optional negation regex tried over the 16 characters before the match and the match itself
    ("no hang")."""

    gate: tuple[str, ...]
    rx: re.Pattern[str]
    unless: tuple[str, ...] = ()
    negation: re.Pattern[str] | None = None
    prose_only: bool = False

    def find(self, text: str) -> re.Match[str] | None:
        for g in self.gate:  # a plain loop: this runs on every parsed line
            if g in text:
                break
        else:
            if self.gate:
                return None
        if self.unless and any(u in text for u in self.unless):
            return None
        m = self.rx.search(text)
        if m is None or (self.negation is not None and
                         self.negation.search(text, max(0, m.start() - 16), m.end())):
            return None
        return m


Cues = dict[str, ProseCue]
