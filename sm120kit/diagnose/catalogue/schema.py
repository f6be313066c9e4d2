"""One catalogue entry and its validation: a malformed entry is one line naming file and key."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sm120kit.diagnose.catalogue.conditions import When, parse_when
from sm120kit.diagnose.catalogue.errors import CatalogueError
from sm120kit.diagnose.catalogue.signal import Cue, Signal, parse_cue, parse_signal
from sm120kit.diagnose.categories import CATEGORIES, FIELD_PHASES
from sm120kit.report import clip_words

# ``advice``: a line the software prints on healthy runs too (a warning, a hint, an optional
# library it did not find): never a failure, never a cue, never evidence for a cause; its
# category is "none" (benign.toml)
ROLES = ("cause", "position", "effect", "advice")
NONE = "none"
GATES = ("", "stall")
_ID = re.compile(r"^[a-z0-9][a-z0-9-]{1,63}$")
_STR_LISTS = ("patterns", "symptoms", "excludes", "sources", "examples")
_KEYS = {"id", "category", "summary", "confidence", "priority", "phase", "fix", "since", "until",
         "requires", "role", "when", *_STR_LISTS}


@dataclass
class Entry:
    id: str
    category: str
    summary: str
    patterns: list[str]
    fix: str
    confidence: float = 0.85
    priority: int = 50
    phase: str | None = None
    role: str = "cause"
    requires: str = ""
    symptoms: list[str] = field(default_factory=list)
    excludes: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)
    since: str = ""
    until: str = ""
    when: When | None = None  # conditions on the rest of the input (catalogue/conditions.py)
    file: str = ""
    _rx: list[re.Pattern[str]] = field(default_factory=list, repr=False)
    _ex: list[re.Pattern[str]] = field(default_factory=list, repr=False)
    _sym: list[re.Pattern[str]] = field(default_factory=list, repr=False)

    def match(self, line: str) -> re.Match[str] | None:
        for rx in self._rx:
            m = rx.search(line)
            if m is not None:
                return None if any(x.search(line) for x in self._ex) else m
        return None

    def is_symptom(self, line: str) -> bool:
        return any(rx.search(line) for rx in self._sym)

    def conditions(self) -> When:
        """``when``; ``requires = "stall"`` (the older key) is ``stalled = true``."""
        return self.when or (When(stalled=True) if self.requires == "stall" else When())

    def summary_for(self, text: str) -> str:
        """``{line}``: the matched message; ``{name}``: a named group of the entry's pattern."""
        msg = text.split("] ")[-1].strip()
        out = self.summary.replace("{line}", clip_words(msg, 240))
        m = self.match(text) if "{" in out else None
        for k, v in (m.groupdict() if m is not None else {}).items():
            out = out.replace("{" + k + "}", v or "?")
        return out


def _compile(where: str, key: str, pats: list[str]) -> list[re.Pattern[str]]:
    out = []
    for p in pats:
        try:
            out.append(re.compile(p))
        except re.error as exc:
            raise CatalogueError(f"{where}: key '{key}': bad regex {p!r}: {exc}") from None
    return out


def _check_types(where: str, raw: dict[str, Any]) -> None:
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise CatalogueError(f"{where}: key '{unknown[0]}': not an entry key")
    for k in ("id", "category", "summary", "fix"):
        if not isinstance(raw.get(k), str) or not raw[k].strip():
            raise CatalogueError(f"{where}: key '{k}': required, a non-empty string")
    for k in _STR_LISTS:
        v = raw.get(k, [])
        if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
            raise CatalogueError(f"{where}: key '{k}': must be a list of non-empty strings")
    if not raw.get("patterns"):
        raise CatalogueError(f"{where}: key 'patterns': at least one pattern")
    c = raw.get("confidence", 0.85)
    if not isinstance(c, (int, float)) or isinstance(c, bool) or not 0 <= c <= 1:
        raise CatalogueError(f"{where}: key 'confidence': a number from 0 to 1")
    if not isinstance(raw.get("priority", 50), int):
        raise CatalogueError(f"{where}: key 'priority': an integer")


