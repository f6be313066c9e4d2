"""Message templates of Rust sources (TGI's launcher, router and backends), read as text, never
built: the format string of ``tracing::error!`` / ``tracing::warn!`` (and the bare ``error!`` /
``warn!`` a module imports), ``panic!`` and thiserror's ``#[error("...")]`` attribute.

A format string's ``{}`` / ``{0}`` / ``{name:?}`` become ``any`` holes, ``{{`` / ``}}`` the braces
themselves. A macro whose first argument is not a string literal (``error!("{}", err)`` is kept,
``error!(err)`` has none) gives no template.
"""

from __future__ import annotations

import bisect
import re
from pathlib import Path

from msgindex_common import RawTemplate

RS_EXTRACTOR = "rs-2"  # in the extraction cache's key of a .rs file: bump when the output changes

# tracing's macros at warning and above, panic!, and thiserror's attribute
_MACRO = re.compile(r"(?<![\w:])(?:tracing::)?(?P<m>error|warn|panic)!\s*\(|#\[error\(")
_FN = re.compile(r"\bfn\s+(\w+)")
_TYPE = re.compile(r"\b(?:enum|struct)\s+(\w+)")
_FMT = re.compile(r"\{\{|\}\}|\{[^{}]*\}")


def _string_at(src: str, i: int) -> tuple[str, int] | None:
    """The Rust string literal starting at ``src[i]`` (``"..."``, ``r"..."``, ``r#"..."#``):
    its value and the index after it."""
    if src.startswith("r", i):
        m = re.match(r'r(#*)"', src[i:])
        if not m:
            return None
        close = '"' + m.group(1)
        start = i + m.end()
        end = src.find(close, start)
        return (src[start:end], end + len(close)) if end >= 0 else None
    if src[i] != '"':
        return None
    out: list[str] = []
    j = i + 1
    while j < len(src):
        c = src[j]
        if c == '"':
            return "".join(out), j + 1
        if c == "\\" and j + 1 < len(src):
            n = src[j + 1]
            if n == "\n":  # a line continuation: the newline and the next line's indent go
                j += 2
                while j < len(src) and src[j] in " \t":
                    j += 1
                continue
            out.append({"n": "\n", "t": "\t", "r": "", "0": "", '"': '"', "\\": "\\",
                        "'": "'"}.get(n, n))
            j += 2
            continue
        out.append(c)
        j += 1
    return None


def _first_literal(src: str, i: int) -> str | None:
    """The first string literal among a macro's arguments (``src[i]`` is just after its ``(``),
    skipping ``key = value`` fields; None when the format is not a literal."""
    depth = 0
    j = i
    while j < len(src):
        c = src[j]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                return None
            depth -= 1
        elif (c == '"' or (c == "r" and re.match(r'r#*"', src[j:j + 4]) and
                           (j == 0 or not (src[j - 1].isalnum() or src[j - 1] == "_")))):
            got = _string_at(src, j)
            if got is None:
                return None
            before = src[i:j].rstrip()
            # a ``key = "value"`` field or tracing's ``target: "..."`` is no format string
            if depth == 0 and not before.endswith(("=", ":")):
                return got[0]
            j = got[1]
            continue
        elif c == "/" and src.startswith("//", j):
            j = src.find("\n", j)
            if j < 0:
                return None
        j += 1
    return None


def format_parts(fmt: str) -> tuple[tuple[str, str], ...]:
    """A Rust format string as literal runs and ``any`` holes."""
    parts: list[tuple[str, str]] = []
    pos = 0
    for m in _FMT.finditer(fmt):
        parts.append(("lit", fmt[pos:m.start()]))
        tok = m.group(0)
        parts.append(("lit", tok[0]) if tok in ("{{", "}}") else ("hole", "any"))
        pos = m.end()
    parts.append(("lit", fmt[pos:]))
    out: list[tuple[str, str]] = []
    for k, v in parts:
        if k == "lit" and out and out[-1][0] == "lit":
            out[-1] = ("lit", out[-1][1] + v)
        elif (k, v) != ("lit", ""):
            out.append((k, v))
    return tuple(out)


def _quoted_spans(src: str) -> list[tuple[int, int]]:
    """(start, end) of every string literal and comment: a macro name inside one is text."""
    spans: list[tuple[int, int]] = []
    i = 0
    n = len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            e = src.find("\n", i)
            e = n if e < 0 else e
        elif src.startswith("/*", i):
            e = src.find("*/", i + 2)
            e = n if e < 0 else e + 2
        elif c == '"' or (c == "r" and re.match(r'r#*"', src[i:i + 8]) and
                          (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_"))):
            got = _string_at(src, i)
            e = n if got is None else got[1]
        elif c == "'" and re.match(r"'(?:\\.|[^\\'])'", src[i:i + 4]):
            e = src.index("'", i + 2) + 1
        else:
            i += 1
            continue
        spans.append((i, e))
        i = e
    return spans


def extract_rust(text: str, rel: str, project: str, version: str) -> list[RawTemplate]:
    out: list[RawTemplate] = []
    spans = _quoted_spans(text)
    starts = [a for a, _ in spans]
    for m in _MACRO.finditer(text):
        k = bisect.bisect_right(starts, m.start()) - 1
        if k >= 0 and spans[k][0] <= m.start() < spans[k][1]:
            continue
        fmt = _first_literal(text, m.end())
        if fmt is None or not fmt.strip():
            continue
        line = text.count("\n", 0, m.start()) + 1
        head = text[:m.start()]
        fns = _FN.findall(head)
        if fns and fns[-1].startswith("test"):  # a unit test's own panic!
            continue
        macro = m.group("m")
        if macro is None:  # #[error("...")] on a variant of the enum above it
            types = _TYPE.findall(head)
            out.append(RawTemplate(project, version, rel, line, types[-1] if types else "",
                                   "raise", types[-1] if types else "error", None,
                                   format_parts(fmt)))
        elif macro == "panic":
            out.append(RawTemplate(project, version, rel, line, fns[-1] if fns else "", "raise",
                                   "panic", None, format_parts(fmt)))
        else:
            out.append(RawTemplate(project, version, rel, line, fns[-1] if fns else "", "log",
                                   None, "error" if macro == "error" else "warning",
                                   format_parts(fmt)))
    return out


def extract_rust_file(path: Path, rel: str, project: str, version: str) -> list[RawTemplate]:
    return extract_rust(path.read_text(encoding="utf-8", errors="replace"), rel, project, version)
