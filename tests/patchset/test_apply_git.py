"""``sm120kit apply`` on real git checkouts of vLLM 0.34.0 with a small real series.

Every failure test fingerprints the checkout before and after (HEAD, index bytes, refs, stash,
worktree list, config bytes and every working-tree file) and requires them byte-identical.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path

import pytest

from sm120kit.cli import run
from tests.support.gitrepo import edit, git, state_fingerprint
from tests.support.miniseries import MiniSeries
from tests.support.paths import SM120, SPARSE_UTILS

ALIAS = "vllm-0.34.0"
BRANCH = f"sm120kit/dcp-{ALIAS}"


def _apply(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = run(["apply", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    rc, out, _ = _apply(capsys, *args, "--json")
    return rc, json.loads(out)


def _refresh_checksum(series: MiniSeries, patch: Path) -> None:
    data = series.manifest()
    for p in data["variants"]["v-test"]["patches"]:
        if p["file"] == patch.name:
            p["sha256"] = hashlib.sha256(patch.read_bytes()).hexdigest()
    series.write_manifest(data)


# --------------------------------------------------------------------------- success paths


def test_apply_creates_branch_and_leaves_checkout_alone(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = state_fingerprint(checkout)
    rc, doc = _json(capsys, "--branch", ALIAS, "--repo", str(checkout))
    assert rc == 0, doc
    assert doc["status"] == "applied" and doc["branch"] == BRANCH
    assert [p["state"] for p in doc["patches"]] == ["applied"] * 3
    after = state_fingerprint(checkout)
    # only the new branch differs; HEAD, index, files, worktrees, config are untouched
    assert after["refs"] != before["refs"]
    for key in ("head", "head_ref", "index", "stash", "worktrees", "config", "files", "worktree_dirs"):
        assert after[key] == before[key], key
    log = git(checkout, "log", "--format=%s|%an|%cn", f"v0.34.0..{BRANCH}").splitlines()
    assert log == [
        "sm120: note the workspace|Test Author|sm120kit",
        "sm120: pass per-token valid counts|Test Author|sm120kit",
        "sm120: report the decode LSE capability|Test Author|sm120kit",
    ]
    assert doc["commit"] == git(checkout, "rev-parse", BRANCH).strip()
    assert "sm120kit-test: workspace note" in git(checkout, "show", f"{BRANCH}:{SM120}")
    # re-apply: a no-op
    snap = state_fingerprint(checkout)
    rc, out, _ = _apply(capsys, "--branch", ALIAS, "--repo", str(checkout))
    assert rc == 0 and "already applied" in out
    assert state_fingerprint(checkout) == snap
    # re-apply with --checkout: nothing to apply, but the branch is checked out
    rc, doc = _json(capsys, "--branch", ALIAS, "--repo", str(checkout), "--checkout")
    assert rc == 0 and doc["status"] == "already-applied" and doc["checked_out"] is True
    assert git(checkout, "symbolic-ref", "--short", "HEAD").strip() == BRANCH


def test_apply_discovers_checkout_from_cwd_and_checks_out(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(checkout / "vllm" / "v1")
    rc, out, err = _apply(capsys, "--branch", ALIAS, "--checkout", "--into", "dcp")
    assert rc == 0, err
    assert "(checked out)" in out
    assert git(checkout, "symbolic-ref", "--short", "HEAD").strip() == "dcp"
    assert "# sm120kit-test: seq_lens" in (checkout / SM120).read_text()
    assert git(checkout, "status", "--porcelain") == ""
    # HEAD now carries the series: already applied, from inside the tree, even for a new --into
    rc, out, _ = _apply(capsys, "--branch", ALIAS, "--into", "other")
    assert rc == 0 and "already applied: HEAD" in out
    assert "other" not in git(checkout, "branch")


def test_dry_run_creates_nothing_and_exits_1(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = state_fingerprint(checkout)
    rc, doc = _json(capsys, "--branch", ALIAS, "--repo", str(checkout), "--dry-run")
    assert rc == 1 and doc["status"] == "would-apply"
    assert state_fingerprint(checkout) == before


def test_untracked_files_do_not_block(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (checkout / "notes.txt").write_text("mine\n")
    rc, _, err = _apply(capsys, "--branch", ALIAS, "--repo", str(checkout))
    assert rc == 0, err
    assert (checkout / "notes.txt").read_text() == "mine\n"


def test_upstream_has_it_is_not_needed(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = mini_series.manifest()
    for p in data["variants"]["v-test"]["patches"]:  # markers every 0.34.0 tree has
        p["upstream_markers"] = [{"file": SM120, "text": "class FlashInferMLASparseSM120Impl"}]
    mini_series.write_manifest(data)
    before = state_fingerprint(checkout)
    rc, out, _ = _apply(capsys, "--branch", ALIAS, "--repo", str(checkout))
    assert rc == 0 and "not needed" in out
    assert state_fingerprint(checkout) == before


def test_partly_upstream_applies_the_rest(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # pretend upstream merged patch 1: its change is in the base and its upstream marker matches
    edit(checkout / SM120, "    is_sparse = True\n",
         "    is_sparse = True\n    can_return_lse_for_decode = True  # upstream\n")
    git(checkout, "commit", "-qam", "upstream: lse")
    data = mini_series.manifest()
    data["variants"]["v-test"]["patches"][0]["upstream_markers"] = [
        {"file": SM120, "text": "can_return_lse_for_decode = True  # upstream"}]
    mini_series.write_manifest(data)
    rc, doc = _json(capsys, "--branch", ALIAS, "--repo", str(checkout), "--base", "HEAD")
    assert rc == 0, doc
    assert [p["state"] for p in doc["patches"]] == ["upstream", "applied", "applied"]


# --------------------------------------------------------------------------- failure paths


def _assert_refused(
    capsys: pytest.CaptureFixture[str], repo: Path, args: list[str], *needles: str
) -> str:
    before = state_fingerprint(repo)
    rc, out, err = _apply(capsys, *args)
    assert rc == 2, (out, err)
    for n in needles:
        assert n in err, (n, err)
    assert state_fingerprint(repo) == before
    return err


def test_dirty_tree_is_refused_and_listed(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (checkout / SPARSE_UTILS).write_text((checkout / SPARSE_UTILS).read_text() + "# wip\n")
    git(checkout, "add", SPARSE_UTILS)
    (checkout / SM120).write_text((checkout / SM120).read_text() + "# wip\n")
    _assert_refused(capsys, checkout, ["--branch", ALIAS, "--repo", str(checkout)],
                    "uncommitted changes", f"M {SM120}", f"M {SPARSE_UTILS}", "git stash")


def test_dirty_file_the_series_does_not_touch_is_left_alone(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An edit outside the series' files does not collide with the result branch: apply goes
    on (without refreshing the whole index) and leaves the edit, staged or not, as it was; with
    --checkout the whole tree must be clean, as the tree is switched."""
    other, staged = checkout / "vllm" / "__init__.py", checkout / "vllm" / "envs.py"
    other.write_text(other.read_text() + "# wip\n")
    staged.write_text(staged.read_text() + "# staged wip\n")
    git(checkout, "add", "vllm/envs.py")
    _assert_refused(capsys, checkout, ["--branch", ALIAS, "--repo", str(checkout), "--checkout"],
                    "uncommitted changes", "M vllm/__init__.py", "M vllm/envs.py")
    index_before = (checkout / ".git" / "index").read_bytes()
    rc, doc = _json(capsys, "--branch", ALIAS, "--repo", str(checkout))
    assert rc == 0 and doc["status"] == "applied", doc
    assert other.read_text().endswith("# wip\n") and staged.read_text().endswith("# staged wip\n")
    assert (checkout / ".git" / "index").read_bytes() == index_before
    assert git(checkout, "status", "--porcelain", "--untracked-files=no").split() == [
        "M", "vllm/__init__.py", "M", "vllm/envs.py"]
    assert "# wip" not in git(checkout, "show", f"{BRANCH}:vllm/__init__.py")


