"""Upstream detection on the syntax tree: a simulated upstream port is ``upstream``/"not needed".

The simulated port is the series' effect written as upstream would: every touched file of the
patched release tree re-emitted by ``ast.unparse`` (comments gone, so none of the series'
``# sm120kit:`` tags, and the code reformatted), committed on top of the real release repository.
Every variant is checked on its base release; the untouched release must show no patch upstream.
"""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import pytest

from sm120kit.cli import run
from sm120kit.models.astmarkers import holds
from sm120kit.models.series import load_series
from sm120kit.patchset.markers import read_worktree, variant_marker_states
from sm120kit.patchset.release import release_repo

from .conftest import git

BASES = ["0.25.1", "0.26.0", "0.30.0", "0.33.0", "0.34.0"]


def _port(tmp_path: Path, release: str) -> tuple[Path, object]:
    series = load_series()
    _t, variant = series.variant_for(f"vllm-{release}")
    clone = tmp_path / "vllm"
    git(tmp_path, "clone", "-q", str(release_repo(release)), str(clone))
    git(clone, "-c", "user.name=u", "-c", "user.email=u@u", "am", "-q",
        *[str(variant.patch_path(p)) for p in variant.patches])
    for rel in variant.touched_files():
        path = clone / rel
        path.write_text(ast.unparse(ast.parse(path.read_text())) + "\n")
    git(clone, "-c", "user.name=u", "-c", "user.email=u@u", "commit", "-qam", "upstream port")
    return clone, variant


@pytest.mark.parametrize("release", BASES)
def test_reformatted_port_is_upstream_and_apply_says_not_needed(
        tmp_path: Path, release: str, capsys: pytest.CaptureFixture[str]) -> None:
    clone, variant = _port(tmp_path, release)
    files = {m.file for p in variant.patches for m in (*p.applied_markers, *p.upstream_markers)}
    states = variant_marker_states(variant, read_worktree(clone, files))
    assert [s.state for s in states] == ["upstream"] * len(variant.patches), [
        (s.patch.file, s.state) for s in states]
    assert all(p.upstream_markers for p in variant.patches)  # every patch can be "upstream"

    # the release itself: nothing upstream, nothing applied
    subprocess.run(["git", "checkout", "-q", f"v{release}"], cwd=clone, check=True)
    base = variant_marker_states(variant, read_worktree(clone, files))
    assert [s.state for s in base] == ["not-applied"] * len(variant.patches)
    subprocess.run(["git", "checkout", "-q", "-"], cwd=clone, check=True)

    capsys.readouterr()
    head = git(clone, "rev-parse", "HEAD").stdout.strip()
    rc = run(["apply", "--branch", f"vllm-{release}", "--repo", str(clone), "--base", head,
              "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["status"] == "not-needed", doc
    assert "not needed" in doc["message"]
    assert git(clone, "rev-parse", "HEAD").stdout.strip() == head  # nothing written


SRC = '''
class Impl:
    can_return_lse_for_decode = False
    supports_dcp: bool = True

    def run(self, q):
        kwargs = dict(q=q, lse=None)
        kwargs["seq_lens"] = self.counts
        extra = {"return_lse": True}
        launcher(**kwargs, **extra)
        other(seq_lens=None)
'''


def test_marker_kinds_on_source_text() -> None:
    # a class attribute: the value counts, not the name ("= False" is not "= True")
    assert not holds("class_attr", {"cls": "Impl", "name": "can_return_lse_for_decode",
                                    "value": True}, SRC)
    assert holds("class_attr", {"cls": "Impl", "name": "supports_dcp", "value": True}, SRC)
    # keywords through kwargs dicts, built with dict(), item assignment or a literal
    assert holds("call_kwarg", {"func": "launcher", "name": "seq_lens", "not_in": [None]}, SRC)
    assert holds("call_kwarg", {"func": "launcher", "name": "return_lse", "value": True}, SRC)
    assert not holds("call_kwarg", {"func": "launcher", "name": "lse", "not_in": [None]}, SRC)
    assert not holds("call_kwarg", {"func": "other", "name": "seq_lens", "not_in": [None]}, SRC)
    assert holds("function", {"name": "run", "cls": "Impl", "calls": "launcher"}, SRC)
    assert not holds("function", {"name": "run", "cls": "Impl", "calls": "missing"}, SRC)
    assert holds("assign", {"scope": "run", "name": "kwargs"}, SRC)
    assert not holds("class_attr", {"cls": "Impl", "name": "x"}, "def broken(:\n")
