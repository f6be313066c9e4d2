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
