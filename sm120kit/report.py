"""Shared output plumbing: the JSON envelope, rich console and status styles.

Every command builds a result object (a dataclass) and renders it through these helpers to a rich
table, ``--json`` or ``--markdown``. JSON always carries
``{"tool": "sm120kit", "version": ..., "command": ...}`` at the top.
"""

from __future__ import annotations

import dataclasses
import json
import re
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

    stream = sys.stderr if stderr else sys.stdout
    if _is_terminal(stream) or os.environ.get("FORCE_COLOR") or os.environ.get("TTY_COMPATIBLE"):
        from rich.console import Console

        return Console(stderr=stderr, highlight=False, soft_wrap=True, emoji=False)
    return PlainOutput(stderr=stderr, width=columns())


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
                if isinstance(obj, Table | LiteTable):
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


class PlainOutput:
    """The console for output that is not a terminal, without importing rich (~40 ms) for what
    it prints itself: plain strings and :class:`LiteTable` rows, whose markup is at most one
    ``[style]text[/style]`` span (:func:`_lite_plain`). Anything else (a rich renderable, other
    markup, a control character) goes, the whole call, to the rich-based plain
    console (:func:`_plain_console_class`), which prints it the same way; so does any other
    attribute."""

    def __init__(self, stderr: bool, width: int):
        self.stderr = stderr
        self._width = width
        self._file: Any = None
        self._rich: Any = None

    @property
    def width(self) -> int:
        return self._width

    @width.setter
    def width(self, value: int) -> None:
        self._width = value
        if self._rich is not None:
            self._rich.width = value

    @property
    def file(self) -> Any:
        return self._file or (sys.stderr if self.stderr else sys.stdout)

    @file.setter
    def file(self, value: Any) -> None:
        self._file = value
        if self._rich is not None:
            self._rich.file = value

    def _rich_console(self) -> Any:
        if self._rich is None:
            self._rich = _plain_console_class()(stderr=self.stderr, highlight=False, soft_wrap=True,
                                                emoji=False,
                                                width=self._width, color_system=None,
                                                file=self._file)
        return self._rich

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rich_console(), name)

    def print(self, *objects: Any, **kw: Any) -> None:
        lines = self._lines(objects)
        if lines is None:
            self._rich_console().print(*objects, **kw)
            return
        self.file.write("".join(ln + "\n" for ln in lines))

    def _lines(self, objects: tuple[Any, ...]) -> list[str] | None:
        """The lines the rich-based plain console would print, or None: leave it to that one."""
        if not objects:
            return None
        lines: list[str] = []
        for obj in objects:
            if isinstance(obj, LiteTable):
                texts = [c for col in obj.columns for c in (col.header, *col._cells)]
                if obj.title is not None:
                    texts.append(obj.title)
                if any(not isinstance(t, str) or _lite_plain(t) is None for t in texts):
                    return None
                lines += table_lines(obj, self.width)
            elif isinstance(obj, str):
                text = _lite_plain(obj)
                if text is None:
                    return None
                lines += [w for ln in text.split("\n")
                          for w in wrap_line(ln, self.width, _lead(ln) + "  ")]
            else:
                return None
        return lines if all(ln.isprintable() for ln in lines) else None


_LITE_SPAN = re.compile(r"\[([a-z][a-z ]*)\]([^\[\]]*)\[/\1\]")


def _lite_plain(text: str) -> str | None:
    """``text`` without its markup when that is plain text or one ``[style]span[/style]`` (what
    :func:`styled` makes) and holds nothing rich would change (a control
    character); else None (rich decides)."""
    if "[" in text:
        m = _LITE_SPAN.fullmatch(text)
        if m is None:
            return None
        text = m.group(2)
    if "]" in text or not text.replace("\n", "").isprintable():
        return None
    return text


@dataclasses.dataclass
class _LiteColumn:
    header: str
    options: dict[str, Any]
    _cells: list[Any] = dataclasses.field(default_factory=list)


class LiteTable:
    """The part of a rich ``Table`` the commands use (title, columns, rows), built without
    importing rich: printed as plain records where output is not a terminal
    (:func:`table_lines`), drawn as a rich Table on one (``__rich__``)."""

    def __init__(self, title: str | None = None, title_justify: str = "left"):
        self.title = title
        self.title_justify = title_justify
        self.show_header = True
        self.columns: list[_LiteColumn] = []

    def add_column(self, header: str = "", **options: Any) -> None:
        self.columns.append(_LiteColumn(header, options))

    def add_row(self, *cells: Any) -> None:
        while len(self.columns) < len(cells):
            self.columns.append(_LiteColumn("", {}, [""] * self.row_count))
        for i, col in enumerate(self.columns):
            col._cells.append(cells[i] if i < len(cells) and cells[i] is not None else "")

    @property
    def row_count(self) -> int:
        return len(self.columns[0]._cells) if self.columns else 0

    def __rich__(self) -> Any:
        from rich.table import Table

        t = Table(title=self.title, title_justify=self.title_justify)  # type: ignore[arg-type]
        for col in self.columns:
            t.add_column(col.header, **col.options)
        for r in range(self.row_count):
            t.add_row(*(col._cells[r] for col in self.columns))
        return t


def _lead(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def plain_text(obj: Any) -> str:
    """A renderable cell or line as plain text: markup and styles dropped."""
    if isinstance(obj, str):
        lite = _lite_plain(obj)
        if lite is not None:
            return lite
    from rich.text import Text

    if isinstance(obj, Text):
        return obj.plain
    if isinstance(obj, str):
        try:
            return Text.from_markup(obj, emoji=False).plain
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
