"""A fingerprint of everything a failed apply must leave untouched in a git checkout.

``snapshot_repo_state(repo)`` records HEAD (symbolic name and commit), the bytes of the index, every
ref (``git for-each-ref``), the stash list, the worktree list and the bytes of the repository's
config files; ``include_files=True`` adds a hash of every file in the working tree (slow on big
trees: tests and ``--paranoid`` callers only). Two snapshots compare with ``==``;
:func:`snapshot_diff` names what differs.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

from sm120kit.gitrun import run_git


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha(path: Path) -> str:
    try:
        return _sha(path.read_bytes())
    except FileNotFoundError:
        return "-"


@dataclass(frozen=True)
class RepoSnapshot:
    head: str
    head_ref: str
    index: str
    refs: str
    stash: str
    worktrees: str
    config: str
    files: tuple[tuple[str, str], ...] = field(default=(), compare=True)


def git_dirs(repo: Path) -> tuple[Path, Path]:
    """``(git_dir, common_dir)`` of the worktree at ``repo`` (absolute)."""
    out = run_git(["rev-parse", "--absolute-git-dir", "--git-common-dir"], repo).stdout.split("\n")
    git_dir = Path(out[0])
    common = Path(out[1])
    if not common.is_absolute():
        common = (Path(repo) / common).resolve()
    return git_dir, common


def _tree_hashes(root: Path) -> tuple[tuple[str, str], ...]:
    items: list[tuple[str, str]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        if ".git" in dirnames:
            dirnames.remove(".git")
        for name in filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                items.append((rel, "link:" + os.readlink(p)))
            else:
                st = p.stat()
                items.append((rel, f"{st.st_mode:o}:{_file_sha(p)}"))
    return tuple(sorted(items))


def snapshot_repo_state(repo: Path, *, include_files: bool = False) -> RepoSnapshot:
    """Fingerprint HEAD, index, refs, stash, worktrees and config of ``repo`` (see module doc)."""
    repo = Path(repo)
    git_dir, common = git_dirs(repo)
    head = run_git(["rev-parse", "--verify", "--quiet", "HEAD"], repo, check=False).stdout.strip()
    head_ref = run_git(["symbolic-ref", "--quiet", "HEAD"], repo, check=False).stdout.strip()
    refs = run_git(["for-each-ref", "--format=%(objectname) %(refname)"], repo).stdout
    stash = run_git(["stash", "list", "--format=%H %gd %gs"], repo, check=False).stdout
    worktrees = run_git(["worktree", "list", "--porcelain"], repo).stdout
    config = _file_sha(common / "config") + _file_sha(git_dir / "config.worktree")
    return RepoSnapshot(
        head=head,
        head_ref=head_ref,
        index=_file_sha(git_dir / "index"),
        refs=_sha(refs.encode()),
        stash=_sha(stash.encode()),
        worktrees=_sha(worktrees.encode()),
        config=config,
        files=_tree_hashes(repo) if include_files else (),
    )


def snapshot_diff(before: RepoSnapshot, after: RepoSnapshot) -> list[str]:
    """Names of the parts that differ (``[]`` when identical)."""
    return [f.name for f in fields(RepoSnapshot) if getattr(before, f.name) != getattr(after, f.name)]
