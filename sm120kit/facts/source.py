"""Facts from source text of installed packages, read with ``ast`` (never imported).

To stay fast on FlashInfer's 230 KB ``mla/_core.py``, a top-level function is located with a
regex and only its own source segment is parsed; the whole file is parsed only as a fallback.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

MAX_BYTES = 8 * 1024 * 1024


def read_text(path: Path, limit: int = MAX_BYTES) -> str | None:
    """The file's text (utf-8, errors replaced), or ``None`` when missing/unreadable/too big."""
    try:
        p = Path(path)
        if p.stat().st_size > limit:
            return None
        return p.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _segment(src: str, start: int) -> str:
    """From ``start`` to the next top-level statement (a line starting with a non-blank char)."""
    nxt = re.compile(r"^(?:def |class |@|[A-Za-z_]\w*\s*[:=(]|if |try:|from |import )", re.M)
    first_nl = src.find("\n", start)
    if first_nl < 0:
        return src[start:]
    # skip the signature: continuation lines of the def start with spaces or ')'
    m = nxt.search(src, first_nl + 1)
    return src[start : m.start()] if m else src[start:]


def function_params(src: str, name: str) -> list[str] | None:
    """Parameter names of the top-level ``def name(...)`` in ``src``; ``None`` if absent."""
    m = re.search(rf"^(?:async\s+)?def {re.escape(name)}\s*\(", src, re.M)
    if not m:
        return None
    node: ast.AST | None = None
    try:
        mod = ast.parse(_segment(src, m.start()))
        node = next((n for n in mod.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)),
                    None)
    except SyntaxError:
        node = None
    if node is None:
        try:
            full = ast.parse(src)
        except SyntaxError:
            return None
        node = next((n for n in full.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                     and n.name == name), None)
        if node is None:
            return None
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    a = node.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    if a.vararg:
        names.append("*" + a.vararg.arg)
    if a.kwarg:
        names.append("**" + a.kwarg.arg)
    return names


def _literal(node: ast.AST) -> Any:
    """``ast.literal_eval`` plus ``frozenset({...})`` / ``set(...)`` / ``tuple(...)`` calls."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in ("frozenset", "set", "tuple") and len(node.args) <= 1
            and not node.keywords):
        inner = _literal(node.args[0]) if node.args else ()
        return {"frozenset": frozenset, "set": set, "tuple": tuple}[node.func.id](inner)
    return ast.literal_eval(node)


_MISSING = object()


def module_assignment(src: str, name: str) -> Any:
    """The literal value of a top-level ``name = <literal>`` (or annotated); raises KeyError if
    absent, ValueError if not a literal (e.g. an instance of a class)."""
    m = re.search(rf"^{re.escape(name)}\s*(?::[^=\n]+)?=", src, re.M)
    if not m:
        raise KeyError(name)
    seg = _segment(src, m.start())
    try:
        mod = ast.parse(seg)
    except SyntaxError:
        mod = ast.parse(src)
    for n in mod.body:
        value: ast.AST | None = None
        if isinstance(n, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in n.targets):
            value = n.value
        elif (isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
              and n.target.id == name):
            value = n.value
        if value is not None:
            try:
                return _literal(value)
            except (ValueError, TypeError, SyntaxError) as exc:
                raise ValueError(f"{name} is not a literal: {ast.dump(value)[:80]}") from exc
    raise KeyError(name)


def class_attributes(src: str, class_name: str) -> dict[str, Any] | None:
    """Literal class-level attributes of ``class class_name`` (non-literals map to ``...``)."""
    m = re.search(rf"^class {re.escape(class_name)}\b", src, re.M)
    if not m:
        return None
    seg = _segment(src, m.start())
    try:
        mod = ast.parse(seg)
    except SyntaxError:
        return None
    cls = next((n for n in mod.body if isinstance(n, ast.ClassDef)), None)
    if cls is None:
        return None
    out: dict[str, Any] = {}
    for n in cls.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(n, ast.Assign):
            targets, value = n.targets, n.value
        elif isinstance(n, ast.AnnAssign) and n.value is not None:
            targets, value = [n.target], n.value
        for t in targets:
            if isinstance(t, ast.Name) and value is not None:
                try:
                    out[t.id] = _literal(value)
                except (ValueError, TypeError, SyntaxError):
                    out[t.id] = ...
    return out
