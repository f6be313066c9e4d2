"""Synthetic fork drift, computed from a real release file and the patch series' changes to it.

Each generator takes the release file (``base``) and the file after the whole variant
(``patched``), finds the patch's changed lines (``difflib`` on lines) and the module- and
class-level statements around them (``ast``), and returns the fork's version of the file plus the
probes a correct port must keep (strings, and pairs that must stay in that order), or None when
the file has no site for that drift. Every change lies outside the lines the patch changes.
Shared by ``tests/port/test_drift_kinds.py`` and ``scripts/bench_port.py``.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Drift:
    text: str
    probes: list[str] = field(default_factory=list)
    order: list[tuple[str, str]] = field(default_factory=list)

    def kept_in(self, result: str) -> list[str]:
        """What of the fork's drift ``result`` lost (empty: all kept)."""
        lost = [p for p in self.probes if p not in result]
        for a, b in self.order:
            if not (0 <= result.find(a) < result.find(b)):
                lost.append(f"order {a!r} before {b!r}")
        return lost


@dataclass
class Stmt:
    node: ast.stmt
    start: int  # 0-based first line (decorators included)
    end: int  # 0-based, exclusive
    indent: str
    scope: str  # "" or "Class."


@dataclass
class Site:
    lines: list[str]
    scopes: list[list[Stmt]]  # module body, then every class body
    hunks: list[tuple[int, int]]  # base line ranges the patch replaces ([a, a) = insertion)

    def patched(self, s: Stmt) -> bool:
        return any((a < s.end and b > s.start) if a < b else (s.start < a < s.end)
                   for a, b in self.hunks)

    def inside(self, g: int) -> bool:
        """Line gap ``g`` (insert before base line g) falls strictly inside a changed range."""
        return any(a < g < b for a, b in self.hunks)

    def distance(self, g: int) -> int:
        return min((0 if a <= g <= b else min(abs(g - a), abs(g - b)) for a, b in self.hunks),
                   default=10**6)


def _scope(stmts: list[ast.stmt], indent: str, scope: str) -> list[Stmt]:
    out = []
    for n in stmts:
        decos = getattr(n, "decorator_list", None) or []
        start = min([n.lineno, *(d.lineno for d in decos)]) - 1
        out.append(Stmt(n, start, n.end_lineno or n.lineno, indent, scope))
    return out


def site(base: str, patched: str) -> Site:
    tree = ast.parse(base)
    lines = base.splitlines(keepends=True)
    scopes = [_scope(tree.body, "", "")]
    for n in tree.body:
        if isinstance(n, ast.ClassDef) and n.body[0].lineno > n.lineno:
            scopes.append(_scope(n.body, " " * n.body[0].col_offset, n.name + "."))
    sm = difflib.SequenceMatcher(None, lines, patched.splitlines(keepends=True), autojunk=False)
    hunks = [(i1, i2) for tag, i1, i2, _, _ in sm.get_opcodes() if tag != "equal"]
    return Site(lines, scopes, hunks)


def _insert(lines: list[str], at: dict[int, list[str]]) -> str:
    out: list[str] = []
    for i, ln in enumerate(lines):
        out += at.get(i, [])
        out.append(ln)
    out += at.get(len(lines), [])
    return "".join(out)


def _fork_def(indent: str, name: str, method: bool) -> list[str]:
    args = "self" if method else ""
    return [f"\n{indent}def {name}({args}) -> str:\n", f'{indent}    return "{name}"\n']


def _is_def(s: Stmt) -> bool:
    return isinstance(s.node, ast.FunctionDef | ast.AsyncFunctionDef)


# ---- the drift kinds ----------------------------------------------------------------------


