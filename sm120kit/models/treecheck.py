"""Static whole-tree checks for ``verify`` (pure: the caller reads the files).

* :func:`imported_names` / :func:`module_defines`: a ``from vllm.x import name`` resolves when
  ``vllm/x.py`` (or ``vllm/x/__init__.py``) defines, assigns or imports ``name`` at module level
  (inside ``if``/``try`` too), or ``vllm/x/name.py`` exists; a module ``__getattr__`` or a
  ``from ... import *`` resolves everything. vLLM is never imported.
* :func:`lse_base_overrides`: calls in the layer that merges the DCP ranks' outputs that pass
  ``is_lse_base_on_e`` without consulting the impl's ``lse_base_on_e`` (a hard-coded ``True``),
  or call the merge without it (its default is base e).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

MERGE_FUNCS = ("cp_lse_ag_out_rs", "dcp_a2a_lse_reduce")


@dataclass(frozen=True)
class ImportRef:
    module: str  # absolute dotted name
    name: str
    line: int


def _parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def _absolute(rel: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    pkg = rel[:-3].replace("/", ".").split(".")[:-1]  # the file's package
    pkg = pkg[: len(pkg) - (node.level - 1)] if node.level > 1 else pkg
    return ".".join([*pkg, node.module] if node.module else pkg)


def imported_names(rel: str, text: str, top: str = "vllm") -> list[ImportRef]:
    """Every ``from M import name`` of ``text`` (the file at ``rel``) whose module is in the
    tree (``top`` package), anywhere in the file (function-level imports too)."""
    tree = _parse(text)
    out: list[ImportRef] = []
    if tree is None:
        return out
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom):
            mod = _absolute(rel, n)
            if mod == top or mod.startswith(top + "."):
                out += [ImportRef(mod, a.name, n.lineno) for a in n.names if a.name != "*"]
    return out


def module_paths(module: str) -> tuple[str, str]:
    base = module.replace(".", "/")
    return f"{base}.py", f"{base}/__init__.py"


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for s in body:
        out.append(s)
        if isinstance(s, ast.If | ast.Try | ast.With):
            for name in ("body", "orelse", "finalbody"):
                sub = getattr(s, name, None)
                if sub:
                    out += _top_level(sub)
            for h in getattr(s, "handlers", []):
                out += _top_level(h.body)
    return out


def module_defines(text: str) -> set[str] | None:
    """Names defined at module level of ``text``; None when anything may resolve (a module
    ``__getattr__``, a star import) or the file does not parse."""
    tree = _parse(text)
    if tree is None:
        return None
    names: set[str] = set()
    for s in _top_level(tree.body):
        if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if s.name == "__getattr__":
                return None
            names.add(s.name)
        elif isinstance(s, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            for t in targets:
                names |= {x.id for x in ast.walk(t) if isinstance(x, ast.Name)}
        elif isinstance(s, ast.Import | ast.ImportFrom):
            for a in s.names:
                if a.name == "*":
                    return None
                names.add(a.asname or a.name.split(".")[0])
    return names


@dataclass(frozen=True)
class Override:
    line: int
    call: str
    detail: str


def lse_base_overrides(text: str) -> list[Override]:
    """Merge calls in ``text`` that ignore the impl's ``lse_base_on_e`` (see module doc)."""
    tree = _parse(text)
    out: list[Override] = []
    if tree is None:
        return out
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call):
            continue
        name = n.func.attr if isinstance(n.func, ast.Attribute) else (
            n.func.id if isinstance(n.func, ast.Name) else "")
        kw = next((k for k in n.keywords if k.arg == "is_lse_base_on_e"), None)
        if kw is None:
            if name in MERGE_FUNCS and not any(k.arg is None for k in n.keywords):
                out.append(Override(n.lineno, name, "no is_lse_base_on_e: base e by default"))
            continue
        consults = any(isinstance(x, ast.Attribute) and x.attr == "lse_base_on_e"
                       for x in ast.walk(kw.value))
        if not consults and (name in MERGE_FUNCS or isinstance(kw.value, ast.Constant)):
            out.append(Override(n.lineno, name, f"is_lse_base_on_e={ast.unparse(kw.value)}"))
    return out
