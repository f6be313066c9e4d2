"""3-way port onto forks with real drift (made from vLLM 0.33.0's real sources).

The forks' history lacks the release blobs, so ``git am -3`` cannot apply the variant; the CLI's
``apply --from`` then ports it. (a) unrelated imports/methods and (b) a renamed variable in a
context line port cleanly and ``sm120kit verify`` passes; (c) an edited patched line is refused
with a report and the repository is byte-identical (HEAD, index, refs, stash, worktrees, config,
every working-tree file).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sm120kit.cli import run
from sm120kit.models.series import load_series
from sm120kit.patchset.port import port_series
from sm120kit.patchset.release import release_tree
from sm120kit.patchset.snapshot import snapshot_repo_state
from tests.support.forks import (
    SM,
    WS,
    WU,
    blob_present,
    drift_patched_lines,
    drift_renamed_context,
    drift_unrelated,
    git,
    make_fork,
)

pytestmark = pytest.mark.network  # builds vLLM release trees/repositories (PyPI wheels)

VERSION = "0.33.0"
ALIAS = f"vllm-{VERSION}"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict, str]:
    capsys.readouterr()
    rc = run(list(argv))
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if out.strip().startswith("{") else {}), err


def assert_no_release_blobs(fork: Path) -> None:
    tree = release_tree("vllm", VERSION)
    variant = load_series().variant(load_series().targets[ALIAS].variant)
    for rel in variant.touched_files():
        assert not blob_present(fork, (tree / rel).read_bytes()), rel


def assert_git_am_fails(fork: Path, tmp_path: Path) -> None:
    """The variant does not apply directly (checked in a throwaway clone)."""
    clone = tmp_path / "am-probe"
    git(tmp_path, "clone", "-q", str(fork), str(clone))
    series = load_series()
    variant = series.variant(series.targets[ALIAS].variant)
    proc = subprocess.run(
        ["git", "-c", "user.name=x", "-c", "user.email=x@x", "am", "-3",
         *[str(variant.patch_path(p)) for p in variant.patches]],
        cwd=clone, capture_output=True, text=True)
    assert proc.returncode != 0


@pytest.mark.parametrize("drift", [drift_unrelated, drift_renamed_context],
                         ids=["a-unrelated-methods-imports", "b-renamed-context-variable"])
def test_drifted_fork_ports_cleanly_and_verifies(drift, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    fork = make_fork(tmp_path / "fork", VERSION, drift)
    assert_no_release_blobs(fork)
    assert_git_am_fails(fork, tmp_path)
    head = git(fork, "rev-parse", "HEAD").strip()
    state = snapshot_repo_state(fork, include_files=True)
    rc, doc, err = cli(capsys, "apply", "--branch", ALIAS, "--repo", str(fork), "--base", "main",
                       "--from", ALIAS, "--dry-run", "--json")
    assert rc == 1 and doc["status"] == "would-port", err  # dry run: ports, creates nothing
    assert snapshot_repo_state(fork, include_files=True) == state

    rc, doc, err = cli(capsys, "apply", "--branch", ALIAS, "--repo", str(fork), "--base", "main",
                       "--from", ALIAS, "--json")
    assert rc == 0, err
    assert doc["status"] == "ported" and doc["branch"] == f"sm120kit/dcp-{ALIAS}"
    assert doc["source"]["release"] == VERSION
    # HEAD and the working tree were not touched; the result is a new branch on top of main
    assert git(fork, "rev-parse", "HEAD").strip() == head
    assert git(fork, "status", "--porcelain") == ""
    series = load_series()
    variant = series.variant(series.targets[ALIAS].variant)
    log = git(fork, "log", "--format=%s%x00%an", f"main..sm120kit/dcp-{ALIAS}").splitlines()
    assert [ln.split("\0")[0] for ln in reversed(log)] == [p.subject for p in variant.patches]
    assert {ln.split("\0")[1] for ln in log} == {"sm120kit"}  # authors kept from the patches
    body = git(fork, "log", "-1", "--format=%B", f"sm120kit/dcp-{ALIAS}~5")
    assert "Origin:" in body and "Upstream-Status:" in body and "Applies-To:" in body

    git(fork, "checkout", "-q", f"sm120kit/dcp-{ALIAS}")
    rc, vdoc, err = cli(capsys, "verify", "--repo", str(fork), "--branch", ALIAS, "--base", "main",
                        "--json")
    assert rc == 0, (err, vdoc)
    if drift is drift_unrelated:  # the fork's own changes survive the port
        assert "_fork_build_tag" in (fork / SM).read_text()
        assert "def fork_backend_note" in (fork / WS).read_text()
        assert "fork_warmup_banner" in (fork / WU).read_text()
    else:
        assert "prefill_request_id" in (fork / WU).read_text()
        assert "prefill_req_id" not in (fork / WU).read_text()
    rc, sdoc, _ = cli(capsys, "status", "--repo", str(fork), "--branch", ALIAS, "--json")
    assert rc == 0, sdoc


def test_edited_patch_lines_refused_with_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    fork = make_fork(tmp_path / "fork", VERSION, drift_patched_lines)
    before = snapshot_repo_state(fork, include_files=True)
    report_dir = tmp_path / "report"
    res = port_series(fork, ALIAS, "main", "", ALIAS, report_dir=report_dir)
    assert res.status == "conflict" and res.exit_code == 2
    assert res.report == report_dir / "report.md"
    (c,) = [c for c in res.conflicts if "fork: fixed heads" in c.ours]
    assert c.file == SM and c.patch.startswith("0005-")
    assert c.hunk and c.hunk.startswith("@@ -")
    assert "q.shape[1]" in c.theirs and "self.num_heads" in c.base
    text = res.report.read_text()
    assert SM in text and c.hunk in text and "fork: fixed heads" in text and "q.shape[1]" in text
    assert json.loads((report_dir / "report.json").read_text())["status"] == "conflict"
    assert snapshot_repo_state(fork, include_files=True) == before

    # the same through the CLI: exit 2, the report path printed, nothing changed
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the default report dir goes here
    rc, doc, err = cli(capsys, "apply", "--branch", ALIAS, "--repo", str(fork), "--base", "main",
                       "--from", ALIAS, "--json")
    assert rc == 2
    assert doc["status"] == "conflict" and Path(doc["report"]).is_file()
    assert Path(doc["report"]).parent.parent == tmp_path
    assert any(k["file"] == SM for k in doc["conflicts"])
    assert snapshot_repo_state(fork, include_files=True) == before


def test_nearest_release_is_picked_by_similarity(tmp_path: Path) -> None:
    """No --from: every verified release in the cache is scored against the fork's files."""
    fork = make_fork(tmp_path / "fork", VERSION, drift_unrelated)
    res = port_series(fork, ALIAS, "main", "sm120kit/nearest", None, dry_run=True)
    assert res.status == "would-port"
    assert res.source.release == VERSION
    scores = {c.release: c.score for c in res.candidates}
    assert len(scores) >= 2 and max(scores, key=lambda r: scores[r]) == VERSION
    assert git(fork, "branch", "--list", "sm120kit/nearest") == ""  # dry run: no branch
