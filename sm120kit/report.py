"""Shared output plumbing: the JSON envelope, rich console and status styles.

Every command builds a result object (a dataclass) and renders it through these helpers to a rich
table, ``--json`` or ``--markdown``. JSON always carries
``{"tool": "sm120kit", "version": ..., "command": ...}`` at the top.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from enum import Enum
from pathlib import Path
from typing import Any

from sm120kit import __version__

STATUSES = ("ok", "warn", "fail", "skip", "error")
STATUS_STYLE = {
    "ok": "green",
    "warn": "yellow",
    "fail": "bold red",
    "skip": "dim",
    "error": "magenta",
    "applied": "green",
    "not-applied": "yellow",
    "upstream": "cyan",
    "conflict": "bold red",
}
# worst first
STATUS_RANK = {"fail": 0, "error": 1, "warn": 2, "skip": 3, "ok": 4}


def to_jsonable(obj: Any) -> Any:
    """Dataclasses, enums, paths, sets and tuples to plain JSON types."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "to_dict"):
        return to_jsonable(obj.to_dict())
    return obj


def envelope(command: str, payload: Any) -> dict[str, Any]:
    body = to_jsonable(payload)
    out: dict[str, Any] = {"tool": "sm120kit", "version": __version__, "command": command}
    if isinstance(body, dict):
        out.update(body)
    else:
        out["result"] = body
    return out


def dump_json(command: str, payload: Any, stream: Any = None, *,
              exit_code: int | None = None) -> None:
    """The one JSON object a ``--json`` command prints; ``exit_code`` is added when the payload
    does not carry it (docs/json.md: every object has it)."""
    stream = stream or sys.stdout
    doc = envelope(command, payload)
    if exit_code is not None and "exit_code" not in doc:
        doc["exit_code"] = int(exit_code)
    json.dump(doc, stream, indent=2, sort_keys=False, default=str)
    stream.write("\n")


def console(stderr: bool = False) -> Any:
    """A rich Console (imported lazily: rich costs ~30 ms to import).

    ``soft_wrap``: a printed line (a command or a path meant to be copied) is never broken by
    rich; the terminal folds it visually and a copy gets it whole. Table cells still fit the
    width: long ones are shortened with :func:`cell`."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


#: the longest text a table cell shows; the rest is elided (``--json`` keeps the whole text)
CELL_MAX = 240


def cell(text: str | None, width: int = CELL_MAX) -> str:
    """``text`` for a table cell: at most ``width`` characters, cut at whitespace with an
    ellipsis (:func:`clip_words`); rich markup is escaped so a ``[`` in a log line stays."""
    from rich.markup import escape

    return escape(clip_words(text or "", width))


def styled(status: str) -> str:
    style = STATUS_STYLE.get(status, "")
    return f"[{style}]{status}[/{style}]" if style else status


def clip_words(text: str, width: int = 320) -> str:
    """Shorten a long evidence line for a terminal or a ticket without cutting a word: keep its
    head and its tail (where vLLM puts the message and the exception puts its reason), joined by
    an ellipsis at whitespace. JSON output keeps the text whole."""
    text = " ".join(text.split()) if "  " in text else text
    if len(text) <= width:
        return text
    half = width // 2
    head = text[:half]
    cut = head.rfind(" ")
    head = head[:cut] if cut > half // 2 else head
    tail = text[-half:]
    cut = tail.find(" ")
    tail = tail[cut + 1:] if 0 <= cut < half // 2 else tail
    return f"{head} … {tail}"
