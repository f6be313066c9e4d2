"""Read what people paste: undo what forums, browsers and terminals do to log lines.

A support ticket rarely carries the raw log. It carries an excerpt inside Markdown (code fences,
``> `` quotes, bullets, ``\\_`` escapes, inline backticks), lines that the browser or a thread
index wrapped (one watchdog record over three lines), ANSI colour codes whose ESC byte was lost
(``[1;36m(EngineCore pid=1)[0;0m``), docker-compose / pytest prefixes (``vllm_server  | ``,
``E       ``) and several log records glued onto one line when newlines were collapsed.

``PasteProfile.detect(head)`` decides from the first bytes of a source which repairs it needs,
so a large real log pays for none of them; ``PasteReader`` applies them line by line and joins
continuation lines (a line that cannot start a record, after a record line that is visibly
unfinished) before the analysis sees them. Everything is bounded: a joined record is capped at
``MAX_JOIN`` characters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

MAX_JOIN = 16_384
HEAD = 64 * 1024

# colour codes that lost their ESC byte ("[1;36m", "[0;0m", "[36m", "[0m")
_REMNANT = re.compile(r"(?:\^\[)?\[(?:\d{1,3}(?:;\d{1,3})*)?m")
_REMNANT_HINT = re.compile(rb"\[(?:0|1;3\d|3\d|9\d|0;0|0;3\d|1)m")
_FENCE = re.compile(r"^\s*(?:[>|]\s*)*(?:```|~~~)")
_COMPOSE = re.compile(r"^(?:[\w.-]+)?\s*\| (?!.*\|\s*$)")
_QUOTE = re.compile(r"^(?:\s*>)+ ?")
_BULLET = re.compile(r"^\s*(?:[-*+]|\d{1,2}[.)])\s+(?=\S)")
_PYTEST_E = re.compile(r"^E {1,7}")
_PID_BRACKET = re.compile(r"^\[\d+\] (?=\[rank\d+\])")
_MD_ESC = re.compile(r"\\([_*\[\]()#<>`~|{}!.+-])")
_ENTITIES = (("&gt;", ">"), ("&lt;", "<"), ("&quot;", '"'), ("&#39;", "'"), ("&amp;", "&"))
_GLUED = re.compile(r"(?<=\S) (?=\((?:[A-Za-z_][\w.()-]*)(?: rank=\d+)? pid=\d+(?:, ip=[\d.:]+)?\) )")

# a line that can start a record (so it is never a continuation of the previous one)
_START = re.compile(
    r"\d{4}-\d\d-\d\d[T ]\d"  # docker / python logging timestamps
    r"|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d "  # journald / syslog
    r"|\(\w[\w.()-]*(?: rank=\d+)? pid=\d+"  # vLLM process prefixes
    r"|\[rank\d+\]|\[\d+\] |\[[EWIF]\d*[ \]]|\[20\d\d-"  # torch, glog, bracketed stamps
    r"|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\b"
    r"|[\w.-]+:\d+:\d+ \[|[\w.-]+:\d+ NCCL "  # NCCL host:pid:tid [dev], host:pid NCCL DIAG
    r"|Traceback|File \"|frame #|During handling|The above exception|Exception raised"
    r"|terminate called|what\(\)"
    r"|(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Warning|Exit)\b"
    r"|[#|>*+-] |\d+\. |\$ |GPU\d|NCCL|nvidia-smi|Thread |Process \d|Python v"
)
# words that make a line a log record (only those are joined with a continuation)
_RECORD = re.compile(
    r"\(\w[\w.()-]*(?: rank=\d+)? pid=\d+|\[rank\d+\]|\[Rank \d+\]|WorkNCCL|ProcessGroupNCCL"
    r"|NCCL (?:INFO|WARN)|(?:INFO|WARNING|ERROR|CRITICAL) +\d\d-\d\d|\w(?:Error|Exception): "
    r"|\[\w+\.py:\d+\]"
)
_CLOSERS = {"(": ")", "[": "]", "{": "}"}


@dataclass
class PasteProfile:
    """Which repairs a source needs (decided once from its head)."""

    markdown: bool = False  # fences, quotes, bullets, escapes, entities
    remnants: bool = False  # colour codes without ESC
    compose: bool = False  # "service  | " prefixes
    pytest: bool = False  # "E       " prefixes
    glued: bool = False  # several "(Name pid=N)" records on one line
    join: bool = False  # wrapped records may continue on the next line

    @property
    def active(self) -> bool:
        return (self.markdown or self.remnants or self.compose or self.pytest or self.glued
                or self.join)

    @classmethod
    def detect(cls, head: bytes, whole: bool) -> PasteProfile:
        """``whole``: the head is the entire input (a paste or an excerpt, not a big log)."""
        p = cls()
        h = head[:HEAD]
        p.markdown = (b"```" in h or b"\n> " in h or h.startswith((b"> ", b">> ")) or b"\n>> " in h
                      or b"\\_" in h
                      or b"\n### " in h or h.startswith(b"### ") or b"&gt;" in h
                      or b"\n- " in h or b"\n* " in h)
        p.remnants = bool(_REMNANT_HINT.search(h))
        p.compose = bool(re.search(rb"(?m)^[\w.-]*\s+\| ", h))
        p.pytest = b"\nE    " in h or h.startswith(b"E    ")
        p.glued = bool(re.search(rb"(\([\w.()-]+ pid=\d+\)) [^\n]{1,400}? \1 ", h))
        p.join = whole or p.markdown
        return p


def _mid_token(prev: str, cur: str) -> bool:
    """The wrap fell inside a token ("Timeou|t(ms)", "'sm_1|20'"), not between words."""
    if prev[-1:] in "([{=/_.-" or cur[:1] in ")]},=._-/":
        return True
    if not (prev[-1:].isalnum() and cur[:1].isalnum()):
        return False
    last = prev.rsplit(" ", 1)[-1]
    return cur[:1].islower() or "_" in last or (last[-1:].isdigit() and cur[:1].isdigit())


def _unbalanced(s: str) -> bool:
    for o, c in _CLOSERS.items():
        if s.count(o) > s.count(c):
            return True
    return False


class PasteReader:
    """Clean and join the lines of one source according to its profile."""

    def __init__(self, profile: PasteProfile) -> None:
        self.p = profile
        self.fenced = 0  # fence lines dropped
        self.joined = 0  # continuation lines joined

    def clean(self, text: str) -> str | None:
        """One line → its text without paste artefacts; None for a line that carries nothing
        (a fence)."""
        p = self.p
        if p.remnants and "m" in text and "[" in text:
            text = _REMNANT.sub("", text)
        if p.markdown:
            md = self._markdown(text)
            if md is None:
                return None
            text = md
        if p.compose and "|" in text[:60]:
            m = _COMPOSE.match(text)
            if m:
                text = text[m.end():]
        if p.pytest and text.startswith("E  "):
            text = _PYTEST_E.sub("", text, count=1)
        if text.startswith("[") and text[1:2].isdigit():
            text = _PID_BRACKET.sub("", text, count=1)
        return text

    def _markdown(self, text: str) -> str | None:
        """Markdown around a pasted log: fences (None: a bare fence line), quotes, bullets,
        escapes, entities, inline code."""
        if "`" in text or "~~~" in text:
            if _FENCE.match(text):
                self.fenced += 1
                rest = _FENCE.sub("", text, count=1).lstrip("`~").strip()
                # "```E  AssertionError: ..." (a fence glued to the first line) keeps the line
                if not rest or re.fullmatch(r"[\w+-]{1,20}", rest):
                    return None
                text = rest
        if text[:1] in (">", " ") and ">" in text[:8]:
            text = _QUOTE.sub("", text, count=1)
        if text[:1] in ("-", "*", "+", " ") or text[:1].isdigit():
            m = _BULLET.match(text)
            if m and not text.lstrip().startswith(("File ", "-> ")):
                text = text[m.end():]
        if "\\" in text:
            text = _MD_ESC.sub(r"\1", text)
        if "&" in text:
            for a, b in _ENTITIES:
                text = text.replace(a, b)
        s = text.strip()
        if len(s) > 2 and s[0] == "`" and s[-1] == "`" and s.count("`") == 2:
            text = s[1:-1]
        return text

    def lines(self, rows: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
        """(lineno, text) → cleaned, unglued and joined (lineno of the record's first line)."""
        pend: tuple[int, str] | None = None
        for lineno, raw in rows:
            text = self.clean(raw) if self.p.active else raw
            if text is None:
                continue
            if self.p.join and pend is not None and self._continues(pend[1], text,
                                                                     loose=self.p.markdown):
                prev = pend[1]
                sep = "" if _mid_token(prev, text) else " "
                pend = (pend[0], (prev + sep + text.strip())[:MAX_JOIN])
                self.joined += 1
                continue
            if pend is not None:
                yield from self._unglue(*pend)
            pend = (lineno, text)
        if pend is not None:
            yield from self._unglue(*pend)

    def _unglue(self, lineno: int, text: str) -> Iterator[tuple[int, str]]:
        if self.p.glued and " pid=" in text:
            parts = _GLUED.split(text)
            if len(parts) > 1:
                for part in parts:
                    if part.strip():
                        yield lineno, part
                return
        yield lineno, text

    @staticmethod
    def _continues(prev: str, cur: str, loose: bool = True) -> bool:
        """``cur`` is the wrapped tail of ``prev``. Outside Markdown (a small log file) only a
        record with an unclosed bracket continues."""
        c = cur.strip()
        if not c or cur[:1] in (" ", "\t") or len(prev) < 40:
            return False
        if _START.match(c):
            return False
        if not _RECORD.search(prev):
            return False
        if _unbalanced(prev):
            return True
        if not loose:
            return False
        end = prev.rstrip()[-1:]
        if end in ".:!?;" or prev.endswith(("  ", "\t")):
            return False
        return c[0].islower() or c[0].isdigit() or c[0] in ")]},=._-/"
