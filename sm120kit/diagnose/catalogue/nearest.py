"""The catalogue entries nearest to an error line nobody recognised (standard library only).

A line and every entry (its patterns with the regex syntax stripped, its examples, its summary)
become templates: words, lower-case, numbers/hex/paths replaced by a placeholder. The score is
the mean of the Jaccard overlap of word 2-shingles and ``difflib``'s ratio, best over an
entry's templates.
"""

from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING

from sm120kit.diagnose.catalogue.schema import Entry

if TYPE_CHECKING:
    from sm120kit.diagnose.catalogue import Catalogue

_VAR = re.compile(r"0x[0-9a-f]+|\d+(?:\.\d+)*|/[\w./-]+|'[^']*'|\"[^\"]*\"")
_WORD = re.compile(r"[a-z_]{2,}|<v>")
_REGEX = re.compile(r"\\[sSdDwWbB]|[\\()\[\]{}?*+|^$]|\(\?[:!=<]")


def template(line: str) -> list[str]:
    msg = line.split("] ")[-1].lower()
    return _WORD.findall(_VAR.sub(" <v> ", msg))


def _shingles(words: list[str]) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + 2]) for i in range(max(len(words) - 1, 1))}


def similarity(a: list[str], b: list[str]) -> float:
    if not a or not b:
        return 0.0
    sa, sb = _shingles(a), _shingles(b)
    jac = len(sa & sb) / len(sa | sb)
    return (jac + difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()) / 2


def _templates(e: Entry) -> list[list[str]]:
    out = [template(_REGEX.sub(" ", p)) for p in e.patterns]
    return [t for t in out + [template(x) for x in e.examples] + [template(e.summary)] if t]


def nearest(entries: list[Entry], line: str, k: int = 3) -> list[tuple[Entry, float]]:
    """The ``k`` entries most like ``line``, best first (score 0..1)."""
    t = template(line)
    scored = [(e, max((similarity(t, x) for x in _templates(e)), default=0.0)) for e in entries]
    scored.sort(key=lambda x: (-x[1], x[0].id))
    return scored[:k]


def looks_like(cat: Catalogue | None, line: str) -> str:
    """``; looks like: <id> — <source> (0.42), ...``: the three nearest catalogue entries."""
    if cat is None or not cat.entries:
        return ""
    near = nearest([e for e in cat.entries.values() if e.role != "advice"], line)
    return "; looks like: " + ", ".join(
        f"{e.id} — {e.sources[0] if e.sources else e.file} ({s:.2f})" for e, s in near)
