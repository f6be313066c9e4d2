"""Envelopes other programs put around log lines, rewritten into the forms ``prefix`` reads.

A line a person pastes may carry a collector's prefix before what the engine wrote: journald /
syslog (``May 16 13:12:16 host vllm[123]: ``), the Kubernetes CRI file format
(``2025-05-16T13:12:16.645Z stdout F ``), ``kubectl logs --prefix`` (``[pod/vllm-0/vllm] ``),
Python logging of a wrapper that relays the engine's output
(``2025-03-08 02:04:48,693 - __main__ - INFO - ``), or an engine's own stamp that no vLLM parser
knows: SGLang's ``[2025-05-16 13:12:16 TP0] `` (rank kept as ``[rank0]:``), Ray's C++ glog
``[2021-09-14 10:11:20,566 I 2122527 2122927] file.cc:209: ``, TGI's Rust tracing
``2024-03-06T17:53:31.052Z ERROR shard-manager: `` and Ray's driver logging
``2020-03-28 18:22:59,901\tWARNING worker.py:1072 -- `` (both as ``LEVEL MM-DD HH:MM:SS [where]``,
the vLLM form), docker compose's service column (``vllm-1  | ``) and a terminal viewer's box
border (``\u2502 ``, k9s or a rich panel) before a vLLM record. ``Envelope.detect(head)``
decides once per source whether any line needs this, so a plain vLLM log pays nothing.
"""

from __future__ import annotations

import re

_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}
_LVL = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL", "WARN": "WARNING",
        "TRACE": "DEBUG"}
_STAMP = r"(?P<Y>\d{4})-(?P<M>\d\d)-(?P<D>\d\d)[T ](?P<hms>\d\d:\d\d:\d\d)(?:[.,]\d+)?"
_ENV = re.compile(
    r"(?:" + _STAMP + r"(?:Z|[+-]\d\d:?\d\d)?\s+(?:"
    r"(?:stdout|stderr) [FP] "  # Kubernetes CRI log files
    r"|- [\w.<>-]+ - (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) - "  # Python logging of a wrapper
    r"|(?P<lv>ERROR|WARN|WARNING|INFO|DEBUG|TRACE|CRITICAL)\s+(?P<at>[\w.-]+(?::\d+)?)(?::\s| -- )"
    r")?"
    r"|\[" + _STAMP.replace("?P<", "?P<b") + r"(?: (?P<g>[IWEF]) \d+ \d+\] (?P<gat>[\w.-]+:\d+): ?"
    r"|(?: TP(?P<tp>\d+)| (?:DP|PP|EP)\d+)*\] ?)"  # Ray glog / SGLang
    r"|(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) (?P<jd>[ \d]\d) (?P<jt>\d\d:\d\d:"
    r"\d\d) [\w.-]+ [\w.@/-]+(?:\[\d+\])?:"  # journald / syslog
    r"|\[pod/[^\]\s]+\] ?"  # kubectl logs --prefix
    r"|[\w.-]+\s+\| (?=\S)"  # docker compose: the service's name padded, then "| "
    r"|\u2502 ?"  # a terminal viewer's box border (k9s, a rich panel): "\u2502 "
    r")")
# what in a source's head says some line carries such an envelope (plain docker stamps do not)
_HINT = re.compile(
    rb"(?m)^(?:> ?)*(?:\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d\S*\s+(?:(?:stdout|stderr) [FP] |- [\w.<>-]+ - "
    rb"|(?:ERROR|WARN|INFO|DEBUG|TRACE)\s+[\w.-]+:)|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
    rb"|\[\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ \S+: "
    rb"|\[pod/|[\w.-]+\s+\| (?:INFO|WARNING|ERROR|DEBUG|\(\w+ pid=)"
    rb"|\xe2\x94\x82 (?:INFO|WARNING|ERROR|\(\w+ pid=))")


class Envelope:
    """Rewrites one source's lines (``strip``), decided once from its head (``detect``)."""

    @staticmethod
    def detect(head: bytes) -> Envelope | None:
        return Envelope() if _HINT.search(head[:65536]) else None

    def strip(self, text: str) -> str:
        """The line without its envelopes (up to three nested), time and level kept."""
        stamp = level = where = rank = None
        for _ in range(3):
            m = _ENV.match(text)
            if m is None or m.end() == 0:
                break
            g = m.groupdict()
            text = text[m.end():]
            if g["Y"] or g["bY"]:
                mo, d, hms = (g["M"], g["D"], g["hms"]) if g["Y"] else (g["bM"], g["bD"], g["bhms"])
                stamp = stamp or (mo, d, hms)
            elif g["mon"]:
                stamp = stamp or (f"{_MONTHS[g['mon']]:02d}", g["jd"].strip().zfill(2), g["jt"])
            level = _LVL.get(g["lv"] or g["g"] or "", g["lv"] or g["g"]) or level
            where = g["at"] or g["gat"] or where
            rank = g["tp"] if g["tp"] is not None else rank
        if stamp is None and rank is None:
            return text
        mo, d, hms = stamp or ("00", "00", "00:00:00")
        if level is not None:
            return f"{level} {mo}-{d} {hms} [{where or '-'}] {text}"
        head = f"0000-{mo}-{d}T{hms} " if stamp else ""
        return f"{head}[rank{rank}]: {text}" if rank is not None else head + text