def test_stash_and_other_worktrees_survive_a_failure(
    mini_series: MiniSeries, checkout: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (checkout / SM120).write_text((checkout / SM120).read_text() + "# stashed\n")
    git(checkout, "stash", "-q")
    git(checkout, "worktree", "add", "-q", str(tmp_path / "side"), "-b", "side")
    (mini_series.patches[1]).write_text(mini_series.patches[1].read_text() + "\n")  # tamper
    _assert_refused(capsys, checkout, ["--branch", ALIAS, "--repo", str(checkout)], "checksum")
    assert "stash@{0}" in git(checkout, "stash", "list")


def test_conflict_names_patch_file_and_hunk(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the target's base differs in the line patch 1 anchors on: a real 3-way merge conflict
    edit(checkout / SM120, "    is_sparse = True\n", "    is_sparse = True  # local change\n")
    git(checkout, "commit", "-qam", "local change in the patched context")
    git(checkout, "tag", "-f", "v0.34.0")
    err = _assert_refused(
        capsys, checkout, ["--branch", ALIAS, "--repo", str(checkout)],
        "0001-sm120-report-the-decode-LSE-capability.patch", "conflicts", SM120,
        "hunk #1 (@@ -35,6 +35,7 @@", "nothing was changed",
    )
    assert SPARSE_UTILS not in err.split("hint:")[0]  # only the failing file is named
    rc, doc = _json(capsys, "--branch", ALIAS, "--repo", str(checkout))
    assert rc == 2 and doc["status"] == "failed"
    f = doc["failure"]
    assert f["index"] == 1 and f["reason"] == "conflict"
    assert [(h["file"], h["hunk"]) for h in f["hunks"]] == [(SM120, 1)]
    assert f["hunks"][0]["header"].startswith("@@ -35,6 +35,7 @@")


def test_later_patch_conflict_is_named(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Patch 2 conflicts after patch 1 applied: its 3-way preimage (release + patch 1) is absent."""
    edit(checkout / SM120, "            seq_lens=None,\n", "            seq_lens=None,  # local change\n")
    git(checkout, "commit", "-qam", "local change in the patched context")
    git(checkout, "tag", "-f", "v0.34.0")
    _assert_refused(
        capsys, checkout, ["--branch", ALIAS, "--repo", str(checkout), "--no-port"],
        "0002-sm120-pass-per-token-valid-counts.patch", SM120, "hunk #1 (@@ -244,7 +244,7 @@",
        "nothing was changed",
    )
    _assert_fallback_conflicts(capsys, checkout, "0002-sm120-pass-per-token-valid-counts.patch")


def test_missing_preimage_blobs_are_reported(
    mini_series: MiniSeries, tmp_path: Path, release34: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checkout that never had the release's blobs (own history, changed file): no 3-way base."""
    repo = tmp_path / "fork"
    repo.mkdir()
    (repo / "vllm").mkdir()
    src = (release34 / SM120).read_text().replace("            seq_lens=None,\n", "            seq_lens=None,  # fork\n")
    (repo / SM120).parent.mkdir(parents=True)
    (repo / SM120).write_text(src)
    (repo / SPARSE_UTILS).write_text((release34 / SPARSE_UTILS).read_text())
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "fork")
    git(repo, "tag", "v0.34.0")
    _assert_refused(capsys, repo, ["--branch", ALIAS, "--repo", str(repo), "--no-port"],
                    "0002-sm120-pass-per-token-valid-counts.patch", "preimage", SM120, "hunk #1")
    _assert_fallback_conflicts(capsys, repo, "0002-sm120-pass-per-token-valid-counts.patch")


def _assert_fallback_conflicts(capsys: pytest.CaptureFixture[str], repo: Path, patch: str) -> None:
    """Without --no-port, a missing preimage hands over to the 3-way port from the alias'
    release (no --from needed); the fork's edit of a patched line still conflicts there, the
    report names the patch and the definition, and nothing is changed."""
    before = state_fingerprint(repo)
    rc, doc = _json(capsys, "--branch", ALIAS, "--repo", str(repo))
    assert rc == 2 and doc.get("mode") == "port" and doc["status"] == "conflict", doc
    assert "lacks the preimage blobs of vllm" in doc["note"]
    assert any(c["patch"] == patch and c["file"] == SM120 for c in doc["conflicts"]), doc
    assert state_fingerprint(repo) == before


def test_tampered_patch_is_refused(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = mini_series.patches[2]
    p.write_text(p.read_text().replace("workspace note", "workspace n0te"))
    _assert_refused(capsys, checkout, ["--branch", ALIAS, "--repo", str(checkout)],
                    p.name, "fails its checksum")


def test_missing_patch_file_is_refused(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mini_series.patches[0].unlink()
    _assert_refused(capsys, checkout, ["--branch", ALIAS, "--repo", str(checkout)], "patch file missing")


def _evil(series: MiniSeries, old: str, new: str) -> None:
    p = series.patches[1]
    text = p.read_text()
    assert old in text
    p.write_text(text.replace(old, new))
    _refresh_checksum(series, p)  # the checksum matches: only the path check can stop it


@pytest.mark.parametrize(
    "new_path, why",
    [
        ("../outside.py", "'..'"),
        ("/tmp/sm120kit-evil.py", "absolute path"),
        ("vllm/../../outside.py", "'..'"),
        (".git/hooks/post-checkout", "inside .git"),
    ],
)
def test_patch_writing_outside_the_tree_is_refused(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str], new_path: str, why: str
) -> None:
    _evil(mini_series, f"a/{SPARSE_UTILS}", f"a/{new_path}")
    text = mini_series.patches[1].read_text().replace(f"b/{SPARSE_UTILS}", f"b/{new_path}")
    mini_series.patches[1].write_text(text)
    _refresh_checksum(mini_series, mini_series.patches[1])
    _assert_refused(capsys, checkout, ["--branch", ALIAS, "--repo", str(checkout)],
                    "writes outside the tree", why)
    assert not Path("/tmp/sm120kit-evil.py").exists()


def test_rename_to_outside_is_refused(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = mini_series.patches[1]
    header = f"diff --git a/{SPARSE_UTILS} b/{SPARSE_UTILS}\n"
    rename = (f"diff --git a/{SPARSE_UTILS} b/../escaped.py\nsimilarity index 100%\n"
              f"rename from {SPARSE_UTILS}\nrename to ../escaped.py\n")
    text = p.read_text()
    assert header in text
    p.write_text(text.replace(header, rename + header, 1))
    _refresh_checksum(mini_series, p)
    _assert_refused(capsys, checkout, ["--branch", ALIAS, "--repo", str(checkout)],
                    "writes outside the tree", "../escaped.py")


def test_path_through_a_symlink_in_the_target_is_refused(
    mini_series: MiniSeries, checkout: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # in the target's base, vllm/v1/attention/backends/mla is a symlink to a directory elsewhere
    mla = checkout / "vllm/v1/attention/backends/mla"
    elsewhere = tmp_path / "elsewhere"
    os.rename(mla, elsewhere)
    os.symlink(elsewhere, mla)
    git(checkout, "add", "-A")
    git(checkout, "commit", "-qm", "mla is a symlink now")
    git(checkout, "tag", "-f", "v0.34.0")
    _assert_refused(capsys, checkout, ["--branch", ALIAS, "--repo", str(checkout)],
                    "through a symlink", "vllm/v1/attention/backends/mla")


def test_read_only_target_file_is_refused_for_checkout(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = checkout / SM120
    target.chmod(0o444)
    try:
        _assert_refused(capsys, checkout, ["--branch", ALIAS, "--repo", str(checkout), "--checkout"],
                        "read-only", SM120, "nothing was changed")
        assert stat.S_IMODE(target.stat().st_mode) == 0o444
    finally:
        target.chmod(0o644)


def test_missing_base_ref_says_how_to_fetch(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    git(checkout, "tag", "-d", "v0.34.0")
    _assert_refused(capsys, checkout, ["--branch", ALIAS, "--repo", str(checkout)],
                    "base ref v0.34.0 is not in", "git fetch origin tag v0.34.0", "--base")
    _assert_refused(capsys, checkout, ["--branch", ALIAS, "--repo", str(checkout), "--base", "nope"],
                    "base ref nope is not in")


def test_unknown_alias_lists_known(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _assert_refused(capsys, checkout, ["--branch", "vllm-0.99.0", "--repo", str(checkout)],
                    "unknown branch alias 'vllm-0.99.0'", "vllm-0.34.0", "vllm-9.9.9")


def test_unsupported_alias_gives_reason(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _assert_refused(capsys, checkout, ["--branch", "vllm-9.9.9", "--repo", str(checkout)],
                    "not supported", "a test release that does not exist")


def test_existing_foreign_branch_is_refused(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    git(checkout, "branch", BRANCH)
    _assert_refused(capsys, checkout, ["--branch", ALIAS, "--repo", str(checkout)],
                    f"branch {BRANCH} exists", "--into")


def test_operation_in_progress_is_refused(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gd = checkout / ".git"
    (gd / "MERGE_HEAD").write_text(git(checkout, "rev-parse", "HEAD"))
    _assert_refused(capsys, checkout, ["--branch", ALIAS, "--repo", str(checkout)], "middle of a merge")


def test_not_a_vllm_checkout(
    mini_series: MiniSeries, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    rc, _, err = _apply(capsys, "--branch", ALIAS, "--repo", str(other))
    assert rc == 2 and "without a vllm/ package directory" in err
    rc, _, err = _apply(capsys, "--branch", ALIAS, "--repo", str(tmp_path / "missing"))
    assert rc == 2 and "no such directory" in err


def test_hooks_and_user_config_are_not_used(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user's applypatch hook must not run; their config file stays byte-identical."""
    hook = checkout / ".git" / "hooks" / "applypatch-msg"
    flag = checkout.parent / "hook-ran"
    hook.write_text(f"#!/bin/sh\ntouch {flag}\nexit 1\n")
    hook.chmod(0o755)
    cfg = (checkout / ".git" / "config").read_bytes()
    rc, _, err = _apply(capsys, "--branch", ALIAS, "--repo", str(checkout))
    assert rc == 0, err
    assert not flag.exists()
    assert (checkout / ".git" / "config").read_bytes() == cfg


def test_port_is_delegated_with_from_and_refused_with_no_port(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """When `git am -3` fails and --from is given, the 3-way porting engine takes over."""
    edit(checkout / SM120, "    is_sparse = True\n", "    is_sparse = True  # local change\n")
    git(checkout, "commit", "-qam", "local change in the patched context")
    git(checkout, "tag", "-f", "v0.34.0")
    before = state_fingerprint(checkout)
    rc, doc = _json(capsys, "--branch", ALIAS, "--repo", str(checkout), "--from", ALIAS, "--no-port")
    assert rc == 2 and doc["status"] == "failed" and "mode" not in doc
    rc, doc = _json(capsys, "--branch", ALIAS, "--repo", str(checkout), "--from", ALIAS)
    assert doc.get("mode") == "port", doc
    if doc["status"] != "ported":
        assert rc == 2
        assert state_fingerprint(checkout) == before


def test_from_accepts_a_variant_name_and_an_unknown_alias(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--branch my-fork --from v-test`: a name the manifest does not know, applied on HEAD."""
    rc, doc = _json(capsys, "--branch", "my-fork", "--repo", str(checkout), "--from", "v-test")
    assert rc == 0, doc
    assert doc["status"] == "applied" and doc["branch"] == "sm120kit/dcp-my-fork"
    assert doc["base"] == "HEAD"
    rc, _, err = _apply(capsys, "--branch", "x", "--repo", str(checkout), "--from", "nope")
    assert rc == 2 and "neither an alias nor a variant" in err


@pytest.mark.parametrize("engine", ["fast", "am"])
def test_interrupt_during_apply_cleans_up(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, engine: str,
) -> None:
    """Ctrl-C while the series is written (injected right after the real fast path wrote its
    commits, or the real `git am` applied them in the worktree, since a real signal cannot be
    timed reliably): no branch, nothing of the checkout changed, temp files gone, exit 130."""
    from sm120kit.patchset import fastapply, gitengine

    if engine == "am":  # the slow path: the fast one declines
        monkeypatch.setattr("sm120kit.patchset.apply.apply_fast", lambda *a: None)
    module, name = (fastapply, "write_commits") if engine == "fast" else (gitengine, "run_am")
    real = getattr(module, name)
    seen: list[object] = []

    def then_interrupt(*args: object, **kwargs: object) -> object:
        seen.append(real(*args, **kwargs))
        raise KeyboardInterrupt

    monkeypatch.setattr(module, name, then_interrupt)
    scratch = checkout.parent / "scratch-tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    before = state_fingerprint(checkout)
    rc, _, err = _apply(capsys, "--branch", ALIAS, "--repo", str(checkout))
    assert seen and rc == 130 and "interrupted" in err
    assert state_fingerprint(checkout) == before
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize("name", ["bad..name", "x.lock", "-x", "a//b", "end/", "sp ace", "a@{b"])
def test_invalid_into_is_refused(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    _assert_refused(capsys, checkout, ["--branch", ALIAS, "--repo", str(checkout), "--into", name],
                    "invalid branch name")
