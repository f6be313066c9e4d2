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
    function: str | None = None
    depth: int | None = None  # only this many innermost frames (None: place()'s depth)

    def matches(self, f: Frame) -> bool:
        path = f.file.replace("\\", "/")
        return (self.function is None or f.function == self.function) and any(
            fnmatchcase(path, g) for g in self.globs)


@cache
def frame_rules(path: Path = MAP) -> tuple[FrameRule, ...]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    out = []
    for i, d in enumerate(data.get("frame") or []):
        r = FrameRule(tuple(d["globs"]), d["what"], d["phase"], d["category"], d.get("function"),
                      d.get("depth"))
        if r.category not in CATEGORIES or r.phase not in FIELD_PHASES:
            raise ValueError(f"{path}: frame {i + 1}: unknown category/phase {r.category}/{r.phase}")
        out.append(r)
    return tuple(out)


def place(frames: list[Frame], depth: int = 6) -> tuple[FrameRule, Frame] | None:
    """The first map rule (file order) that one of the ``depth`` innermost frames matches."""
    inner = frames[::-1][:depth]
    for r in frame_rules():
        for f in inner[:r.depth or depth]:
            if r.matches(f):
                return r, f
    return None