def adjacent(base: str, patched: str) -> Drift | None:
    """A fork definition right above and right below every definition a hunk falls in."""
    st = site(base, patched)
    at: dict[int, list[str]] = {}
    probes = []
    for scope in st.scopes[1:] + st.scopes[:1]:  # class scopes first: the innermost
        for s in scope:
            if not st.patched(s) or isinstance(s.node, ast.ClassDef):
                continue
            for g in (s.start, s.end):
                if g in at or st.inside(g):
                    continue
                name = f"fork_adjacent_{len(probes)}"
                at[g] = _fork_def(s.indent, name, bool(s.scope))
                probes.append(f"def {name}(")
    return Drift(_insert(st.lines, at), probes) if probes else None


def between_methods(base: str, patched: str) -> Drift | None:
    """A fork method between every two consecutive definitions one of which is patched."""
    st = site(base, patched)
    at: dict[int, list[str]] = {}
    probes = []
    for scope in st.scopes:
        for a, b in zip(scope, scope[1:], strict=False):
            if _is_def(a) and _is_def(b) and (st.patched(a) or st.patched(b)):
                if a.end in at or st.inside(a.end):
                    continue
                name = f"fork_between_{len(probes)}"
                at[a.end] = _fork_def(a.indent, name, bool(a.scope))
                probes.append(f"def {name}(")
    return Drift(_insert(st.lines, at), probes) if probes else None


def class_attributes(base: str, patched: str) -> Drift | None:
    """A fork class attribute after every class-level assignment of a patched class."""
    st = site(base, patched)
    at: dict[int, list[str]] = {}
    probes = []
    for scope in st.scopes[1:]:
        if not any(st.patched(s) for s in scope) and not any(
                scope[0].start <= a <= scope[-1].end for a, _ in st.hunks):
            continue
        for s in scope:
            if isinstance(s.node, ast.Assign | ast.AnnAssign) and not st.inside(s.end):
                name = f"fork_attr_{len(probes)}"
                at[s.end] = [f"{s.indent}{name}: bool = False\n"]
                probes.append(name)
    return Drift(_insert(st.lines, at), probes) if probes else None


def imports(base: str, patched: str) -> Drift | None:
    """An import after every module-level import a hunk touches or borders, and a name added to
    every patched parenthesized ``from M import (...)``."""
    st = site(base, patched)
    at: dict[int, list[str]] = {}
    probes = []
    imps = [s for s in st.scopes[0] if isinstance(s.node, ast.Import | ast.ImportFrom)]
    near = [s for s in imps if st.patched(s) or st.distance(s.end) <= 1]
    for s in near or imps[-1:]:
        if st.inside(s.end) or s.end in at:
            continue
        alias = f"_fork_functools_{len(probes)}"
        at[s.end] = [f"import functools as {alias}  # fork\n"]
        probes.append(alias)
        node = s.node
        if (st.patched(s) and isinstance(node, ast.ImportFrom) and "(" in st.lines[s.start]
                and not st.inside(s.start + 1)):
            first = node.names[0].name
            at.setdefault(s.start + 1, []).append(f"    {first} as _fork_{first},\n")
            probes.append(f"{first} as _fork_{first}")
    return Drift(_insert(st.lines, at), probes) if probes else None


def banner(base: str, patched: str) -> Drift | None:
    """A licence-style banner at the top and a closing comment at the end of the file."""
    st = site(base, patched)
    top = ["# Copyright (c) example-lab. Fork of vLLM; local changes are marked 'fork'.\n",
           "# fork banner: built for SM120 boxes\n"]
    return Drift(_insert(st.lines, {0: top, len(st.lines): ["# end of fork file\n"]}),
                 ["fork banner: built for SM120 boxes", "# end of fork file"])


