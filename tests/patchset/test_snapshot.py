"""``snapshot_repo_state``: the fingerprint other engines reuse to prove a failure changed nothing."""

from __future__ import annotations

from pathlib import Path

from sm120kit.patchset.snapshot import snapshot_diff, snapshot_repo_state
from tests.support.gitrepo import git
from tests.support.paths import SM120


def test_snapshot_sees_each_kind_of_change(checkout: Path, tmp_path: Path) -> None:
    s0 = snapshot_repo_state(checkout, include_files=True)
    assert snapshot_repo_state(checkout, include_files=True) == s0
    f = checkout / SM120
    f.write_text(f.read_text() + "# x\n")
    s1 = snapshot_repo_state(checkout, include_files=True)
    assert snapshot_diff(s0, s1) == ["files"]
    git(checkout, "add", SM120)
    s2 = snapshot_repo_state(checkout, include_files=True)
    assert snapshot_diff(s1, s2) == ["index"]
    git(checkout, "stash", "-q")
    s3 = snapshot_repo_state(checkout, include_files=True)
    # (the index may also differ from s0 in its stat data after the stash rewrote it)
    assert {"refs", "stash"} <= set(snapshot_diff(s0, s3)) <= {"refs", "stash", "index"}
    git(checkout, "branch", "b")
    assert "refs" in snapshot_diff(s3, snapshot_repo_state(checkout))
    git(checkout, "config", "x.y", "z")
    assert "config" in snapshot_diff(s3, snapshot_repo_state(checkout))
    s4 = snapshot_repo_state(checkout)
    git(checkout, "worktree", "add", "-q", "--detach", str(tmp_path / "w"))
    assert snapshot_diff(s4, snapshot_repo_state(checkout)) == ["worktrees"]
    git(checkout, "checkout", "-q", "b")
    s5 = snapshot_repo_state(checkout)
    assert s5.head == s4.head and s5.head_ref == "refs/heads/b"
