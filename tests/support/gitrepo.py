"""Plain ``git`` for test repositories (deliberately not sm120kit's runner: tests check it),
the fingerprint of a repository's state, tree hashes and text edits."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

#: identity of commits the tests make themselves
TEST_IDENTITY = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "author@example.invalid",
}
#: a fork's maintainer, fixed dates (reproducible fork histories)
FORK_IDENTITY = {
    "GIT_AUTHOR_NAME": "Fork Maintainer",
    "GIT_AUTHOR_EMAIL": "fork@example.invalid",
    "GIT_COMMITTER_NAME": "Fork Maintainer",
    "GIT_COMMITTER_EMAIL": "fork@example.invalid",
    "GIT_AUTHOR_DATE": "2026-06-27T10:00:00+0000",
    "GIT_COMMITTER_DATE": "2026-06-27T10:00:00+0000",
}
#: the committer the series was authored with: ``git am`` recreates the authoring commits
SERIES_IDENTITY = {
    "GIT_COMMITTER_NAME": "sm120kit",
    "GIT_COMMITTER_EMAIL": "sm120kit@localhost",
    "GIT_COMMITTER_DATE": "2026-12-02T12:00:00+0000",
}


def git_proc(cwd: Path, *args: str, check: bool = True,
             identity: Mapping[str, str] = TEST_IDENTITY) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **identity, "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0"}
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed in {cwd}:\n{proc.stderr}")
    return proc


def git(cwd: Path, *args: str, check: bool = True,
        identity: Mapping[str, str] = TEST_IDENTITY) -> str:
    """stdout of ``git ARGS`` in ``cwd`` (AssertionError when it fails and ``check``)."""
    return git_proc(cwd, *args, check=check, identity=identity).stdout


def state_fingerprint(repo: Path) -> dict[str, object]:
    """Independent of the engine: everything a failed apply must leave byte-identical."""
    gd = Path(git(repo, "rev-parse", "--absolute-git-dir").strip())
    files = {}
    for dirpath, dirnames, filenames in os.walk(repo):
        if ".git" in dirnames:
            dirnames.remove(".git")
        for n in filenames:
            p = Path(dirpath) / n
            st = p.lstat()
            files[str(p.relative_to(repo))] = (st.st_mode, hashlib.sha256(p.read_bytes()).hexdigest())
    return {
        "head": git(repo, "rev-parse", "HEAD"),
        "head_ref": git(repo, "symbolic-ref", "-q", "HEAD", check=False),
        "index": hashlib.sha256((gd / "index").read_bytes()).hexdigest(),
        "refs": git(repo, "for-each-ref"),
        "stash": git(repo, "stash", "list"),
        "worktrees": git(repo, "worktree", "list", "--porcelain"),
        "config": (gd / "config").read_bytes(),
        "worktree_dirs": sorted(os.listdir(gd / "worktrees")) if (gd / "worktrees").exists() else [],
        "files": files,
    }


_HASHES: dict[tuple[str, int, int, int, int], str] = {}


def file_sha(p: Path) -> str:
    """sha256 of ``p``. A file whose inode, size, mtime and ctime are all unchanged has unchanged
    bytes (ctime cannot be set from user space and moves on every write, chmod, utime or
    replace), so a big tree (a venv's ~500 MB of .so files) is hashed once per session."""
    st = p.stat()
    key = (str(p), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    hit = _HASHES.get(key)
    if hit is None:
        hit = _HASHES[key] = hashlib.sha256(p.read_bytes()).hexdigest()
    return hit


def hash_tree(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (relative path → hex), symlinks by target."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            out[rel] = "link:" + os.readlink(p) if p.is_symlink() else file_sha(p)
        for d in dirnames:
            out.setdefault(str((Path(dirpath) / d).relative_to(root)) + "/", "dir")
    return out


def edit(path: Path, old: str, new: str, count: int = 1) -> None:
    """Replace ``old`` by ``new`` in ``path`` (``old`` must occur)."""
    text = path.read_text()
    assert old in text, f"anchor not found in {path}: {old!r}"
    path.write_text(text.replace(old, new, count))
