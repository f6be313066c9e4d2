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
    objects = git(repo, "count-objects", "-v")
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
    assert snapshot_repo_state(repo) == before  # detection wrote nothing, not even an object
    assert git(repo, "count-objects", "-v") == objects
    # the fork lacks the release's blobs (git am -3 cannot take them): those patches alone are
    # 3-way ported from the release, the others left out
    rc, doc, err = cli(capsys, "apply", "--branch", "vllm-0.25.1", "--repo", str(repo),
                       "--base", "main", "--only", ",".join(map(str, clean)), "--json")
    assert rc == 0 and doc["status"] == "ported" and doc["only"] == clean, (err, doc)
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


def _user_edits(repo: Path) -> None:
    """What a user does by hand after reading the port guide of the @2c7fc55 fork file (the
    guide's three steps, written here as that user would; the test checks the product's guide,
    its --only command and verify around them)."""
    path = repo / "vllm/v1/attention/backends/mla/flashinfer_mla_sparse_sm120.py"
    text = path.read_text()
    edits = [
        ("            dcp_size=1,\n            dcp_rank=0,\n",
         "            dcp_size=self.dcp_world_size,\n            dcp_rank=self.dcp_rank,\n"
         "            cp_kv_cache_interleave_size=attn_metadata.cp_kv_cache_interleave_size,\n"),
        ("        output = q.new_empty(\n            (q.shape[0], self.num_heads, "
         "self.kv_lora_rank),\n",
         "        lse = None\n        if self.need_to_return_lse_for_decode:\n"
         "            lse = q.new_empty((q.shape[0], q.shape[1]), dtype=torch.float32)\n"
         "        output = q.new_empty(\n            (q.shape[0], q.shape[1], self.kv_lora_rank),\n"),
        ("            kv_scale_format=self.kv_scale_format,\n        )\n"
         "        return out.squeeze(1)[:num_actual_toks], None\n",
         "            kv_scale_format=self.kv_scale_format,\n            lse=lse,\n"
         "            return_lse=lse is not None,\n        )\n"
         "        if lse is not None:\n            out, kernel_lse = out\n"
         "            lse.copy_(kernel_lse.reshape(lse.shape))\n"
         "        out = out.squeeze(1)\n        empty_rows = topk_lens == 0\n"
         "        out.masked_fill_(empty_rows.view(-1, 1, 1), 0.0)\n"
         "        if lse is not None:\n"
         "            lse.masked_fill_(empty_rows.view(-1, 1), float('-inf'))\n"
         "            lse = lse[:num_actual_toks]\n"
         "        return out[:num_actual_toks], lse\n"),
    ]
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path.write_text(text)


def test_pre_dcp_fork_conflict_says_what_to_do_and_then_verifies(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The pre-DCP fork file @2c7fc55 rewrote the statements patches 3-5 rewrite (top-k
    conversion, seq_lens, output and return): the port conflicts in forward_mqa and says, from
    the fork's code, what is done and what to change where; the rest applies with --only, and
    after the user's edits the result verifies."""
    repo = scenario_repo(tmp_path, "hardcoded-rank")
    rc, doc, _ = cli(capsys, "apply", "--branch", "vllm-0.29.0", "--repo", str(repo),
                     "--base", "main", "--from", "vllm-0.29.0", "--json")
    assert rc == 2 and doc["status"] == "conflict"
    assert {c["definition"] for c in doc["conflicts"]} == {
        "FlashInferMLASparseSM120Impl.forward_mqa"}
    steps = {s["patch"]: s for s in doc["guide"]}
    assert steps["0003"]["state"] == "to-do" and steps["0003"]["line"] == 155
    assert "dcp_size=1, dcp_rank=0" in steps["0003"]["what"]
    assert steps["0004"]["state"] == "done-in-fork"
    assert steps["0005"]["state"] == "to-do" and "[:num_actual_toks]" in steps["0005"]["what"]
    assert doc["clean_patches"] == [1, 2, 6]
    report = Path(doc["report"]).read_text()
    assert "## What to do" in report and "--only 1,2,6" in report
    # the eldritch alias (ported from v0.25) names the nearer release family
    rc, el, _ = cli(capsys, "apply", "--branch", "eldritch-20260627", "--repo", str(repo),
                    "--base", "main", "--json")
    assert rc == 2 and el["nearest"] == "vllm-0.29.0"
    rc, doc, err = cli(capsys, "apply", "--branch", "vllm-0.29.0", "--repo", str(repo),
                       "--base", "main", "--only", "1,2,6", "--json")
    assert rc == 0 and doc["status"] == "applied", err
    args = ("verify", "--repo", str(repo), "--branch", "vllm-0.29.0", "--base", "main", "--json")
    rc, v, _ = cli(capsys, *args)
    assert rc == 2 and {m["patch"][:4] for m in v["markers"] if m["status"] == "fail"} == {
        "0003", "0004", "0005"}
    git(repo, "checkout", "-q", "sm120kit/dcp-vllm-0.29.0")
    _user_edits(repo)
    git(repo, "commit", "-q", "-am", "DCP in forward_mqa, as the port guide says",
        identity=FORK_IDENTITY)
    git(repo, "checkout", "-q", "main")
    rc, v, _ = cli(capsys, *args)
    assert rc == 0 and v["status"] == "ok" and v["fork_dcp"], v


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