def _locals(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    params = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
    declared = {n for s in ast.walk(fn) if isinstance(s, ast.Global | ast.Nonlocal) for n in s.names}
    stores = [n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
    return [v for v in dict.fromkeys(stores) if v not in params and v not in declared]


def _rename(lines: list[str], fn: ast.AST, old: str, new: str) -> None:
    spots = sorted(((n.lineno, n.col_offset, n.end_col_offset) for n in ast.walk(fn)
                    if isinstance(n, ast.Name) and n.id == old), reverse=True)
    for ln, c0, c1 in spots:
        s = lines[ln - 1].encode()
        lines[ln - 1] = (s[:c0] + new.encode() + s[c1:]).decode()


def renamed_locals(base: str, patched: str) -> Drift | None:
    """A local variable renamed in up to three functions the patch does not touch."""
    st = site(base, patched)
    lines = list(st.lines)
    probes = []
    for scope in st.scopes:
        for s in scope:
            if len(probes) >= 3 or not _is_def(s) or st.patched(s):
                continue
            assert isinstance(s.node, ast.FunctionDef | ast.AsyncFunctionDef)
            for var in _locals(s.node)[:1]:
                new = f"fork_{var}"
                trial = list(lines)
                _rename(trial, s.node, var, new)
                try:
                    ast.parse("".join(trial))
                except SyntaxError:
                    continue
                lines = trial
                probes.append(new)
    return Drift("".join(lines), probes) if probes else None


def reordered(base: str, patched: str) -> Drift | None:
    """Every patched definition swapped with the definition before it (else after it)."""
    st = site(base, patched)
    for scope in st.scopes[1:] + st.scopes[:1]:
        for i, s in enumerate(scope):
            if not (_is_def(s) and st.patched(s)):
                continue
            for j in (i - 1, i + 1):
                if min(i, j) >= 1 and j < len(scope) and _is_def(scope[j]):
                    a, b = sorted((j, i))
                    lo, mid, hi = scope[a - 1].end, scope[a].end, scope[b].end
                    if st.inside(lo) or st.inside(mid) or st.inside(hi):
                        continue
                    text = "".join(st.lines[:lo] + st.lines[mid:hi] + st.lines[lo:mid]
                                   + st.lines[hi:])
                    na, nb = scope[a].node, scope[b].node
                    assert isinstance(na, ast.FunctionDef | ast.AsyncFunctionDef)
                    assert isinstance(nb, ast.FunctionDef | ast.AsyncFunctionDef)
                    return Drift(text, [], [(f"def {nb.name}(", f"def {na.name}(")])
    return None


def statement_in_patched_function(base: str, patched: str) -> Drift | None:
    """A statement added inside every patched function, at least 3 lines from the changes."""
    st = site(base, patched)
    at: dict[int, list[str]] = {}
    probes = []
    for scope in st.scopes:
        for s in scope:
            if not (_is_def(s) and st.patched(s)):
                continue
            assert isinstance(s.node, ast.FunctionDef | ast.AsyncFunctionDef)
            body = _scope(s.node.body, " " * s.node.body[0].col_offset, "")
            gaps = [b.end for b in body[:-1] if not st.inside(b.end)]
            best = max(gaps, key=st.distance, default=None)
            if best is None or st.distance(best) < 3:
                continue
            tag = f"fork: probe in {s.scope}{s.node.name}"
            at[best] = [f"{body[0].indent}pass  # {tag}\n"]
            probes.append(tag)
    return Drift(_insert(st.lines, at), probes) if probes else None


KINDS: dict[str, Callable[[str, str], Drift | None]] = {
    "adjacent-insert": adjacent,
    "def-between-patched": between_methods,
    "class-attribute": class_attributes,
    "import-addition": imports,
    "file-banner": banner,
    "renamed-locals": renamed_locals,
    "reordered-defs": reordered,
    "stmt-in-patched-fn": statement_in_patched_function,
}


def drift_files(kind: str, base: dict[str, str], patched: dict[str, str]
                ) -> tuple[dict[str, str], dict[str, Drift]] | None:
    """The fork's touched files under ``kind`` (unchanged where a file has no site)."""
    fn = KINDS[kind]
    files = dict(base)
    drifts: dict[str, Drift] = {}
    for path, text in base.items():
        if not path.endswith(".py"):
            continue
        d = fn(text, patched[path])
        if d is not None:
            ast.parse(d.text)  # every drift is valid Python
            files[path] = d.text
            drifts[path] = d
    return (files, drifts) if drifts else None
