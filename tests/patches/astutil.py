"""Small AST helpers for reading patched vLLM sources."""

from __future__ import annotations

import ast
from collections.abc import Iterator


def find_class(mod: ast.Module, name: str) -> ast.ClassDef:
    for node in mod.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise AssertionError(f"class {name} not found")


def find_func(scope: ast.Module | ast.ClassDef, name: str) -> ast.FunctionDef:
    for node in scope.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError(f"function {name} not found")


def has_func(scope: ast.Module | ast.ClassDef, name: str) -> bool:
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in scope.body)


def callee(call: ast.Call) -> str:
    f = call.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return ""


def calls(node: ast.AST, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call) and callee(n) == name]


def one_call(node: ast.AST, name: str) -> ast.Call:
    found = calls(node, name)
    assert len(found) == 1, f"expected one call of {name}, found {len(found)}"
    return found[0]


def kw(call: ast.Call, name: str) -> ast.expr | None:
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


def src(node: ast.AST | None) -> str:
    return "" if node is None else ast.unparse(node)


def class_assigns(cls: ast.ClassDef) -> dict[str, ast.expr]:
    """Plain ``name = value`` / ``name: T = value`` statements directly in a class body."""
    out: dict[str, ast.expr] = {}
    for stmt in cls.body:
        if isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
            out[stmt.target.id] = stmt.value
    return out


def assignments_to(node: ast.AST, name: str) -> Iterator[tuple[ast.stmt, ast.expr]]:
    """Every statement binding ``name`` (plain, annotated or tuple target) and its value."""
    for n in ast.walk(node):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                names = [e for e in ast.walk(t) if isinstance(e, ast.Name)]
                if any(e.id == name for e in names):
                    yield n, n.value
        elif (isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
              and n.target.id == name and n.value is not None):
            yield n, n.value


def parents(root: ast.AST) -> dict[ast.AST, ast.AST]:
    out: dict[ast.AST, ast.AST] = {}
    for p in ast.walk(root):
        for c in ast.iter_child_nodes(p):
            out[c] = p
    return out


def enclosing_ifs(root: ast.AST, node: ast.AST) -> list[tuple[ast.If, bool]]:
    """The ``if`` statements around ``node`` (innermost first), with True for the body branch."""
    par = parents(root)
    out: list[tuple[ast.If, bool]] = []
    child = node
    while child in par:
        p = par[child]
        if isinstance(p, ast.If):
            out.append((p, child in p.body))
        child = p
    return out


def is_self_attr(node: ast.AST | None, attr: str) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == attr
            and isinstance(node.value, ast.Name) and node.value.id == "self")


def is_q_shape_1(node: ast.AST | None) -> bool:
    """``q.shape[1]``."""
    return (isinstance(node, ast.Subscript) and src(node.value) == "q.shape"
            and isinstance(node.slice, ast.Constant) and node.slice.value == 1)


def names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def attrs_used(node: ast.AST) -> set[str]:
    return {src(n) for n in ast.walk(node) if isinstance(n, ast.Attribute)}
