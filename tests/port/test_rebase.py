"""Maintainer workflow on real releases: ``rebase`` (3-way) and ``refresh``, plus ``revert`` of a
result branch. The packaged ``patches/`` is never written: every run writes a copy (``-o``) and
the tests check that ``patches/`` is byte-identical afterwards.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from sm120kit.cli import run
from sm120kit.models.series import load_series
from sm120kit.patchset.release import release_repo
from sm120kit.patchset.snapshot import snapshot_repo_state
from sm120kit.paths import patches_dir
from tests.support.forks import SM, drift_unrelated, git, make_fork

pytestmark = pytest.mark.network  # builds vLLM release trees/repositories (PyPI wheels)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict, str]:
    capsys.readouterr()
    rc = run(list(argv))
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if out.strip().startswith("{") else {}), err


def tree_hash(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_rebase_onto_031_shows_where_it_conflicts(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    before = tree_hash(patches_dir())
    rc, doc, err = cli(capsys, "rebase", "--onto", "vllm-0.31.0", "--from", "v0.32-0.33",
                       "--report-dir", str(tmp_path / "report"), "-o", str(tmp_path / "out"),
                       "--json")
    assert rc == 2, err
    assert doc["status"] == "conflict"
    port = doc["port"]
    assert port["source"]["variant"] == "v0.32-0.33"
    files = {c["file"] for c in port["conflicts"]}
    assert files == {SM}  # the workspace and warmup patches merge; the SM120 forward does not
    first = port["conflicts"][0]
    assert first["patch"].startswith("0003-") and first["hunk"].startswith("@@ -")
    # the conflict is the 0.32+ flat_kv_row_view / BLOCK_STRIDE_ROWS conversion (research R5)
    assert "flat_kv_row_view" in first["base"] and "flat_kv_row_view" not in first["ours"]
    report = (tmp_path / "report" / "report.md").read_text()
    assert SM in report and first["hunk"] in report and "BLOCK_STRIDE_ROWS" in report
    assert not (tmp_path / "out").exists()
    assert tree_hash(patches_dir()) == before


def test_rebase_onto_drifted_fork_writes_new_variant(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    fork = make_fork(tmp_path / "fork", "0.33.0", drift_unrelated)
    state = snapshot_repo_state(fork, include_files=True)
    before = tree_hash(patches_dir())
    out = tmp_path / "patches-new"
    rc, doc, err = cli(capsys, "rebase", "--onto", "main", "--repo", str(fork), "--from",
                       "v0.32-0.33", "--name", "fork-main", "-o", str(out), "--json")
    assert rc == 0, err
    assert doc["status"] == "written" and doc["variant"] == "fork-main"
    assert snapshot_repo_state(fork, include_files=True) == state  # no branch, nothing touched
    assert tree_hash(patches_dir()) == before

    series = load_series(out)
    new = series.variant("fork-main")
    new.check_checksums()
    old = load_series().variant("v0.32-0.33")
    assert [p.subject for p in new.patches] == [p.subject for p in old.patches]
    assert [p.applied_markers for p in new.patches] == [p.applied_markers for p in old.patches]
    for p in new.patches:
        text = new.patch_path(p).read_text()
        assert re.search(r"^index [0-9a-f]{40}\.\.[0-9a-f]{40}", text, re.M)  # --full-index
        assert "\nOrigin: " in text and "\nUpstream-Status: " in text
        assert "\nApplies-To: main\n" in text
    # the new variant applies to the fork with plain `git am`, and gives the ported tree
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(fork), str(clone))
    git(clone, "-c", "user.name=x", "-c", "user.email=x@x", "am",
        *[str(new.patch_path(p)) for p in new.patches])
    for p in old.patches:
        for m in p.applied_markers:
            assert m.text in (clone / m.file).read_text()
    assert "_fork_build_tag" in (clone / SM).read_text()
    rc, vdoc, err = cli(capsys, "verify", "--repo", str(clone), "--branch", "vllm-0.33.0",
                        "--base", "main", "--json")
    assert rc == 0, (err, vdoc)


def test_refresh_regenerates_a_variant_from_a_branch(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    clone = tmp_path / "vllm"
    git(tmp_path, "clone", "-q", str(release_repo("0.26.0")), str(clone))
    assert run(["apply", "--branch", "vllm-0.26.0", "--repo", str(clone)]) == 0
    before = tree_hash(patches_dir())
    out = tmp_path / "refreshed"
    rc, doc, err = cli(capsys, "refresh", "v0.26-0.29", "--from", "sm120kit/dcp-vllm-0.26.0",
                       "--repo", str(clone), "-o", str(out), "--json")
    assert rc == 0, err
    assert tree_hash(patches_dir()) == before
    old = load_series().variant("v0.26-0.29")
    new = load_series(out).variant("v0.26-0.29")
    new.check_checksums()
    assert [p.file for p in new.patches] == [p.file for p in old.patches]
    for a, b in zip(old.patches, new.patches, strict=True):
        # same change, same message; only the commit id in the "From <sha>" line may differ
        ta = old.patch_path(a).read_text().split("\n", 1)[1]
        tb = new.patch_path(b).read_text().split("\n", 1)[1]
        assert ta == tb
        assert a.files == b.files and a.applied_markers == b.applied_markers

    # a branch missing part of the series is refused
    git(clone, "branch", "partial", "sm120kit/dcp-vllm-0.26.0~1")
    rc, _, err = cli(capsys, "refresh", "v0.26-0.29", "--from", "partial", "--repo", str(clone),
                     "-o", str(tmp_path / "partial-out"))
    assert rc == 2 and "5 commits but v0.26-0.29 has 6 patches" in err


def test_revert_deletes_the_result_branch(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    clone = tmp_path / "vllm"
    git(tmp_path, "clone", "-q", str(release_repo("0.29.0")), str(clone))
    assert run(["apply", "--branch", "vllm-0.29.0", "--repo", str(clone)]) == 0
    tip = git(clone, "rev-parse", "sm120kit/dcp-vllm-0.29.0").strip()
    git(clone, "branch", "mine", "v0.29.0")
    rc, _, err = cli(capsys, "revert", "--repo", str(clone), "--into", "mine", "--branch",
                     "vllm-0.29.0")
    assert rc == 2 and "does not carry" in err  # never deletes a branch without the series
    rc, doc, err = cli(capsys, "revert", "--repo", str(clone), "--branch", "vllm-0.29.0", "--json")
    assert rc == 0, err
    assert doc["commit"] == tip
    assert git(clone, "branch", "--list", "sm120kit/dcp-vllm-0.29.0") == ""
    rc, _, err = cli(capsys, "revert", "--repo", str(clone), "--branch", "vllm-0.29.0")
    assert rc == 2 and "nothing to revert" in err


def test_rebase_write_updates_a_checkouts_patches_only(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """``--write`` goes into patches/ of a source checkout (here a tmp git copy of it)."""
    import shutil

    fork = make_fork(tmp_path / "fork", "0.33.0", drift_unrelated)
    loose = tmp_path / "loose-patches"
    shutil.copytree(patches_dir(), loose)
    monkeypatch.setenv("SM120KIT_PATCHES", str(loose))
    rc, _, err = cli(capsys, "rebase", "--onto", "main", "--repo", str(fork), "--from",
                     "v0.32-0.33", "--name", "fork-main", "--write")
    assert rc == 2 and "--write updates patches/ of an sm120kit source checkout" in err

    checkout = tmp_path / "sm120kit-src"
    shutil.copytree(patches_dir(), checkout / "patches")
    git(checkout, "init", "-q")
    monkeypatch.setenv("SM120KIT_PATCHES", str(checkout / "patches"))
    rc, doc, err = cli(capsys, "rebase", "--onto", "main", "--repo", str(fork), "--from",
                       "v0.32-0.33", "--name", "fork-main", "--write", "--json")
    assert rc == 0, err
    assert Path(doc["output"]) == checkout / "patches"
    written = load_series(checkout / "patches").variant("fork-main")
    written.check_checksums()
    assert len(written.patches) == 6
