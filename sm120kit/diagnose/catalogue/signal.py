"""Named line facts of the catalogue that name no cause: signals (``[[signal]]``) and prose cues
(``[[cue]]``).

Rules and the entries' conditions (``with``, ``without``) read signals by id: "a GeForce board",
"CUDA graphs are being captured", "an NCCL version". Each ``match`` row is ``[needle, regex]``:
the regex is tried only on a line that holds the needle, so a line costs one ``in`` test per row;
the first row of a signal that matches gives the hit (and its value, the first named group).

A cue is a word class of what a person writes around a pasted log (``symptom``: it hangs;
``complaint``: it fails; ``praise``: it works): gate substrings, a regex, vetoing substrings
(``unless``) and a ``negation`` regex ("no hang"); ``lines`` says whether every line or only
prose lines (no log record) are read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sm120kit.diagnose.catalogue.errors import CatalogueError
from sm120kit.evidence.logs.cue import CUE_IDS, ProseCue

_ID = re.compile(r"^[a-z0-9][a-z0-9-]{1,63}$")
_KEYS = {"id", "about", "match", "sources", "examples", "scan"}
_CUE_KEYS = {"id", "about", "lines", "gate", "pattern", "unless", "negation", "sources"}


@dataclass
class Signal:
    id: str
    about: str
    match: list[tuple[str, str]]
    sources: list[str]
    examples: list[str] = field(default_factory=list)
    file: str = ""
    #: False: not counted per line; rules test it on the lines they hold (``ctx.says``)
    scan: bool = True
    rows: list[tuple[str, re.Pattern[str]]] = field(default_factory=list, repr=False)


def _err(where: str, key: str, what: str) -> CatalogueError:
    return CatalogueError(f"{where}: key '{key}': {what}")


def _rows(where: str, raw: Any) -> list[tuple[str, str]]:
    if not isinstance(raw, list) or not raw:
        raise _err(where, "match", "a list of [needle, regex] pairs")
    out = []
    for r in raw:
        if not (isinstance(r, list) and len(r) == 2 and all(isinstance(x, str) for x in r)
                and r[1]):
            raise _err(where, "match", "each row is [needle, regex], strings, the regex non-empty")
        out.append((r[0], r[1]))
    return out


def parse_signal(where: str, raw: Any, file: str) -> Signal:
    if not isinstance(raw, dict):
        raise _err(where, "signal", "each [[signal]] is a table")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise _err(where, unknown[0], "not a signal key")
    if not isinstance(raw.get("id"), str) or not _ID.match(raw["id"]):
        raise _err(where, "id", "lower-case words joined by '-'")
    for k in ("sources", "examples"):
        v = raw.get(k, [])
        if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
            raise _err(where, k, "must be a list of non-empty strings")
    if not raw.get("sources"):
        raise _err(where, "sources", "at least one: the software that prints it or a thread")
    if not isinstance(raw.get("scan", True), bool):
        raise _err(where, "scan", "true or false")
    if raw.get("scan", True) and any(not n for n, _rx in _rows(where, raw.get("match"))):
        raise _err(where, "match", "a counted signal (scan = true) needs a needle on every row")
    s = Signal(raw["id"], str(raw.get("about", "")), _rows(where, raw.get("match")),
               list(raw["sources"]), list(raw.get("examples", [])), file, raw.get("scan", True))
    for needle, rx in s.match:
        try:
            s.rows.append((needle, re.compile(rx)))
        except re.error as exc:
            raise _err(where, "match", f"bad regex {rx!r}: {exc}") from None
    return s


class SignalTable:
    """Every signal's rows in catalogue order: ``hits(line)`` → ``[(id, match)]``."""

    def __init__(self, signals: list[Signal], extra: tuple[tuple[str, str, str], ...] = ()) -> None:
        rows = [(s.id, n, rx) for s in signals for n, rx in s.rows if s.scan]
        rows += [(sid, n, re.compile(rx)) for sid, n, rx in extra]
        self.rows: tuple[tuple[str, str, re.Pattern[str]], ...] = tuple(rows)
        self.ids: tuple[str, ...] = tuple(dict.fromkeys(sid for sid, _n, _r in rows))
        #: every row, also of the signals rules test on their own lines (``scan = false``)
        self.all_rows = self.rows + tuple((s.id, n, rx) for s in signals for n, rx in s.rows
                                          if not s.scan)

    def hits(self, line: str) -> list[tuple[str, re.Match[str]]]:
        """(id, match) of every signal that matches the line (usually none)."""
        out: list[tuple[str, re.Match[str]]] = []
        seen: set[str] = set()
        for sid, needle, rx in self.rows:
            if needle in line and sid not in seen:
                m = rx.search(line)
                if m:
                    out.append((sid, m))
                    seen.add(sid)
        return out

    def match(self, sid: str, line: str) -> re.Match[str] | None:
        """The first row of ``sid`` that matches ``line`` (needle not required)."""
        for s, _n, rx in self.all_rows:
            if s == sid:
                m = rx.search(line)
                if m:
                    return m
        return None


@dataclass
class Cue:
    id: str
    about: str
    cue: ProseCue
    sources: list[str]
    file: str = ""


def _rx(where: str, key: str, raw: Any) -> re.Pattern[str]:
    if not isinstance(raw, str) or not raw:
        raise _err(where, key, "a non-empty regex")
    try:
        return re.compile(raw)
    except re.error as exc:
        raise _err(where, key, f"bad regex {raw!r}: {exc}") from None


def _strs(where: str, raw: dict[str, Any], key: str, need: bool) -> list[str]:
    v = raw.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v) or (need and not v):
        raise _err(where, key, "a non-empty list of non-empty strings" if need else
                   "a list of non-empty strings")
    return list(v)


def parse_cue(where: str, raw: Any, file: str) -> Cue:
    if not isinstance(raw, dict):
        raise _err(where, "cue", "each [[cue]] is a table")
    unknown = sorted(set(raw) - _CUE_KEYS)
    if unknown:
        raise _err(where, unknown[0], "not a cue key")
    if raw.get("id") not in CUE_IDS:
        raise _err(where, "id", f"one of {', '.join(CUE_IDS)}")
    if raw.get("lines", "all") not in ("all", "prose"):
        raise _err(where, "lines", "'all' or 'prose'")
    neg = raw.get("negation")
    pc = ProseCue(tuple(_strs(where, raw, "gate", False)), _rx(where, "pattern", raw.get("pattern")),
                  tuple(_strs(where, raw, "unless", False)),
                  None if neg is None else _rx(where, "negation", neg),
                  raw.get("lines", "all") == "prose")
    return Cue(raw["id"], str(raw.get("about", "")), pc, _strs(where, raw, "sources", True), file)
