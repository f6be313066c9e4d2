"""The one git runner: a user's global hooks, pager and repository discovery never leak in.

Real git in tmp dirs; HOME is a tmp dir (tests/conftest.py), so the "user's" global config
written here is a real ~/.gitconfig that git reads.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from sm120kit.errors import UserError
from sm120kit.gitrun import GitFailed, read_blobs, run_git, run_git_bytes
from tests.support.paths import ROOT


def _init(repo: Path) -> None:
    repo.mkdir(parents=True)
    run_git(["init", "-q", "-b", "main"], repo)
    (repo / "a.txt").write_bytes(b"one\r\ntwo\xff\n")
    run_git(["add", "a.txt"], repo)
    run_git(["-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "-m", "a"], repo)


def test_global_hooks_path_is_ignored(tmp_path: Path) -> None:
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    marker = tmp_path / "hook-ran"
    hook = hooks / "pre-commit"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    home = Path.home()
    (home / ".gitconfig").write_text(f"[core]\n\thooksPath = {hooks}\n")
    # the same commit through plain git does run the user's hook: the setup is real
    plain = tmp_path / "plain"
    plain.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=plain, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q",
                    "--allow-empty", "-m", "x"], cwd=plain, check=True)
    assert marker.exists()
    marker.unlink()
    _init(tmp_path / "repo")
    assert not marker.exists()


def test_bytes_mode_round_trips_file_contents(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _init(repo)
    assert run_git_bytes(["show", "HEAD:a.txt"], repo).stdout == b"one\r\ntwo\xff\n"
    assert read_blobs(repo, ["HEAD:a.txt", "HEAD:missing"]) == {
        "HEAD:a.txt": b"one\r\ntwo\xff\n", "HEAD:missing": None}


def test_ceiling_stops_discovery_at_cwd(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    _init(outer)
    scratch = outer / "cache" / "tree"
    scratch.mkdir(parents=True)
    # without the ceiling git finds the enclosing checkout...
    assert run_git(["rev-parse", "--show-toplevel"], scratch).stdout.strip() == str(outer)
    # ...with it, the scratch dir is not inside any repository
    with pytest.raises(GitFailed):
        run_git(["rev-parse", "--show-toplevel"], scratch, ceiling=True)


def test_missing_directory_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError):
        run_git(["status"], tmp_path / "nope")


def test_no_git_subprocess_outside_the_runner() -> None:
    """Every ``git`` process of the package starts in sm120kit/gitrun.py."""
    offenders = []
    for path in (ROOT / "sm120kit").rglob("*.py"):
        if path.name == "gitrun.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.List) and node.elts:
                first = node.elts[0]
                if isinstance(first, ast.Constant) and first.value == "git":
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
                if "git" in names:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} imports GitPython")
    assert offenders == []


def test_read_ahead_scope_reads_through_one_cat_file(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """In a read_ahead scope every read is a request to one ``git cat-file --batch``: revisions,
    missing ones, more requests than one pipe-full, and an object written by another git process
    after the batch started; the process ends with the scope."""
    from sm120kit import gitrun

    repo = tmp_path / "r"
    _init(repo)
    started: list[gitrun._Batch] = []
    real_init = gitrun._Batch.__init__

    def counting(self: gitrun._Batch, *a: object, **kw: object) -> None:
        real_init(self, *a, **kw)  # type: ignore[arg-type]
        started.append(self)

    monkeypatch.setattr(gitrun._Batch, "__init__", counting)
    head = run_git(["rev-parse", "HEAD"], repo).stdout.strip()
    with gitrun.read_ahead():
        ids = gitrun.resolve_many(repo, ["HEAD^{commit}", "refs/heads/nope", "HEAD:a.txt"])
        assert ids["HEAD^{commit}"] == head and ids["refs/heads/nope"] is None
        many = [f"{head}:a.txt"] + [f"{head}:missing-{i:05d}-{'x' * 40}" for i in range(800)]
        got = gitrun.read_blobs(repo, many)
        assert got[f"{head}:a.txt"] == b"one\r\ntwo\xff\n"
        assert sum(v is None for v in got.values()) == 800
        new = run_git(["hash-object", "-w", "--stdin"], repo, input=b"later\n").stdout.strip()
        assert gitrun.read_objects(repo, [new]) == {new: ("blob", b"later\n")}
        assert len(started) == 1
        proc = started[0].proc
    assert proc.poll() == 0  # ended (stdin closed) when the scope closed
    assert gitrun.read_blobs(repo, [f"{head}:a.txt"])[f"{head}:a.txt"] == b"one\r\ntwo\xff\n"
    assert len(started) == 1  # outside a scope: a one-shot process, not a kept one


def test_a_path_above_the_repository_is_missing_not_fatal(tmp_path: Path) -> None:
    """``<rev>:../x`` would stop ``git cat-file --batch`` (git reads it from the current
    directory): it reads as missing, in a read_ahead scope and outside one, and the reads around
    it still answer."""
    from sm120kit import gitrun

    repo = tmp_path / "r"
    _init(repo)
    specs = ["HEAD:a.txt", "HEAD:../outside.py", "HEAD:./../x", "HEAD:.."]
    assert read_blobs(repo, specs) == {"HEAD:a.txt": b"one\r\ntwo\xff\n", "HEAD:../outside.py": None,
                                       "HEAD:./../x": None, "HEAD:..": None}
    with gitrun.read_ahead():
        assert gitrun.resolve_many(repo, ["HEAD:../outside.py", "HEAD^{commit}"])[
            "HEAD:../outside.py"] is None
        assert read_blobs(repo, specs)["HEAD:a.txt"] == b"one\r\ntwo\xff\n"
