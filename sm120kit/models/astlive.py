"""Is a call on a live code path? Static answers on the syntax tree, for markers and features.

A marker such as "``triton_filter_and_convert_dcp_index`` is passed ``dcp_rank``" stands for a
code path: DCP decode on this rank. It does not hold where the code cannot take that path:

* the argument is a constant (``dcp_rank=0``, ``dcp_size=1``), or ``self.X`` where every
  assignment of ``X`` in the class is a constant;
* the call is reached only through a model-specific branch: an enclosing ``if``, or an earlier
  ``if ...: return`` that must not be taken, whose test names model geometry or a model family
  (``self.rope_pad``, ``model_type``, ``qk_rope_head_dim``, a string constant) — followed from a
  helper method to its ``self.helper(...)`` call sites, three levels deep.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

#: identifiers that make a guard model-specific (geometry, family, model config)
MODEL_WORDS = re.compile(
    r"rope|nope|model_type|model_config|hf_config|glm|deepseek|kimi|qwen|minimax|mistral|"
    r"lora_rank|head_dim|arch|is_v\d|family", re.I)

FuncDef = ast.FunctionDef | ast.AsyncFunctionDef


def identifiers(node: ast.AST) -> set[str]:
    """Names, attribute names and string constants in ``node``."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            out.add(repr(n.value))
    return out


def model_specific(test: ast.expr, truthy: bool = True) -> bool:
    """Code that runs only when ``test`` is ``truthy`` is reserved for some models (family,
    geometry): the test names one and the code needs it to hold. The other side of such a test
    (``if not self.rope_pad:``, ``model_type != "glm"`` failing) is the general path."""
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, truthy = test.operand, not truthy
    if (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.NotEq | ast.IsNot | ast.NotIn)):
        truthy = not truthy
    if not truthy:
        return False
    return any(s.startswith("'") or MODEL_WORDS.search(s) for s in identifiers(test))


def _contains(stmt: ast.AST, target: ast.AST) -> bool:
    return any(n is target for n in ast.walk(stmt))


def _exits(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], ast.Return | ast.Raise)


def _sub_bodies(stmt: ast.stmt) -> Iterator[list[ast.stmt]]:
    """The statement lists nested in ``stmt`` (loop, with, try bodies, except handlers)."""
    for name in ("body", "orelse", "finalbody"):
        sub = getattr(stmt, name, None)
        if isinstance(sub, list) and sub and isinstance(sub[0], ast.stmt):
            yield sub
    for h in getattr(stmt, "handlers", None) or []:
        if isinstance(h, ast.ExceptHandler):
            yield h.body


Guard = tuple[ast.expr, bool]  # a test and the value it must have for the code to run


def guards(body: list[ast.stmt], target: ast.AST) -> list[Guard] | None:
    """The tests that decide whether ``target`` (inside ``body``) runs, each with the value it
    needs: enclosing ``if`` tests (True in the body, False in ``else``) and earlier
    ``if ...: return`` tests (False); None when ``target`` is not in ``body``."""
    found: list[Guard] = []
    for stmt in body:
        if not _contains(stmt, target):
            if isinstance(stmt, ast.If) and _exits(stmt.body):
                found.append((stmt.test, False))
            elif isinstance(stmt, ast.If) and _exits(stmt.orelse):
                found.append((stmt.test, True))
            continue
        if isinstance(stmt, ast.If):
            in_body = any(_contains(s, target) for s in stmt.body)
            branch = stmt.body if in_body else stmt.orelse
            if not _contains(stmt.test, target):
                found.append((stmt.test, in_body))
            return found + (guards(branch, target) or [])
        for sub in _sub_bodies(stmt):
            inner = guards(sub, target)
            if inner is not None:
                return found + inner
        return found  # in an expression of this statement
    return None


def enclosing_function(tree: ast.AST, target: ast.AST) -> FuncDef | None:
    best: FuncDef | None = None
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and _contains(n, target):
            if best is None or _contains(best, n):
                best = n
    return best


def enclosing_class(tree: ast.AST, target: ast.AST) -> ast.ClassDef | None:
    best: ast.ClassDef | None = None
    for n in ast.walk(tree):
        if isinstance(n, ast.ClassDef) and _contains(n, target):
            if best is None or _contains(best, n):
                best = n
    return best


def _self_calls(cls: ast.ClassDef, name: str) -> Iterator[ast.Call]:
    for n in ast.walk(cls):
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr == name and isinstance(n.func.value, ast.Name)
                and n.func.value.id == "self"):
            yield n


def path_is_live(tree: ast.AST, node: ast.AST, depth: int = 3) -> bool:
    """No model-specific guard stands between the method's entry and ``node``; for a helper
    method, at least one of its ``self.helper(...)`` call sites is live too."""
    fn = enclosing_function(tree, node)
    if fn is None:
        return True
    if any(model_specific(test, truthy) for test, truthy in guards(fn.body, node) or []):
        return False
    cls = enclosing_class(tree, fn)
    if cls is None or depth == 0 or fn.name in ("forward_mqa", "forward", "__init__"):
        return True
    sites = list(_self_calls(cls, fn.name))
    if not sites:
        return True  # called from outside the class: nothing here says otherwise
    return any(path_is_live(tree, s, depth - 1) for s in sites)


def self_attr_values(cls: ast.ClassDef, attr: str) -> list[ast.expr]:
    """Every value assigned to ``self.attr`` in the class's methods (and ``attr`` in its body)."""
    out: list[ast.expr] = []
    for n in ast.walk(cls):
        if isinstance(n, ast.Assign | ast.AnnAssign) and n.value is not None:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            for t in targets:
                if (isinstance(t, ast.Attribute) and t.attr == attr
                        and isinstance(t.value, ast.Name) and t.value.id == "self"):
                    out.append(n.value)
                elif isinstance(t, ast.Name) and t.id == attr and n in cls.body:
                    out.append(n.value)
    return out


def value_is_live(tree: ast.AST, value: ast.expr, at: ast.AST) -> bool:
    """``value`` can vary at run time: not a constant, and not ``self.X`` (or a local name)
    that is only ever assigned constants."""
    if isinstance(value, ast.Constant):
        return False
    if (isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name)
            and value.value.id == "self"):
        cls = enclosing_class(tree, at)
        vals = self_attr_values(cls, value.attr) if cls is not None else []
        return not vals or any(not isinstance(v, ast.Constant) for v in vals)
    if isinstance(value, ast.Name):
        fn = enclosing_function(tree, at)
        vals = [n.value for n in ast.walk(fn) if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == value.id for t in n.targets)] \
            if fn is not None else []
        return not vals or any(not isinstance(v, ast.Constant) for v in vals)
    return True
