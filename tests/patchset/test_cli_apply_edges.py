"""Issue 23 item 7, the patching edges a new user found, each through the real CLI on a real
clone of the vLLM 0.34.0 release repo with the small real test series (tests/support/miniseries):
``status`` after ``apply`` names the branch that holds the series, ``revert --branch`` for a
missing branch has a hint, and ``apply --json`` reports ``checked_out`` true on an idempotent
re-run when the result branch is the one checked out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sm120kit.cli import run
from tests.support.gitrepo import git
from tests.support.miniseries import MiniSeries

ALIAS = "vllm-0.34.0"
BRANCH = f"sm120kit/dcp-{ALIAS}"


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = run(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def test_status_after_apply_names_the_branch_holding_the_series(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli(capsys, "apply", "--branch", ALIAS, "--repo", str(checkout))[0] == 0
    rc, out, _ = _cli(capsys, "status", "--branch", ALIAS, "--repo", str(checkout))
    assert rc == 1  # the checkout itself is still the release: pending
    assert f"the series is applied on branch {BRANCH}" in out
    assert f"git checkout {BRANCH}" in out
    rc, out, _ = _cli(capsys, "status", "--branch", ALIAS, "--repo", str(checkout), "--json")
    assert json.loads(out)["series_branch"] == BRANCH
    git(checkout, "checkout", "-q", BRANCH)
    rc, out, _ = _cli(capsys, "status", "--branch", ALIAS, "--repo", str(checkout), "--json")
    assert rc == 0 and json.loads(out)["series_branch"] is None


def test_revert_missing_branch_has_a_hint(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = _cli(capsys, "revert", "--branch", ALIAS, "--repo", str(checkout), "--json")
    assert rc == 2
    doc = json.loads(out)
    assert doc["error"].startswith(f"no branch {BRANCH}")
    assert doc["hint"] == "no sm120kit/dcp-* branch here: nothing was applied in this checkout"
    assert f"hint: {doc['hint']}" in err
    assert _cli(capsys, "apply", "--branch", ALIAS, "--repo", str(checkout), "--into",
                "sm120kit/dcp-mine")[0] == 0
    rc, out, _ = _cli(capsys, "revert", "--branch", ALIAS, "--repo", str(checkout), "--json")
    assert rc == 2 and "sm120kit/dcp-mine" in json.loads(out)["hint"]


def test_apply_json_checked_out_on_idempotent_rerun(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = _cli(capsys, "apply", "--branch", ALIAS, "--repo", str(checkout), "--checkout",
                      "--json")
    assert rc == 0 and json.loads(out)["checked_out"] is True
    rc, out, _ = _cli(capsys, "apply", "--branch", ALIAS, "--repo", str(checkout), "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["status"] == "already-applied"
    assert doc["checked_out"] is True  # HEAD is the result branch, --checkout or not
    git(checkout, "checkout", "-q", "v0.34.0")
    rc, out, _ = _cli(capsys, "apply", "--branch", ALIAS, "--repo", str(checkout), "--json")
    assert rc == 0 and json.loads(out)["checked_out"] is False


def test_checkout_root_without_git_agrees_with_git(tmp_path: Path) -> None:
    """The top of a plain checkout is found without a git process; a subdirectory, a linked
    worktree, a repository whose config makes it bare, moves its work tree or includes other
    files is left to ``git rev-parse --show-toplevel`` (same answers as git's)."""
    from sm120kit.gitrun import run_git
    from sm120kit.patchset.targets import _own_top, checkout_root

    repo = tmp_path / "repo"
    (repo / "sub").mkdir(parents=True)
    run_git(["init", "-q", "-b", "main"], repo)
    (repo / "sub" / "f").write_text("x\n")
    run_git(["add", "."], repo)
    run_git(["-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "-m", "f"], repo)
    run_git(["worktree", "add", "-q", str(tmp_path / "wt")], repo)

    def git_top(p: Path) -> Path | None:
        proc = run_git(["rev-parse", "--show-toplevel"], p, check=False)
        return Path(proc.stdout.strip()) if proc.returncode == 0 else None

    assert _own_top(repo) == repo.resolve() == checkout_root(repo) == git_top(repo)
    assert _own_top(repo / "sub") is None and checkout_root(repo / "sub") == git_top(repo)
    assert _own_top(tmp_path / "wt") is None
    assert checkout_root(tmp_path / "wt") == git_top(tmp_path / "wt") == (tmp_path / "wt").resolve()
    for key, value in (("core.bare", "true"), ("core.worktree", str(tmp_path)),
                       ("include.path", str(tmp_path / "other.cfg"))):
        run_git(["config", key, value], repo)
        assert _own_top(repo) is None, key
        assert checkout_root(repo) == git_top(repo), key
        run_git(["config", "--unset", key], repo)
    assert _own_top(repo) == repo.resolve()
