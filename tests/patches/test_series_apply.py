"""``git am -3`` of each variant onto every release it lists, and what that leaves behind:
commits, touched files, markers after each patch, compile + pyflakes, reproducible export."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from pyflakes import checker

from sm120kit.models.series import Series
from tests.support.paths import ROOT

from .conftest import Applied, get_applied, git

VARIANTS = ["v0.30-0.31", "v0.32-0.33", "v0.34"]

pytestmark = pytest.mark.network  # builds vLLM release trees/repositories (PyPI wheels)



def test_git_am_applies_every_patch_cleanly(applied: Applied) -> None:
    tree, variant = applied.tree, applied.variant
    n = len(variant.patches)
    assert n == 6
    tag = git(tree, "rev-parse", f"v{applied.release}^{{commit}}").stdout.strip()
    assert git(tree, "rev-parse", f"HEAD~{n}").stdout.strip() == tag
    subjects = git(tree, "log", "--reverse", "--format=%s", f"v{applied.release}..HEAD").stdout
    assert subjects.splitlines() == [p.subject for p in variant.patches]
    authors = set(git(tree, "log", "--format=%an <%ae>", f"v{applied.release}..HEAD")
                  .stdout.splitlines())
    assert authors == {"sm120kit <sm120kit@localhost>"}
    assert git(tree, "status", "--porcelain").stdout == ""
    for k, patch in enumerate(variant.patches):
        rev = f"HEAD~{n - 1 - k}"
        touched = git(tree, "show", "--format=", "--name-only", rev).stdout.split()
        assert sorted(touched) == sorted(patch.files), patch.file
    changed = git(tree, "diff", "--name-only", f"v{applied.release}", "HEAD").stdout.split()
    assert sorted(changed) == sorted(variant.touched_files())


def _flakes(source: str, filename: str) -> Counter[tuple[str, tuple[object, ...]]]:
    w = checker.Checker(ast.parse(source, filename=filename), filename)
    return Counter((type(m).__name__, tuple(m.message_args)) for m in w.messages)


def test_patched_files_compile_and_add_no_pyflakes_findings(applied: Applied) -> None:
    for rel in applied.variant.touched_files():
        text = applied.patched(rel)
        compile(text, rel, "exec")
        new = _flakes(text, rel) - _flakes(applied.upstream(rel), rel)
        assert not new, f"{rel}: new pyflakes findings {dict(new)}"


def test_markers_follow_each_patch(applied: Applied) -> None:
    """After the first k patches exactly patches 1..k show their applied markers, and no
    upstream marker of a not-yet-applied patch shows (status would call it 'upstream')."""
    variant = applied.variant
    n = len(variant.patches)
    files = variant.touched_files()
    for k in range(n + 1):
        texts = {rel: applied.at(k, rel) for rel in files}
        for i, patch in enumerate(variant.patches, start=1):
            assert patch.applied_markers, patch.file
            present = [m.holds(texts[m.file]) for m in patch.applied_markers]
            assert present == [i <= k] * len(present), (k, patch.file, present)
            if i > k and patch.upstream_markers:  # status: upstream = all upstream markers
                assert not all(m.holds(texts[m.file]) for m in patch.upstream_markers), (
                    k, patch.file)
    for patch in variant.patches:  # the live trees agree with the git history
        assert all(m.present_in(applied.tree) for m in patch.applied_markers)
        assert not any(m.present_in(applied.base) for m in patch.applied_markers)
        for m in patch.upstream_markers:  # no single upstream marker exists in the release
            assert not m.present_in(applied.base), (patch.file, m.describe())


@pytest.mark.parametrize("variant_name", VARIANTS)
def test_reexport_reproduces_the_patch_files(
    variant_name: str, series: Series, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """On the variant's base release, ``scripts/series_tool.py export`` of the ``git am``
    result reproduces the shipped patch files and their manifest entries byte for byte (the
    fixture's ``git am`` runs as the authoring committer, so the commit ids match)."""
    variant = series.variant(variant_name)
    applied = get_applied(series, variant.base_release, tmp_path_factory)
    patches = tmp_path / "patches"
    patches.mkdir()
    shutil.copy(series.root / "manifest.json", patches / "manifest.json")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "series_tool.py"), "--patches-dir", str(patches),
         "export", "--repo", str(applied.tree), "--base", f"v{applied.release}",
         "--variant", variant.name],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr
    made = sorted((patches / variant.name).glob("*.patch"))
    assert [p.name for p in made] == [p.file for p in variant.patches]
    for path, patch in zip(made, variant.patches, strict=True):
        assert path.read_bytes() == variant.patch_path(patch).read_bytes(), patch.file
    shipped = json.loads((series.root / "manifest.json").read_text())
    regenerated = json.loads((patches / "manifest.json").read_text())
    assert regenerated == shipped
