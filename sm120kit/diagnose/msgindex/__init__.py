"""The message index: what vLLM, torch.distributed, NCCL, CUDA, FlashInfer, Ray, SGLang, TGI and
the weight loaders (transformers, safetensors, huggingface_hub) can print, generated from their release sources by
``scripts/build_message_index.py`` and shipped as ``index.sqlite`` beside this file.

One row per message template: project, file:line, function, exception type or log level, the
message with typed holes, its regex, the releases it exists in (``since``/``until``) and its
category (``catalogue/index_map.toml``). Matching costs O(words of the line), not O(templates):
each template is filed under its rarest anchor word (>= 4 letters, from its literal text); a
line's words are looked up in one query, and only the templates filed under them have their
regex compiled (lazily, once) and searched.

    idx = load()            # None when the data file is missing (reported, never raised)
    idx.match(line)         # [Match], most specific first
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

SHIPPED = Path(__file__).resolve().parent / "index.sqlite"
FORMAT = 2
# a template with fewer literal characters than this says too little to be matched
MIN_LITERAL = 12
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]{3,}")
_NAMES = {"vllm": "vLLM", "torch": "torch", "flashinfer": "FlashInfer", "ray": "Ray",
          "sglang": "SGLang", "transformers": "transformers", "safetensors": "safetensors",
          "nccl": "NCCL", "cuda": "CUDA", "hami": "HAMi-core", "tgi": "TGI",
          "huggingface_hub": "huggingface_hub"}
_VERB = {"raise": "raised by", "check": "raised by", "log": "logged by", "warn-macro": "logged by",
         "print": "printed by", "error-string": "error string of", "binary-string": "string of"}


def version_key(v: str) -> tuple[int, ...]:
    """``0.6.1.post2`` -> (0, 6, 1, 2): release order within one project."""
    return tuple(int(x) for x in re.findall(r"\d+", v)[:6])


@dataclass(frozen=True)
class Template:
    id: int
    project: str
    file: str
    line: int
    function: str
    kind: str
    exc: str | None
    level: str | None
    text: str        # the message, holes as {int}, {...}
    regex: str
    since: str
    until: str
    releases: int    # how many indexed releases hold it
    category: str    # a category of sm120kit.diagnose.categories, or "none"
    litlen: int      # literal characters (how specific it is)
    words: str       # its anchor words (lower case, space-separated): all are in a matching line

    @property
    def is_error(self) -> bool:
        """A raise/check, or a log call at error level and above (warnings are context)."""
        if self.kind in ("raise", "check", "error-string"):
            return True
        if self.project == "nccl" and self.kind == "warn-macro":
            return True  # NCCL reports its errors through WARN
        return (self.level or "") in ("error", "critical", "fatal")

    def range_text(self) -> str:
        name = _NAMES.get(self.project, self.project)
        if self.since == self.until:
            return f"{name} {self.since}"
        return f"{name} {self.since}\u2013{self.until}"

    def source(self) -> str:
        """``raised by vllm/config/parallel.py:123 (ValueError), vLLM 0.30.0–0.34.0``."""
        what = self.exc if self.kind in ("raise", "check") else (self.level or self.exc or "")
        where = f"{self.file}:{self.line}" if self.line else self.file
        fn = f" in {self.function}" if self.function else ""
        return (f"{_VERB.get(self.kind, 'from')} {where}{fn}"
                f"{f' ({what})' if what else ''}, {self.range_text()}")

    def in_range(self, version: str) -> bool | None:
        """Whether ``version`` (of this project) lies in since..until; None when unparsable."""
        try:
            k = version_key(version)
        except ValueError:
            return None
        if not k:
            return None
        return version_key(self.since) <= k <= version_key(self.until)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "project": self.project, "file": self.file, "line": self.line,
                "function": self.function, "kind": self.kind, "exc": self.exc,
                "level": self.level, "template": self.text, "since": self.since,
                "until": self.until, "releases": self.releases, "category": self.category,
                "source": self.source()}


@dataclass(frozen=True)
class Match:
    template: Template
    line: str
    coverage: float  # share of the line's characters the template's literal text accounts for

    def to_dict(self) -> dict[str, Any]:
        return dict(self.template.to_dict(), coverage=round(self.coverage, 2))


class MessageIndex:
    """A read-only view of one index file (sqlite, opened immutable: no locks, no journal)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True,
                                  check_same_thread=False)
        self._rx: dict[int, re.Pattern[str] | None] = {}
        self._tpl: dict[int, Template] = {}
        self._words: dict[int, frozenset[str]] = {}  # a template's anchor words, by id
        self._meta: dict[str, Any] | None = None

    @property
    def meta(self) -> dict[str, Any]:
        if self._meta is None:
            self._meta = {k: json.loads(v) for k, v in self.db.execute("SELECT key, value FROM meta")}
        return self._meta

    def meta_value(self, key: str) -> Any:
        """One metadata value, without reading the rest (the input list is long)."""
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def _templates(self, ids: list[int]) -> list[Template]:
        missing = [i for i in ids if i not in self._tpl]
        for chunk in range(0, len(missing), 500):
            part = missing[chunk:chunk + 500]
            q = f"SELECT * FROM templates WHERE id IN ({','.join('?' * len(part))})"
            for row in self.db.execute(q, part):
                self._tpl[row[0]] = Template(*row)
        return [self._tpl[i] for i in ids if i in self._tpl]

    def _eligible(self, ids: list[int], words: set[str]) -> list[int]:
        """The ids whose anchor words are all words of the line, read from the ``words``
        column alone: only those become Template rows (a line's common words file hundreds)."""
        missing = list({i for i in ids if i not in self._words})
        for chunk in range(0, len(missing), 500):
            part = missing[chunk:chunk + 500]
            q = f"SELECT id, words FROM templates WHERE id IN ({','.join('?' * len(part))})"
            for i, w in self.db.execute(q, part):
                self._words[i] = frozenset(w.split())
        return [i for i in ids if i in self._words and self._words[i] <= words]

    def _regex(self, t: Template) -> re.Pattern[str] | None:
        if t.id not in self._rx:
            try:
                self._rx[t.id] = re.compile(t.regex)
            except re.error:
                self._rx[t.id] = None
        return self._rx[t.id]

    def candidates(self, line: str, found: set[str] | None = None) -> list[int]:
        words = list(found if found is not None else {w.lower() for w in _WORD.findall(line)})
        if not words:
            return []
        ids: list[int] = []
        for chunk in range(0, len(words), 400):
            part = words[chunk:chunk + 400]
            q = f"SELECT ids FROM words WHERE word IN ({','.join('?' * len(part))})"
            for (s,) in self.db.execute(q, part):
                ids += [int(x) for x in s.split(",")]
        return ids

    def match(self, line: str, limit: int = 5) -> list[Match]:
        """The templates whose regex finds ``line``'s message, most specific first (literal
        length, then the newest release), one per (message, category). A template is tried only
        when every anchor word of it is a word of the line."""
        line = line.rstrip("\r\n")
        words = {w.lower() for w in _WORD.findall(line)}
        out: list[Match] = []
        for t in self._templates(self._eligible(self.candidates(line, words), words)):
            rx = self._regex(t)
            if rx is not None and rx.search(line):
                out.append(Match(t, line, min(1.0, t.litlen / max(1, len(line.strip())))))
        out.sort(key=lambda m: (-m.template.litlen, [-x for x in version_key(m.template.until)],
                                m.template.project, m.template.file))
        seen: set[tuple[str, str]] = set()
        best: list[Match] = []
        for m in out:
            k = (m.template.text, m.template.category)
            if k not in seen:
                seen.add(k)
                best.append(m)
        return best[:limit]


class IndexMissing(RuntimeError):
    """The index data file is absent or unreadable."""


@lru_cache(maxsize=4)
def load(path: Path | None = None) -> MessageIndex:
    """The shipped index (cached per process); raises ``IndexMissing`` when it cannot be read."""
    p = path or SHIPPED
    if not p.is_file():
        raise IndexMissing(f"{p}: no message index (run scripts/build_message_index.py)")
    try:
        idx = MessageIndex(p)
        fmt = idx.meta_value("format")
        if fmt != FORMAT:
            raise IndexMissing(f"{p}: index format {fmt} != {FORMAT} (regenerate it)")
    except sqlite3.DatabaseError as exc:
        raise IndexMissing(f"{p}: unreadable message index: {exc}") from exc
    return idx


def try_load(path: Path | None = None) -> MessageIndex | None:
    try:
        return load(path)
    except IndexMissing:
        return None
