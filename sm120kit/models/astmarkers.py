"""Upstream markers judged on the syntax tree, so that formatting and comments do not matter.

A marker of ``kind`` other than ``text`` is evaluated on ``ast.parse`` of the file:

* ``class_attr``: class ``cls`` assigns ``name`` the constant ``value`` in its body
  (``can_return_lse_for_decode = True``; ``= False`` does not match).
* ``call_kwarg``: a call of ``func`` (the callee's last name, ``mod.f`` or ``f``) passes keyword
  ``name``, written inline or through ``**kw`` where ``kw`` is a dict built in the same function
  (``dict(name=...)``, ``{"name": ...}`` or ``kw["name"] = ...``); with ``value`` the argument must
  be that constant, with ``not_in`` it must not be one of those constants, and with neither it
  must vary at run time (``dcp_rank=0``, or ``self.dcp_rank`` only ever assigned constants, is
  not DCP support). The call must be on a live path: not reached only through a model-specific
  branch (:mod:`sm120kit.models.astlive`).
* ``function``: a function ``name`` is defined (optionally inside class ``cls``); with ``calls``
  it calls that function; with ``no_global`` it declares no ``global``.
* ``assign``: inside function ``scope``, ``name`` is assigned something other than a constant.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from sm120kit.models.astlive import path_is_live, value_is_live

_MISSING = object()


@lru_cache(maxsize=64)
def parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def _callee(node: ast.Call) -> str | None:
    f = node.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return None


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
            yield n


def _const(node: ast.expr | None) -> Any:
    return node.value if isinstance(node, ast.Constant) else _MISSING


def _dict_entries(fn: ast.AST, name: str) -> dict[str, ast.expr]:
    """Keys a function puts into the dict variable ``name`` (literal, dict(), item assignment)."""
    out: dict[str, ast.expr] = {}
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Name) and t.id == name:
                    v = n.value
                    if isinstance(v, ast.Dict):
                        out.update({k.value: val for k, val in zip(v.keys, v.values, strict=True)
                                    if isinstance(k, ast.Constant) and isinstance(k.value, str)})
                    elif isinstance(v, ast.Call) and _callee(v) == "dict":
                        out.update({k.arg: k.value for k in v.keywords if k.arg})
                elif (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)
                      and t.value.id == name and isinstance(t.slice, ast.Constant)
                      and isinstance(t.slice.value, str)):
                    out[t.slice.value] = n.value
    return out


@lru_cache(maxsize=64)
def _calls_by_callee(text: str) -> dict[str, list[tuple[ast.Call, ast.AST]]]:
    """Every call in ``text`` by callee name, with its innermost enclosing function (one walk)."""
    tree = parse(text)
    out: dict[str, list[tuple[ast.Call, ast.AST]]] = {}
    if tree is None:
        return out
    stack: list[tuple[ast.AST, ast.AST]] = [(tree, tree)]
    while stack:
        node, scope = stack.pop()
        if isinstance(node, ast.Call):
            name = _callee(node)
            if name:
                out.setdefault(name, []).append((node, scope))
        inner = node if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else scope
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))
    return out


def _kwarg_values(text: str, func: str, name: str) -> list[tuple[ast.expr, ast.Call]]:
    found: list[tuple[ast.expr, ast.Call]] = []
    for call, scope in _calls_by_callee(text).get(func, []):
        for k in call.keywords:
            if k.arg == name:
                found.append((k.value, call))
            elif k.arg is None and isinstance(k.value, ast.Name):
                v = _dict_entries(scope, k.value.id).get(name)
                if v is not None:
                    found.append((v, call))
    return found


def _class_attr(tree: ast.Module, cls: str, name: str, value: Any) -> bool:
    for n in ast.walk(tree):
        if isinstance(n, ast.ClassDef) and n.name == cls:
            for s in n.body:
                if not isinstance(s, ast.Assign | ast.AnnAssign):
                    continue
                targets = s.targets if isinstance(s, ast.Assign) else [s.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    v = _const(s.value)
                    if v is not _MISSING and v == value and type(v) is type(value):
                        return True
    return False


def _function(tree: ast.Module, name: str, cls: str | None, calls: str | None,
              no_global: bool) -> bool:
    where: ast.AST = tree
    if cls:
        where = next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls),
                     ast.Module(body=[], type_ignores=[]))
    for fn in _functions(where):
        if fn.name != name:
            continue
        if calls and not any(isinstance(c, ast.Call) and _callee(c) == calls
                             for c in ast.walk(fn)):
            continue
        if no_global and any(isinstance(g, ast.Global) for g in ast.walk(fn)):
            continue
        return True
    return False


def _assign_non_const(tree: ast.Module, scope: str, name: str) -> bool:
    for fn in _functions(tree):
        if fn.name != scope:
            continue
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign | ast.AnnAssign) and n.value is not None:
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets) \
                        and not isinstance(n.value, ast.Constant):
                    return True
    return False


def _def_blocks(text: str, name: str) -> list[ast.Module] | None:
    """Every ``def name`` of ``text`` parsed on its own (its lines, dedented), or None when one
    cannot be cut out for certain (a ``def`` and its name not at the start of one line, tabs, a
    body line indented less than the ``def``, a block that does not parse): then only the whole
    file decides. A block ends at the first line (not blank, not a comment, not a closing
    bracket) indented no deeper than its ``def``; it starts at the ``def``: its decorators are
    not in it, so only what a decorator cannot hold (a statement) is judged on it. A function of the whole file's tree is the tree of its own block."""
    loose = len(re.findall(rf"\bdef[\s\\]+{re.escape(name)}\b", text))
    if not loose:
        return []
    if "\t" in text or "\r" in text or "\f" in text:
        return None
    lines = text.split("\n")
    head = re.compile(rf"( *)(?:async +)?def +{re.escape(name)}\b")
    starts = [(i, len(m.group(1))) for i, ln in enumerate(lines) if (m := head.match(ln))]
    if len(starts) != loose:
        return None
    blocks: list[ast.Module] = []
    for i, indent in starts:
        end = i + 1
        while end < len(lines) and (not lines[end].strip()
                                    or lines[end].lstrip().startswith(("#", ")", "]", "}"))
                                    or len(lines[end]) - len(lines[end].lstrip(" ")) > indent):
            end += 1  # a line that closes a bracket (a signature's ``) -> T:``) continues it
        body = lines[i:end]
        while body and (not body[-1].strip() or body[-1].lstrip().startswith("#")):
            body.pop()
        if any(ln.strip() and not ln.startswith(" " * indent) for ln in body):
            return None
        try:
            blocks.append(ast.parse("\n".join(ln[indent:] for ln in body)))
        except (SyntaxError, ValueError):
            return None
    return blocks


