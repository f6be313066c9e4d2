"""``apply``/``status``/``verify`` on trees built from real fork files (issue 30).

Each scenario of tests/data/fork-files/manifest.json is the nearest vLLM release (a git tree of
the cached PyPI wheel) with real files of local-inference-lab/vllm (and one other fork) committed
over it on ``main``. Nothing is mocked. The held-out scenarios (``held-out-*``) were run once,
after the rules were written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sm120kit.cli import run
from sm120kit.patchset.snapshot import snapshot_repo_state
from tests.support.forkfiles import release_clone, scenario_repo
from tests.support.gitrepo import FORK_IDENTITY, git

pytestmark = pytest.mark.network  # release trees from PyPI wheels


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict, str]:
    capsys.readouterr()
    rc = run(list(argv))
    out, err = capsys.readouterr()
    return rc, json.loads(out), err


def test_pr60_like_fork_already_supports_dcp(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    repo = scenario_repo(tmp_path, "pr60-like")
    before = snapshot_repo_state(repo)
    rc, doc, err = cli(capsys, "apply", "--branch", "vllm-0.25.1", "--repo", str(repo),
                       "--base", "main", "--json")
    assert rc == 0 and doc["status"] == "already-supports-dcp", (err, doc)
    assert snapshot_repo_state(repo) == before  # nothing written
    fd = doc["fork_dcp"]
    assert "triton_convert_dcp_global_index_to_local_index" in fd["evidence"]["rank-local top-k"]
    gaps = {g["name"]: g for g in fd["gaps"]}
    assert {"lse_base_on_e = False", "zeroing of rows with no local keys"} <= set(gaps)
    assert all(g["why"] and g["fix"] for g in gaps.values())
    assert "workspace taken at init" not in gaps  # the fork takes it in __init__
    # status agrees (exit 0), and no patch of its own DCP is reported as a conflict to fix
    rc, st, _ = cli(capsys, "status", "--branch", "vllm-0.25.1", "--repo", str(repo), "--json")
    assert rc == 0 and st["summary"] == "supports-dcp"
    assert [p["state"] for p in st["patches"]][2:4] == ["in-fork", "in-fork"]
    # the parts that apply cleanly can be applied alone
    clean = fd["clean_patches"]
    assert clean, fd
    rc, doc, err = cli(capsys, "apply", "--branch", "vllm-0.25.1", "--repo", str(repo),
                       "--base", "main", "--only", ",".join(map(str, clean)), "--json")
    assert rc == 0 and doc["status"] == "applied", (err, doc)
    log = git(repo, "log", "--format=%s", "main..sm120kit/dcp-vllm-0.25.1").splitlines()
    assert len(log) == len(clean)
    # verify judges the fork by its own DCP: what it still lacks fails by name, the rest skips
    rc, v, _ = cli(capsys, "verify", "--repo", str(repo), "--branch", "vllm-0.25.1", "--base",
                   "main", "--json")
    states = {m["patch"][:4]: m for m in v["markers"]}
    assert v["fork_dcp"] and states["0003"]["status"] == states["0004"]["status"] == "skip"
    failing = {k for k, m in states.items() if m["status"] == "fail"}
    assert failing == {gaps[g]["patch"][:4] for g in gaps} - {f"{n:04d}" for n in clean}
    assert rc == 2 and any("zeroing of rows" in x for x in states["0005"]["missing"])


def test_hard_coded_dcp_rank_is_not_upstream(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    repo = scenario_repo(tmp_path, "hardcoded-rank")
    text = (repo / "vllm/v1/attention/backends/mla/flashinfer_mla_sparse_sm120.py").read_text()
    assert "dcp_size=1" in text and "dcp_rank=0" in text  # the decoy is there
    rc, st, _ = cli(capsys, "status", "--branch", "vllm-0.29.0", "--repo", str(repo), "--json")
    assert [p["state"] for p in st["patches"]][2:5] == ["conflict"] * 3, st
    assert "upstream" not in {p["state"] for p in st["patches"]} and rc == 2
    rc, doc, _ = cli(capsys, "apply", "--branch", "vllm-0.29.0", "--repo", str(repo),
                     "--base", "main", "--from", "vllm-0.29.0", "--json")
    assert doc["status"] not in ("already-applied", "not-needed", "already-supports-dcp")


def test_missing_name_and_ignored_lse_base_fail_verify(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    repo = scenario_repo(tmp_path, "may-tree")
    rc, doc, err = cli(capsys, "apply", "--branch", "vllm-0.25.1", "--repo", str(repo),
                       "--base", "main", "--json")
    assert rc == 0 and doc["status"] == "applied", err
    rc, v, _ = cli(capsys, "verify", "--repo", str(repo), "--branch", "vllm-0.25.1", "--base",
                   "main", "--json")
    assert rc == 2 and v["status"] == "fail"
    assert v["checked"].startswith("branch sm120kit/dcp-vllm-0.25.1")
    found = {(t["check"], t["name"], t["file"]) for t in v["tree"]}
    assert ("import", "triton_filter_and_convert_dcp_index",
            "vllm/v1/attention/backends/mla/flashinfer_mla_sparse_sm120.py") in found
    assert ("lse-base", "lse_base_on_e",
            "vllm/model_executor/layers/attention/mla_attention.py") in found
    assert all(t["fix"] for t in v["tree"])


def test_release_tree_verifies_as_documented(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The documented `verify --repo` works right after `apply`, without a checkout."""
    repo = release_clone(tmp_path, "0.25.1")
    rc, doc, err = cli(capsys, "apply", "--branch", "vllm-0.25.1", "--repo", str(repo), "--json")
    assert rc == 0 and doc["status"] == "applied", err
    rc, v, _ = cli(capsys, "verify", "--repo", str(repo), "--branch", "vllm-0.25.1", "--json")
    assert rc == 0 and v["tree"] == [] and v["status"] == "ok", v