def _check_values(where: str, raw: dict[str, Any]) -> None:
    if not _ID.match(raw["id"]):
        raise CatalogueError(f"{where}: key 'id': lower-case words joined by '-'")
    advice = raw.get("role", "cause") == "advice"
    if advice != (raw["category"] == NONE):
        raise CatalogueError(f"{where}: key 'category': 'none' is the category of role 'advice' "
                             "entries, and only of them")
    if raw["category"] not in CATEGORIES and not advice:
        raise CatalogueError(f"{where}: key 'category': {raw['category']!r} is not one of "
                             f"{', '.join(CATEGORIES)}")
    if raw.get("phase") is not None and raw["phase"] not in FIELD_PHASES:
        raise CatalogueError(f"{where}: key 'phase': one of {', '.join(FIELD_PHASES)}")
    if raw.get("role", "cause") not in ROLES:
        raise CatalogueError(f"{where}: key 'role': one of {', '.join(ROLES)}")
    if raw.get("requires", "") not in GATES:
        raise CatalogueError(f"{where}: key 'requires': '' or 'stall'")


def parse_entry(where: str, raw: Any, file: str) -> Entry:
    if not isinstance(raw, dict):
        raise CatalogueError(f"{where}: key 'entry': each [[entry]] is a table")
    _check_types(where, raw)
    _check_values(where, raw)
    when = parse_when(where, raw.get("when"))
    e = Entry(**{k: v for k, v in raw.items() if k != "when"}, when=when, file=file)
    e.confidence = float(e.confidence)
    e._rx = _compile(where, "patterns", e.patterns)
    e._ex = _compile(where, "excludes", e.excludes)
    e._sym = _compile(where, "symptoms", e.symptoms)
    return e


@dataclass
class CatalogueFile:
    entries: list[Entry]
    signals: list[Signal]
    cues: list[Cue]


def read_file(path: Path) -> CatalogueFile:
    """The ``[[entry]]``, ``[[signal]]`` and ``[[cue]]`` tables of one catalogue file."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogueError(f"{path}: cannot read ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise CatalogueError(f"{path}: not valid TOML ({exc})") from None
    extra = sorted(set(data) - {"entry", "signal", "cue"})
    if extra:
        raise CatalogueError(f"{path}: key '{extra[0]}': only [[entry]], [[signal]] and [[cue]] "
                             "tables are allowed")
    cues = [parse_cue(where, r, str(path)) for where, r in _tables(path, "cue", data.get("cue", []))]
    return CatalogueFile(_entries(path, data.get("entry", [])),
                         _signals(path, data.get("signal", [])), cues)


def _tables(path: Path, key: str, raw: Any) -> list[tuple[str, Any]]:
    if not isinstance(raw, list):
        raise CatalogueError(f"{path}: key '{key}': use [[{key}]] tables")
    return [(f"{path}: {key} {i + 1}" + (f" ({r.get('id')})" if isinstance(r, dict) else ""), r)
            for i, r in enumerate(raw)]


def _entries(path: Path, raw: Any) -> list[Entry]:
    out: list[Entry] = []
    seen: set[str] = set()
    for where, r in _tables(path, "entry", raw):
        e = parse_entry(where, r, str(path))
        if e.id in seen:
            raise CatalogueError(f"{where}: key 'id': {e.id!r} appears twice in this file")
        seen.add(e.id)
        out.append(e)
    return out


def _signals(path: Path, raw: Any) -> list[Signal]:
    out: list[Signal] = []
    for where, r in _tables(path, "signal", raw):
        s = parse_signal(where, r, str(path))
        if any(x.id == s.id for x in out):
            raise CatalogueError(f"{where}: key 'id': {s.id!r} appears twice in this file")
        out.append(s)
    return out


def parse_file(path: Path) -> list[Entry]:
    """The ``[[entry]]`` tables of one catalogue file."""
    return read_file(path).entries
