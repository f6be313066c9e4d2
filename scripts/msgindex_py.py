"""Python message extractor for the message index: every string that reaches ``raise X(...)``,
``assert cond, msg``, a logger call at warning or above, ``warnings.warn`` or a helper whose name
says warning/error, read with ``ast`` (never imported).

A message may be built before it is used: assigned to a name earlier in the same function (also
``+=``), concatenated, ``%``-formatted, an f-string, ``.format``, implicit concatenation, or a
conditional of two strings (both kept). What cannot be resolved becomes an ``any`` hole.

    extract_python(root, project, version, prefix="") -> list[RawTemplate]
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from msgindex_common import RawTemplate, normalize_parts

Parts = tuple[tuple[str, str], ...]
ANY: Parts = (("hole", "any"),)

# logger methods at warning and above → level
LOG_LEVELS = {
    "warning": "warning", "warn": "warning", "warning_once": "warning", "warning_one": "warning",
    "warn_once": "warning", "error": "error", "error_once": "error", "exception": "error",
    "critical": "critical", "fatal": "fatal",
}
# receivers of those methods that are loggers (an ``.error`` on anything else is not a log call)
_LOGGER_NAME = re.compile(r"(?i)^(?:_*)(?:logger|log|logging|_log|LOG|LOGGER|warnings|logger_\w+|"
                          r"\w*_logger|\w*_log)$")
# helpers whose name says they report an error or warning: first string argument is the message
_HELPER = re.compile(r"(?i)(?:^|_)(?:print_warning(?:_once)?|warn(?:ing)?_once|log_warning|"
                     r"log_error|raise_\w+|\w*_error|fail|abort|warn|warn_\w+)$")

_PCT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?([diouxXeEfFgGcrsa%])")
_FMT_FIELD = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")


def _pct_type(conv: str) -> str:
    if conv in "diouc":
        return "int" if conv != "c" else "word"
    if conv in "xX":
        return "hex"
    if conv in "eEfFgG":
        return "float"
    return "any"


def _spec_type(spec: str) -> str:
    """A format spec's type (``:d`` int, ``:.2f`` float, ``:x`` hex)."""
    if not spec:
        return "any"
    c = spec[-1]
    if c in "dn":
        return "int"
    if c in "xX":
        return "hex"
    if c in "eEfFgG%":
        return "float"
    return "any"


def percent_parts(fmt: str) -> Parts:
    out: list[tuple[str, str]] = []
    pos = 0
    for m in _PCT.finditer(fmt):
        out.append(("lit", fmt[pos:m.start()]))
        out.append(("lit", "%") if m.group(1) == "%" else ("hole", _pct_type(m.group(1))))
        pos = m.end()
    out.append(("lit", fmt[pos:]))
    return tuple(out)


def format_parts(fmt: str) -> Parts:
    out: list[tuple[str, str]] = []
    pos = 0
    for m in _FMT_FIELD.finditer(fmt):
        out.append(("lit", fmt[pos:m.start()]))
        g = m.group(0)
        if g == "{{":
            out.append(("lit", "{"))
        elif g == "}}":
            out.append(("lit", "}"))
        else:
            spec = m.group(1).split(":", 1)[1] if ":" in m.group(1) else ""
            out.append(("hole", _spec_type(spec)))
        pos = m.end()
    out.append(("lit", fmt[pos:]))
    return tuple(out)


class _Scope:
    """Names assigned string-like values in one function: name → list of (line, parts)."""

    def __init__(self) -> None:
        self.names: dict[str, list[tuple[int, list[Parts]]]] = {}

    def get(self, name: str, line: int) -> list[Parts] | None:
        best = None
        for ln, vals in self.names.get(name, ()):
            if ln <= line:
                best = vals
        return best