def _ruled_out(kind: str, spec: dict[str, Any], text: str) -> bool:
    """The marker cannot hold, shown without parsing the whole file: a name it needs is not in
    the source, or no ``def`` it names satisfies it on its own (:func:`_def_blocks`)."""
    # every kind names an identifier that must occur in the source: skip the parse without it
    key = spec.get("func") if kind == "call_kwarg" else spec.get("name")
    if key and key not in text:
        return True
    if kind == "call_kwarg":  # the keyword is written out: inline, dict(k=...), {"k": ...}, d["k"]
        return spec["name"] not in text
    if kind == "function":  # ``calls`` is left to the whole file: a decorator is a call too
        blocks = _def_blocks(text, spec["name"])
        return blocks is not None and not any(
            _function(b, spec["name"], None, None, bool(spec.get("no_global"))) for b in blocks)
    if kind == "assign":
        blocks = _def_blocks(text, spec["scope"])
        return blocks is not None and not any(
            _assign_non_const(b, spec["scope"], spec["name"]) for b in blocks)
    return False


def holds(kind: str, spec: dict[str, Any], text: str) -> bool:
    """Whether the AST marker ``kind``/``spec`` holds in the Python source ``text``. A marker
    ruled out without the whole file's tree (:func:`_ruled_out`) is not parsed at all; one that
    may hold is judged on the whole file (a syntax error anywhere: it does not hold)."""
    if _ruled_out(kind, spec, text):
        return False
    if kind == "call_kwarg":
        tree = parse(text)
        for v, call in _kwarg_values(text, spec["func"], spec["name"]):
            c = _const(v)
            if "value" in spec and (c is _MISSING or c != spec["value"]):
                continue
            if c is not _MISSING and c in spec.get("not_in", []):
                continue
            if tree is None or not path_is_live(tree, call):
                continue
            if "value" not in spec and "not_in" not in spec and not value_is_live(tree, v, call):
                continue
            return True
        return False
    tree = parse(text)
    if tree is None:
        return False
    if kind == "class_attr":
        return _class_attr(tree, spec["cls"], spec["name"], spec.get("value", True))
    if kind == "function":
        return _function(tree, spec["name"], spec.get("cls"), spec.get("calls"),
                         bool(spec.get("no_global")))
    if kind == "assign":
        return _assign_non_const(tree, spec["scope"], spec["name"])
    raise ValueError(f"unknown marker kind {kind!r}")
