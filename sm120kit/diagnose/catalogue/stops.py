"""The stop map (``stops/stops.toml``): the startup step a pasted excerpt ends in -> the kind of
cause that waits there."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from sm120kit.diagnose.categories import CATEGORIES
from sm120kit.evidence.phases import PHASE_INDEX

MAP = Path(__file__).resolve().parent / "stops" / "stops.toml"


@dataclass(frozen=True)
class StopRule:
    phase: str
    category: str
    multi_gpu: bool
    why: str
    # lines that report the step finished (its result): an excerpt whose last step line is one
    # of them ends after the step, not in it
    done: tuple[re.Pattern[str], ...] = field(default=())

    def finished(self, line: str) -> bool:
        return any(rx.search(line) for rx in self.done)


@cache
def stop_rules(path: Path = MAP) -> dict[str, StopRule]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    out = {}
    for i, d in enumerate(data.get("stop") or []):
        r = StopRule(d["phase"], d["category"], bool(d.get("multi_gpu", False)), d["why"],
                     tuple(re.compile(x) for x in d.get("done", [])))
        if r.category not in CATEGORIES or r.phase not in PHASE_INDEX:
            raise ValueError(f"{path}: stop {i + 1}: unknown category/phase {r.category}/{r.phase}")
        out[r.phase] = r
    return out