class _Eval:
    """Turns an expression into the message shapes it can take (a list: a conditional gives two)."""

    def __init__(self, scope: _Scope) -> None:
        self.scope = scope

    def parts(self, node: ast.AST, line: int, depth: int = 0) -> list[Parts]:
        if depth > 12:
            return [ANY]
        if isinstance(node, ast.Constant):
            return [(("lit", node.value),)] if isinstance(node.value, str) else [ANY]
        if isinstance(node, ast.JoinedStr):
            return [self._fstring(node)]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left = self.parts(node.left, line, depth + 1)
            right = self.parts(node.right, line, depth + 1)
            return [a + b for a in left[:2] for b in right[:2]]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return self._expand(self.parts(node.left, line, depth + 1), percent_parts)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            return self._method(node, node.func, line, depth)
        if isinstance(node, ast.IfExp):
            return (self.parts(node.body, line, depth + 1)[:2]
                    + self.parts(node.orelse, line, depth + 1)[:2])
        if isinstance(node, ast.Name):
            got = self.scope.get(node.id, line)
            return got if got else [ANY]
        return [ANY]

    @staticmethod
    def _fstring(node: ast.JoinedStr) -> Parts:
        acc: list[tuple[str, str]] = []
        for v in node.values:
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                acc.append(("lit", v.value))
            elif isinstance(v, ast.FormattedValue):
                spec = ""
                if isinstance(v.format_spec, ast.JoinedStr):
                    spec = "".join(c.value for c in v.format_spec.values
                                   if isinstance(c, ast.Constant) and isinstance(c.value, str))
                acc.append(("hole", _spec_type(spec)))
        return tuple(acc)

    @staticmethod
    def _expand(fmts: list[Parts], how: Callable[[str], Parts]) -> list[Parts]:
        """Each literal of each shape run through a format parser (``%`` or ``.format``)."""
        out = []
        for f in fmts:
            acc: list[tuple[str, str]] = []
            for k, v in f:
                acc += how(v) if k == "lit" else [(k, v)]
            out.append(tuple(acc))
        return out

    def _method(self, node: ast.Call, func: ast.Attribute, line: int, depth: int) -> list[Parts]:
        if func.attr == "format":
            return self._expand(self.parts(func.value, line, depth + 1), format_parts)
        if func.attr in ("strip", "rstrip", "lstrip") and not node.args:
            return self.parts(func.value, line, depth + 1)
        return [ANY]


def _is_stringish(node: ast.AST) -> bool:
    return isinstance(node, (ast.Constant, ast.JoinedStr, ast.BinOp, ast.Name, ast.IfExp, ast.Call))