def test_moved_base_is_never_already_applied(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    repo = release_clone(tmp_path, "0.34.0")
    args = ("apply", "--branch", "vllm-0.34.0", "--repo", str(repo), "--base", "main", "--json")
    rc, doc, _ = cli(capsys, *args)
    assert rc == 0 and doc["status"] == "applied"
    (repo / "vllm" / "FORK.md").write_text("the fork moves on\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "fork: move on", identity=FORK_IDENTITY)
    old = git(repo, "rev-parse", "sm120kit/dcp-vllm-0.34.0").strip()
    rc, doc, _ = cli(capsys, *args)
    assert rc == 1 and doc["status"] == "base-moved" and "--reapply" in doc["note"]
    assert git(repo, "rev-parse", "sm120kit/dcp-vllm-0.34.0").strip() == old  # untouched
    rc, doc, _ = cli(capsys, *args, "--reapply")
    assert rc == 0 and doc["status"] == "applied"
    git(repo, "merge-base", "--is-ancestor", "main", "sm120kit/dcp-vllm-0.34.0")
    rc, doc, _ = cli(capsys, *args)
    assert rc == 0 and doc["status"] == "already-applied"


def test_held_out_glm_partition_return_lse_is_not_upstream(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = scenario_repo(tmp_path, "held-out-glm-partition")
    rc, st, _ = cli(capsys, "status", "--branch", "vllm-0.29.0", "--repo", str(repo), "--json")
    assert st["patches"][4]["state"] != "upstream" and st["summary"] != "supports-dcp"


def test_held_out_other_fork_with_dcp(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    repo = scenario_repo(tmp_path, "held-out-glm52-dcp")
    rc, doc, err = cli(capsys, "apply", "--branch", "vllm-0.25.1", "--repo", str(repo),
                       "--base", "main", "--json")
    assert rc == 0 and doc["status"] == "already-supports-dcp", (err, doc)
    assert "lse_base_on_e = False" in {g["name"] for g in doc["fork_dcp"]["gaps"]}


def test_fork_alias_git_am_path_names_flashinfer_and_verify(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The fork alias on a checkout whose branch git am can take (the 0.25.1 sources): the
    success path prints the FlashInfer minimum of the v0.25 family and the verify command."""
    repo = release_clone(tmp_path, "0.25.1")
    git(repo, "branch", "codex/eldritch-enlightenment-release-20260627", "main")
    rc, doc, err = cli(capsys, "apply", "--branch", "eldritch-20260627", "--repo", str(repo),
                       "--json")
    assert rc == 0 and doc["status"] == "applied", (err, doc)
    assert doc["requirement"]["minimum"] == "0.6.14"
    assert "sm120kit verify --repo" in doc["note"]
    verify = doc["note"].split("`")[1].split()[1:]
    rc, v, _ = cli(capsys, *verify, "--json")
    assert rc == 0 and v["status"] == "ok", v


def test_cached_fork_clone_follows_its_branch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Outside a checkout the fork alias works in a cached clone; when the fork's branch moves
    on, the next run says so (never "already applied") and --reapply ports onto the new tip."""
    import shutil

    from sm120kit.paths import cache_dir
    from tests.port.test_fork_alias import ALIAS, BRANCH, drift_eldritch, use_remote
    from tests.support.forks import make_fork

    src = make_fork(tmp_path / "src", "0.25.1", drift_eldritch, branch=BRANCH)
    bare = tmp_path / "vllm.git"
    git(tmp_path, "clone", "-q", "--bare", str(src), str(bare))
    use_remote(monkeypatch, tmp_path, bare.as_uri())
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    monkeypatch.chdir(outside)
    clone = cache_dir() / "forks" / ALIAS
    shutil.rmtree(clone, ignore_errors=True)
    try:
        rc, doc, err = cli(capsys, "apply", "--branch", ALIAS, "--json")
        assert rc == 0 and doc["status"] == "ported", err
        (src / "vllm" / "FORK.md").write_text("the fork moves on\n")
        git(src, "add", "-A")
        git(src, "commit", "-q", "-m", "fork: move on", identity=FORK_IDENTITY)
        git(src, "push", "-q", str(bare), BRANCH)
        rc, doc, err = cli(capsys, "apply", "--branch", ALIAS, "--json")
        assert rc == 1 and doc["status"] == "base-moved", (err, doc)
        rc, doc, err = cli(capsys, "apply", "--branch", ALIAS, "--reapply", "--json")
        assert rc == 0 and doc["status"] == "ported", (err, doc)
        tip = git(bare, "rev-parse", BRANCH).strip()
        assert doc["base"] == tip
        git(clone, "merge-base", "--is-ancestor", tip, f"sm120kit/dcp-{ALIAS}")
        rc, doc, err = cli(capsys, "apply", "--branch", ALIAS, "--json")
        assert rc == 0 and doc["status"] == "already-applied", (err, doc)
    finally:
        shutil.rmtree(clone, ignore_errors=True)
