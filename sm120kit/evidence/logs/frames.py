"""The frames of each traceback a process prints, as typed facts (file, line, function).

Python's ``File "path", line N, in func`` lines (IPython's ``File path:N, in Class.func(...)``)
follow ``Traceback (most recent call last):``;
the innermost frame is the last one before the exception line. Per process the first
``MAX_TB`` tracebacks are kept (the first is the root: a chained traceback prints the
innermost cause first), each with its last ``MAX_FRAMES`` frames.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sm120kit.evidence.logs.records import Evidence

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>[\w<>.]+)')
# IPython / Jupyter: ``File ~/env/lib/python3.9/site-packages/vllm/engine/llm_engine.py:292, in
# LLMEngine.from_engine_args(cls, engine_args)`` (the function qualified by its class)
_IPY_FRAME = re.compile(r'^File (?P<file>\S+\.py):(?P<line>\d+), in (?:[\w<>]+\.)*(?P<func>[\w<>]+)\(')
MAX_TB = 4
MAX_FRAMES = 24


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str
    ev: Evidence


@dataclass
class Traceback:
    proc: str  # the process key (procs.py)
    frames: list[Frame] = field(default_factory=list)  # outermost first, innermost last


class Tracebacks:
    def __init__(self) -> None:
        self.by_proc: dict[str, list[Traceback]] = {}
        self.order: list[Traceback] = []  # every kept traceback, in input order
        self._full: set[str] = set()  # processes past MAX_TB: later frames are not kept

    def feed(self, proc: str, msg: str, ev: Evidence) -> None:
        if "Traceback (most recent call last)" in msg:
            tbs = self.by_proc.setdefault(proc, [])
            if len(tbs) < MAX_TB:
                tb = Traceback(proc)
                tbs.append(tb)
                self.order.append(tb)
            else:
                self._full.add(proc)
            return
        if 'File "' in msg:
            m = _FRAME.search(msg)
        elif msg.startswith("File ") and ".py:" in msg:
            m = _IPY_FRAME.match(msg)
        else:
            return
        open_tbs = self.by_proc.get(proc)
        if m is None or proc in self._full:
            return
        if not open_tbs:
            # an excerpt that starts inside a traceback (its header cut off): the frames still
            # say where the process was
            open_tbs = self.by_proc.setdefault(proc, [Traceback(proc)])
            self.order.append(open_tbs[0])
        fr = open_tbs[-1].frames
        fr.append(Frame(m["file"], int(m["line"]), m["func"], ev))
        if len(fr) > MAX_FRAMES:
            del fr[0]

    def first(self) -> Traceback | None:
        """The input's first traceback that has frames."""
        return next((t for t in self.order if t.frames), None)