def _name_of(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _receiver(node: ast.Attribute) -> str | None:
    v = node.value
    if isinstance(v, ast.Name):
        return v.id
    if isinstance(v, ast.Attribute):
        return v.attr
    if isinstance(v, ast.Call):  # logging.getLogger(__name__).warning(...)
        return _name_of(v.func)
    return None


def _walk_function(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """The nodes of one function body, not descending into nested functions or classes."""
    stack: list[ast.AST] = list(reversed(body))
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield n
        for c in reversed(list(ast.iter_child_nodes(n))):
            if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                stack.append(c)


class _Extractor:
    def __init__(self, project: str, version: str, relpath: str) -> None:
        self.project, self.version, self.file = project, version, relpath
        self.out: list[RawTemplate] = []

    def scopes(self, tree: ast.Module) -> Iterator[tuple[str, list[ast.stmt]]]:
        yield "", tree.body
        stack: list[tuple[str, ast.AST]] = [("", tree)]
        while stack:
            prefix, node = stack.pop()
            for c in ast.iter_child_nodes(node):
                if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    name = f"{prefix}{c.name}"
                    yield name, c.body
                    stack.append((name + ".", c))
                elif isinstance(c, ast.ClassDef):
                    stack.append((f"{prefix}{c.name}.", c))
                    yield f"{prefix}{c.name}", c.body
                else:
                    stack.append((prefix, c))

    def run(self, tree: ast.Module) -> None:
        for func, body in self.scopes(tree):
            nodes = list(_walk_function(body))
            scope = _Scope()
            ev = _Eval(scope)
            for n in nodes:  # assignments first, in line order
                if isinstance(n, ast.Assign) and len(n.targets) == 1 and \
                        isinstance(n.targets[0], ast.Name) and _is_stringish(n.value):
                    vals = ev.parts(n.value, n.lineno)
                    if any(k == "lit" for p in vals for k, _ in p):
                        scope.names.setdefault(n.targets[0].id, []).append((n.lineno, vals))
                elif isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add) and \
                        isinstance(n.target, ast.Name):
                    prev = scope.get(n.target.id, n.lineno) or [ANY]
                    add = ev.parts(n.value, n.lineno)
                    scope.names.setdefault(n.target.id, []).append(
                        (n.lineno, [a + b for a in prev[:2] for b in add[:2]]))
            for n in nodes:
                self.visit(n, func, ev)

    def emit(self, node: ast.AST, func: str, kind: str, exc: str | None, level: str | None,
             msg: ast.AST, ev: _Eval, pct: bool = False) -> None:
        """One template per shape of ``msg`` (``pct``: a logging call with arguments, whose
        ``%`` conversions logging fills in)."""
        line = getattr(node, "lineno", 0)
        seen = set()
        for p in ev.parts(msg, line)[:4]:
            if pct:
                p = tuple(x for k, v in p for x in (percent_parts(v) if k == "lit" else ((k, v),)))
            parts = normalize_parts(p)
            if parts in seen:
                continue
            seen.add(parts)
            self.out.append(RawTemplate(self.project, self.version, self.file, line, func, kind,
                                        exc, level, parts))

    def visit(self, n: ast.AST, func: str, ev: _Eval) -> None:
        if isinstance(n, ast.Raise) and isinstance(n.exc, ast.Call):
            exc = _name_of(n.exc.func)
            msg = n.exc.args[0] if n.exc.args else next(
                (k.value for k in n.exc.keywords if k.arg in ("msg", "message")), None)
            if exc and msg is not None and _is_stringish(msg):
                self.emit(n, func, "raise", exc, None, msg, ev)
        elif isinstance(n, ast.Assert) and n.msg is not None:
            self.emit(n, func, "check", "AssertionError", None, n.msg, ev)
        elif isinstance(n, ast.Call) and n.args:
            self.call(n, func, ev)

    def call(self, n: ast.Call, func: str, ev: _Eval) -> None:
        f = n.func
        name = _name_of(f)
        if name is None:
            return
        first = n.args[0]
        if isinstance(f, ast.Attribute):
            recv = _receiver(f) or ""
            if name == "warn" and recv == "warnings":
                cat = _name_of(n.args[1]) if len(n.args) > 1 else None
                kw = next((k.value for k in n.keywords if k.arg == "category"), None)
                cat = cat or (_name_of(kw) if kw is not None else None)
                self.emit(n, func, "log", cat or "UserWarning", "warning", first, ev)
                return
            if name in LOG_LEVELS and (_LOGGER_NAME.match(recv) or recv in ("self", "cls")):
                if recv in ("self", "cls") and name not in ("warning", "warning_once", "error",
                                                            "exception", "critical"):
                    return
                self.emit(n, func, "log", None, LOG_LEVELS[name], first, ev, pct=len(n.args) > 1)
                return
        if _HELPER.search(name) and _is_stringish(first) and not isinstance(first, ast.Call) \
                and any(k == "lit" for p in ev.parts(first, n.lineno) for k, _ in p):
            level = "warning" if "warn" in name.lower() else "error"
            self.emit(n, func, "log", None, level, first, ev, pct=len(n.args) > 1)


def extract_file(path: Path, rel: str, project: str, version: str) -> list[RawTemplate]:
    try:
        src = path.read_bytes()
        tree = ast.parse(src, filename=rel)
    except (SyntaxError, ValueError, OSError):
        return []
    x = _Extractor(project, version, rel)
    x.run(tree)
    return x.out


def extract_python(root: Path, project: str, version: str, prefix: str = "") -> list[RawTemplate]:
    """Every message template under ``root`` (``prefix``: a folder inside it to limit the walk);
    files are named by their path relative to ``root``."""
    base = root / prefix if prefix else root
    out: list[RawTemplate] = []
    for path in sorted(base.rglob("*.py")):
        out += extract_file(path, path.relative_to(root).as_posix(), project, version)
    return out
