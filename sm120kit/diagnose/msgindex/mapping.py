"""What an indexed message means: ``catalogue/index_map.toml`` (data) turned into a category.

Order of precedence: a per-template ``override`` (project + file + a literal of the message),
then ``keyword`` rules (words of the message that say the cause whatever module prints it), then
``exception`` types, then module ``path`` globs (first match in file order wins; an entry may be
limited to exception types, levels, function names or a regex on the message's literal text). No match: ``none`` (the template is still
recognised and shown).
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from sm120kit.diagnose.categories import CATEGORIES

MAP_FILE = Path(__file__).resolve().parent.parent / "catalogue" / "index_map.toml"
NONE = "none"


class MappingError(ValueError):
    """index_map.toml names an unknown category or has a malformed entry."""


@dataclass(frozen=True)
class PathRule:
    project: str
    globs: tuple[str, ...]
    category: str
    exc: tuple[str, ...] = ()
    levels: tuple[str, ...] = ()
    functions: tuple[str, ...] = ()
    why: str = ""
    text: re.Pattern[str] | None = None  # only messages whose literal text this finds

    def applies(self, project: str, file: str, function: str, exc: str | None,
                level: str | None, text: str = "") -> bool:
        if self.project not in ("*", project):
            return False
        if not any(fnmatch.fnmatchcase(file, g) for g in self.globs):
            return False
        if self.exc and (exc or "") not in self.exc:
            return False
        if self.levels and (level or "raise") not in self.levels:
            return False
        if self.text is not None and not self.text.search(text):
            return False
        return not self.functions or any(fnmatch.fnmatchcase(function, f) for f in self.functions)


@dataclass
class IndexMap:
    paths: list[PathRule] = field(default_factory=list)
    exceptions: dict[str, str] = field(default_factory=dict)
    keywords: list[tuple[re.Pattern[str], str, tuple[str, ...]]] = field(default_factory=list)
    overrides: list[tuple[str, str, str, str]] = field(default_factory=list)

    def category(self, project: str, file: str, function: str, exc: str | None,
                 level: str | None, text: str) -> str:
        """The category of one template (``text``: its display form, holes as ``{...}``)."""
        return self.decide(project, file, function, exc, level, text)[0]

    def decide(self, project: str, file: str, function: str, exc: str | None,
               level: str | None, text: str) -> tuple[str, str]:
        """(category, what decided it: override | keyword | exception | path | default); a
        ``none`` that a rule gives is a judgment, the default ``none`` is no judgment."""
        for proj, glob, contains, cat in self.overrides:
            if proj in ("*", project) and fnmatch.fnmatchcase(file, glob) and contains in text:
                return cat, "override"
        for rx, cat, projects in self.keywords:
            if (not projects or project in projects) and rx.search(text):
                return cat, "keyword"
        if exc and exc in self.exceptions:
            return self.exceptions[exc], "exception"
        for r in self.paths:
            if r.applies(project, file, function, exc, level, text):
                return r.category, "path"
        return NONE, "default"


def _cat(v: object, where: str) -> str:
    if not isinstance(v, str) or (v not in CATEGORIES and v != NONE):
        raise MappingError(f"{where}: unknown category {v!r}")
    return v


def _strs(v: object) -> tuple[str, ...]:
    if v is None:
        return ()
    if isinstance(v, str):
        return (v,)
    if isinstance(v, list | tuple):
        return tuple(str(x) for x in v)
    raise MappingError(f"expected a string or a list of strings, got {v!r}")


def _rx(v: object, where: str) -> re.Pattern[str] | None:
    if v is None:
        return None
    try:
        return re.compile(str(v))
    except re.error as exc:
        raise MappingError(f"{where}: text: {exc}") from exc


def load_map(path: Path = MAP_FILE) -> IndexMap:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    m = IndexMap()
    for i, e in enumerate(data.get("path", [])):
        m.paths.append(PathRule(project=str(e.get("project", "*")), globs=_strs(e["glob"]),
                                category=_cat(e.get("category"), f"path #{i + 1}"),
                                exc=_strs(e.get("exc")), levels=_strs(e.get("level")),
                                functions=_strs(e.get("function")), why=str(e.get("why", "")),
                                text=_rx(e.get("text"), f"path #{i + 1}")))
    for i, e in enumerate(data.get("exception", [])):
        for t in _strs(e["type"]):
            m.exceptions[t] = _cat(e.get("category"), f"exception #{i + 1}")
    for i, e in enumerate(data.get("keyword", [])):
        try:
            rx = re.compile(e["regex"])
        except (re.error, KeyError) as exc:
            raise MappingError(f"keyword #{i + 1}: {exc}") from exc
        m.keywords.append((rx, _cat(e.get("category"), f"keyword #{i + 1}"),
                           _strs(e.get("project"))))
    for i, e in enumerate(data.get("override", [])):
        m.overrides.append((str(e.get("project", "*")), str(e.get("file", "*")),
                            str(e["contains"]), _cat(e.get("category"), f"override #{i + 1}")))
    return m
