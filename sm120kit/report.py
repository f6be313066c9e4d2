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
    """The console every command prints its result to (rich is imported lazily: ~30 ms).

    On a terminal: a rich Console, tables drawn as boxes. Anywhere else (a pipe, a file, a CI
    log, a ticket): a :class:`PlainConsole` of ``$COLUMNS`` (default 100) columns that prints
    tables as plain records and never breaks a command (see :func:`plain_lines`).
    ``soft_wrap``: a printed line is never broken by rich; a terminal folds it visually and a
    copy gets it whole. Table cells still fit the width: long ones are shortened with
    :func:`cell`."""
    import os

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if _is_terminal(stream) or os.environ.get("FORCE_COLOR") or os.environ.get("TTY_COMPATIBLE"):
        return Console(stderr=stderr, highlight=False, soft_wrap=True)
    return _plain_console_class()(stderr=stderr, highlight=False, soft_wrap=True,
                                  width=columns(), color_system=None)


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def columns() -> int:
    """``$COLUMNS`` when it is a number of at least 40, else 100: the width of plain output."""
    import os

    raw = os.environ.get("COLUMNS", "")
    return int(raw) if raw.isdigit() and int(raw) >= 40 else 100


def _plain_console_class() -> type:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    class PlainConsole(Console):
        """A console for output that is not a terminal: a table becomes plain records
        (:func:`table_lines`), text is wrapped at the width without breaking a command."""

        def print(self, *objects: Any, **kw: Any) -> None:
            lines: list[str] = []
            for obj in objects:
                if isinstance(obj, Table):
                    lines += table_lines(obj, self.width)
                elif isinstance(obj, str | Text):
                    text = plain_text(obj)
                    lines += [w for ln in text.split("\n")
                              for w in wrap_line(ln, self.width, _lead(ln) + "  ")]
                else:
                    if lines:
                        self._out(lines)
                        lines = []
                    super().print(obj, **kw)
            if lines or not objects:
                self._out(lines)

        def _out(self, lines: list[str]) -> None:
            for ln in lines:
                super().print(Text(ln), soft_wrap=True, crop=False, overflow="ignore")

    return PlainConsole


