"""Markers ruled out without the whole file's tree (``astmarkers._ruled_out``) decide exactly as
the whole-file judgement does: on every function of real vLLM 0.34.0 sources (the release repo
built from the PyPI wheel), on the manifest's markers at every cached release, and on the cases
a cut-out block could get wrong (a ``def`` in a docstring, a syntax error elsewhere, tabs, a
signature closed at the ``def``'s indentation, a backslash between ``def`` and its name)."""

from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sm120kit.gitrun import read_blobs
from sm120kit.models import astmarkers as am
from sm120kit.models.series import load_series
from sm120kit.paths import cache_dir


def _whole_file(kind: str, spec: dict[str, Any], text: str) -> bool:
    """The judgement before the shortcut: the name check, then the whole file's tree."""
    def name_check(k: str, s: dict[str, Any], t: str) -> bool:
        key = s.get("func") if k == "call_kwarg" else s.get("name")
        return bool(key) and key not in t

    saved = am._ruled_out
    am._ruled_out = name_check  # type: ignore[assignment]
    try:
        return am.holds(kind, spec, text)
    finally:
        am._ruled_out = saved  # type: ignore[assignment]


def _specs(tree: ast.Module) -> list[tuple[str, dict[str, Any]]]:
    """function/assign specs for every function of ``tree``: some hold, some do not."""
    out: list[tuple[str, dict[str, Any]]] = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        calls = sorted({c.func.id for c in ast.walk(fn) if isinstance(c, ast.Call)
                        and isinstance(c.func, ast.Name)})[:2]
        for no_global in (False, True):
            out.append(("function", {"name": fn.name, "no_global": no_global}))
        for c in [*calls, "print"]:
            out.append(("function", {"name": fn.name, "calls": c}))
        names = sorted({t.id for n in ast.walk(fn) if isinstance(n, ast.Assign)
                        for t in n.targets if isinstance(t, ast.Name)})[:3]
        for n in names:
            out.append(("assign", {"scope": fn.name, "name": n}))
    return out


def test_same_verdict_on_every_function_of_real_sources(release34: Path) -> None:
    files = subprocess.run(["git", "ls-files", "vllm/v1", "vllm/model_executor/layers"],
                           cwd=release34, capture_output=True, text=True, check=True).stdout.split()
    checked = ruled_out = 0
    for f in [f for f in files if f.endswith(".py")][::12]:
        text = (release34 / f).read_text(encoding="utf-8", errors="replace")
        tree = am.parse(text)
        if tree is None:
            continue
        for kind, spec in _specs(tree):
            fast = am.holds(kind, spec, text)
            assert fast == _whole_file(kind, spec, text), (f, kind, spec)
            checked += 1
            ruled_out += am._ruled_out(kind, spec, text)
    assert checked > 1500 and ruled_out > 5, (checked, ruled_out)


def test_manifest_markers_same_verdict_at_every_cached_release(release34: Path) -> None:
    series = load_series()
    markers = {m for v in series.variants.values() for p in v.patches
               for m in (*p.applied_markers, *p.upstream_markers) if m.kind != "text"}
    roots = [cache_dir() / "repos", Path(os.environ.get("SM120KIT_TEST_CACHE", "/nonexistent")) / "repos"]
    repos = sorted({p.resolve() for r in roots for p in r.glob("vllm-*") if (p / ".git").is_dir()}
                   | {release34.resolve()})
    seen = 0
    for repo in repos:
        tag = "v" + repo.name.removeprefix("vllm-")
        texts = read_blobs(repo, [f"{tag}:{m.file}" for m in markers])
        for m in markers:
            raw = texts.get(f"{tag}:{m.file}")
            if raw is None:
                continue
            spec = {k: (list(v) if isinstance(v, tuple) else v) for k, v in m.spec}
            text = raw.decode("utf-8", "replace")
            assert m.holds(text) == _whole_file(m.kind, spec, text), (repo.name, m)
            seen += 1
    assert seen >= len(markers)


EDGE = '''\
import os


def sig(
    a: int,
) -> int:
    global counter
    return helper(a)


# a comment at column 0 between functions
class K:
    def method(self):
        x = os.getpid()
        return x

    async def coro(self):
        y = 1
        return y


def doc():
    """Example:

def sig(a):
    return a
    """
    z = compute()
    return z
'''


@pytest.mark.parametrize("kind,spec", [
    ("function", {"name": "sig", "no_global": True}),
    ("function", {"name": "sig", "calls": "helper"}),
    ("function", {"name": "sig", "calls": "other"}),
    ("function", {"name": "method", "cls": "K", "calls": "getpid"}),
    ("function", {"name": "coro", "no_global": True}),
    ("assign", {"scope": "method", "name": "x"}),
    ("assign", {"scope": "coro", "name": "y"}),
    ("assign", {"scope": "doc", "name": "z"}),
    ("assign", {"scope": "sig", "name": "a"}),
    ("call_kwarg", {"func": "helper", "name": "a"}),
])
@pytest.mark.parametrize("variant", ["plain", "syntax-error", "tabs", "backslash"])
def test_same_verdict_on_edge_cases(kind: str, spec: dict[str, Any], variant: str) -> None:
    text = EDGE
    if variant == "syntax-error":
        text += "\ndef broken(:\n"
    elif variant == "tabs":
        text = text.replace("        ", "\t\t").replace("    ", "\t")
    elif variant == "backslash":
        text = text.replace("def sig(\n", "def \\\nsig(\n", 1)
    try:
        ast.parse(text)
    except SyntaxError:
        assert variant == "syntax-error"
    assert am.holds(kind, spec, text) == _whole_file(kind, spec, text)


def test_blocks_cut_out_exactly_the_functions() -> None:
    assert am._def_blocks(EDGE, "sig") is None  # the one in the docstring does not parse alone
    blocks = am._def_blocks(EDGE, "method")
    assert blocks is not None and len(blocks) == 1
    fn = blocks[0].body[0]
    assert isinstance(fn, ast.FunctionDef) and [type(s).__name__ for s in fn.body] == ["Assign", "Return"]
    assert am._def_blocks(EDGE.replace("    ", "\t"), "sig") is None
    assert am._def_blocks(EDGE, "absent") == []
