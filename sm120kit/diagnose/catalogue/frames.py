"""The frame map (``frames/frames.toml``): where a traceback ends -> phase and category."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path

from sm120kit.diagnose.categories import CATEGORIES, FIELD_PHASES
from sm120kit.evidence.logs.frames import Frame

MAP = Path(__file__).resolve().parent / "frames" / "frames.toml"


@dataclass(frozen=True)
class FrameRule:
    globs: tuple[str, ...]
    what: str
    phase: str
    category: str
    functions: tuple[str, ...] = ()  # the frame's function is one of these (empty: any)
    depth: int | None = None  # only this many innermost frames (None: place()'s depth)

    def matches(self, f: Frame) -> bool:
        path = f.file.replace("\\", "/")
        return (not self.functions or f.function in self.functions) and any(
            fnmatchcase(path, g) for g in self.globs)


def _functions(d: dict) -> tuple[str, ...]:
    fn = d.get("function")
    return () if fn is None else (fn,) if isinstance(fn, str) else tuple(fn)


@cache
def _load(path: Path = MAP) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


@cache
def generic_frames(path: Path = MAP) -> tuple[FrameRule, ...]:
    """Frames of generic wrappers (``[[generic]]``): they run under every kind of call (a module's
    ``__call__``, a future's ``result``, a compiled graph's launcher) and never decide."""
    return tuple(FrameRule(tuple(d["globs"]), "a generic wrapper", "startup", "unknown",
                           _functions(d)) for d in _load(path).get("generic") or [])


@cache
def frame_rules(path: Path = MAP) -> tuple[FrameRule, ...]:
    data = _load(path)
    out = []
    for i, d in enumerate(data.get("frame") or []):
        r = FrameRule(tuple(d["globs"]), d["what"], d["phase"], d["category"], _functions(d),
                      d.get("depth"))
        if r.category not in CATEGORIES or r.phase not in FIELD_PHASES:
            raise ValueError(f"{path}: frame {i + 1}: unknown category/phase {r.category}/{r.phase}")
        out.append(r)
    return tuple(out)


def place(frames: list[Frame], depth: int = 6) -> tuple[FrameRule, Frame] | None:
    """The innermost of the ``depth`` innermost frames that a map rule matches, with the first such
    rule (file order): the place nearest the failure decides (a compile inside a capture, a
    collective inside the profiling run). Frames of generic wrappers are passed over (they neither
    decide nor count)."""
    skip = generic_frames()
    inner = [f for f in frames[::-1] if not any(g.matches(f) for g in skip)][:depth]
    for i, f in enumerate(inner):
        for r in frame_rules():
            if i < (r.depth or depth) and r.matches(f):
                return r, f
    return None