def _lead(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def plain_text(obj: Any) -> str:
    """A renderable cell or line as plain text: markup and styles dropped."""
    from rich.text import Text

    if isinstance(obj, Text):
        return obj.plain
    if isinstance(obj, str):
        try:
            return Text.from_markup(obj).plain
        except Exception:  # not markup after all (an unbalanced '[' in a log line)
            return obj
    return str(obj)


#: words that open a shell command: a printed line that starts with one is never wrapped
COMMAND_WORDS = ("sm120kit ", "vllm ", "pip ", "python ", "python3 ", "git ", "echo ", "export ",
                 "sudo ", "docker ", "bash ", "cd ", "$ ", "uv ", "ray ", "nvidia-smi", "modprobe ",
                 "sysctl ", "ulimit ", "curl ", "NCCL_", "VLLM_", "FLASHINFER_", "CUDA_")


#: a word that opens a shell command inside a sentence: the words after it, up to the end of
#: the clause, are one piece a wrap never breaks
_CMD_OPENERS = frozenset({"sm120kit", "vllm", "pip", "python", "python3", "git", "echo",
                          "export", "sudo", "docker", "modprobe", "sysctl", "ulimit", "curl",
                          "nvidia-smi", "ray", "uv", "bash", "torchrun"})


def _tokens(text: str) -> list[str]:
    """``text`` split at spaces into pieces a wrap may not break: a `backtick` or quoted span
    stays whole, a shell command in a sentence (:data:`_CMD_OPENERS` up to the end of its
    clause: ``,`` ``;`` ``)`` or a ``(``), an option with its value (``--ulimit memlock=-1``)
    and a redirection or pipe with its target (``> /etc/x``)."""
    import re

    raw = re.findall(r"`[^`]*`\S*|'[^'\s][^']*'\S*|\"[^\"\s][^\"]*\"\S*|\S+", text)
    out: list[str] = []
    glue = in_cmd = False
    for tok in raw:
        if in_cmd and tok.startswith("("):
            in_cmd = False
        if out and (glue or in_cmd or tok[0] in "'\"" or tok in (">", ">>", "|", "&&", "2>&1")):
            out[-1] += " " + tok
        else:
            out.append(tok)
            in_cmd = tok in _CMD_OPENERS
        if in_cmd and tok[-1] in ",;.:)":
            in_cmd = False
        glue = (tok.startswith("-") and len(tok) > 1 and "=" not in tok and tok != "--"
                and not tok.startswith("--no-")) or tok in (">", ">>", "|", "&&")
    return out


def wrap_line(line: str, width: int, indent: str = "", keep: int = 0) -> list[str]:
    """``line`` in lines of at most ``width`` columns, broken at spaces only between pieces of
    :func:`_tokens` (a command is never split); its first ``keep`` characters (padded columns)
    stay as they are, continuation lines start with ``indent``. A line that is a command
    (:data:`COMMAND_WORDS`), a label with one piece (``bundle: PATH``) and a piece longer than
    the width stay whole on a line of their own."""
    if len(line) <= width or line.lstrip().startswith(COMMAND_WORDS):
        return [line]
    keep = keep or len(line) - len(line.lstrip())
    toks = _tokens(line[keep:])
    if len(toks) <= 2 and not keep:  # "bundle: /a/long/path": a label and what to copy
        return [line]
    out: list[str] = []
    cur = line[:keep]
    fresh = True
    for tok in toks:
        if not fresh and len(cur) + 1 + len(tok) > width:
            out.append(cur)
            cur, fresh = indent or line[:keep], True
            if len(cur) + len(tok) > width:  # a command wider than the column: its own line
                cur = cur[:min(len(cur), 4)]
        cur = cur + tok if fresh else f"{cur} {tok}"
        fresh = False
    if not fresh:
        out.append(cur)
    return out


def table_lines(table: Any, width: int) -> list[str]:
    """A rich Table as plain records, one row a record: the narrow columns on one line, padded,
    then the wide columns (prose, paths, commands) wrapped below it, indented, each labelled
    with its header when there are several; a cell's extra lines (a ``fix:``) each start a
    line of their own. No box, nothing wider than ``width`` but a whole command."""
    cols = table.columns
    cells = [[plain_text(c).rstrip() for c in col._cells] for col in cols]
    heads = [plain_text(col.header) for col in cols]
    nrows = max((len(c) for c in cells), default=0)
    widths = [max([len(heads[i])] + [len(v.split("\n")[0]) for v in cells[i]]) for i in range(len(cols))]
    narrow: list[int] = []
    used = 0
    for i, w in enumerate(widths):
        if w <= 40 and used + w + 2 <= width and not any("\n" in v for v in cells[i]):
            narrow.append(i)
            used += w + 2
    wide = [i for i in range(len(cols)) if i not in narrow]
    out: list[str] = []
    if table.title:
        out += wrap_line(plain_text(table.title), width, "  ")
    if table.show_header and any(heads):
        line = "  ".join(heads[i].ljust(widths[i]) for i in narrow)
        more = "  " + " / ".join(heads[i] for i in wide) if wide and narrow else ""
        out.append((line + more).rstrip() if len(line + more) <= width else line.rstrip())
    for r in range(nrows):
        out += _record(cells, heads, widths, narrow, wide, r, width)
    return out


def _record(cells: list[list[str]], heads: list[str], widths: list[int], narrow: list[int],
            wide: list[int], r: int, width: int) -> list[str]:
    def at(i: int) -> str:
        return cells[i][r] if r < len(cells[i]) else ""

    head = "  ".join(at(i).ljust(widths[i]) for i in narrow).rstrip()
    prefix = sum(widths[i] + 2 for i in narrow)
    texts = [(heads[i], at(i)) for i in wide if at(i).strip()]
    if not texts:
        return [head] if head else []
    inline = len(texts) == 1 and narrow and prefix <= width * 0.6
    indent = " " * (prefix if inline else 4)
    out: list[str] = []
    for label, text in texts:
        parts = text.split("\n")
        labelled = len(texts) > 1 or not inline  # below the row: say which column it is
        sub = indent + " " * (len(label) + 2) if labelled and len(label) < 24 else indent
        if labelled:
            parts[0] = f"{label}: {parts[0]}"
        for k, part in enumerate(parts):
            if inline and k == 0 and not out:
                lead = "".join(at(i).ljust(widths[i] + 2) for i in narrow)
                out += wrap_line(lead + part, width, indent, keep=len(lead))
            else:
                out += wrap_line((indent if k == 0 else sub) + part, width, sub)
    if not inline:
        out.insert(0, head) if head else None
    return out


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
