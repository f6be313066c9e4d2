"""Atomic series application with ``git am -3`` in a throwaway, sparse worktree.

The user's checkout is only *read* until every patch applied: the series runs in a detached
worktree (``git worktree add --no-checkout --detach``) that checks out only the files the series
touches (a per-worktree sparse-checkout file; no config is written). On success the caller gets the
result commit and decides which ref to create; on failure the patch, file and hunk are named, and
the worktree and its administrative directory are removed. Objects written by a failed ``git am``
stay unreachable in the object store until git's own gc prunes them; refs, HEAD, index, stash,
config and the working tree are not touched.

Reusable pieces (also used by the installed-vLLM and fork-porting engines):

* :func:`throwaway_worktree` — context manager yielding a sparse detached worktree at a commit.
* :func:`run_am` — ``git am -3`` of patch files in a worktree, returning an :class:`AmOutcome`.
* :func:`apply_patches_in_worktree` — both of the above plus failure diagnosis, always cleaned up.
* :func:`dirty_paths`, :func:`operation_in_progress`, :func:`create_branch`.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from sm120kit.errors import UserError
from sm120kit.gitrun import AM_CONFIG, GitFailed, run_git
from sm120kit.patchset.patchfile import ParsedPatch

_SPARSE_ENV = {
    "GIT_CONFIG_COUNT": "2",
    "GIT_CONFIG_KEY_0": "core.sparseCheckout",
    "GIT_CONFIG_VALUE_0": "true",
    "GIT_CONFIG_KEY_1": "core.sparseCheckoutCone",
    "GIT_CONFIG_VALUE_1": "false",
}


@dataclass
class FailedHunk:
    file: str
    hunk: int | None
    header: str | None

    def describe(self) -> str:
        if self.hunk is None:
            return self.file
        return f"{self.file} hunk #{self.hunk} ({self.header})" if self.header else (
            f"{self.file} hunk #{self.hunk}"
        )


AmFailureReason = Literal["conflict", "missing-preimage", "missing-file", "error"]


@dataclass
class AmFailure:
    """Where and why ``git am -3`` stopped."""

    patch: str  # patch file name
    subject: str
    index: int  # 1-based position in the list given to git am
    reason: AmFailureReason
    hunks: list[FailedHunk] = field(default_factory=list)
    git_output: str = ""

    @property
    def file(self) -> str | None:
        return self.hunks[0].file if self.hunks else None

    def location(self) -> str:
        if not self.hunks:
            return "(no file named by git)"
        return "; ".join(h.describe() for h in self.hunks)

    def message(self) -> str:
        what = {
            "conflict": "conflicts",
            "missing-preimage": "does not apply and the repository lacks its preimage blobs",
            "missing-file": "touches a file the target does not have",
        }.get(self.reason, "failed")
        return f"patch {self.patch} ({self.subject}) {what}: {self.location()}"

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["message"] = self.message()
        return d


@dataclass
class AmOutcome:
    ok: bool
    head: str  # worktree HEAD after the run (the last applied patch when it failed)
    applied: int  # how many patches became commits
    output: str
    stopped_at: int | None = None  # 1-based index of the patch am stopped at


@dataclass
class WorktreeApply:
    """Result of :func:`apply_patches_in_worktree`."""

    ok: bool
    base_commit: str
    commit: str | None
    applied: list[str]
    failure: AmFailure | None = None


def dirty_paths(repo: Path, paths: Sequence[str] | None = None) -> list[str]:
    """Tracked files with staged or unstaged changes (``git status`` codes + path); with
    ``paths``, only among those (literal paths: git refreshes just their index entries, not the
    whole tree's, which on a fresh clone means re-hashing every racily clean file)."""
    if paths is not None and not paths:
        return []
    out = run_git(
        ["status", "--porcelain=v1", "-z", "--untracked-files=no", "--ignore-submodules=none",
         *(["--", *paths] if paths is not None else [])],
        repo, env={"GIT_LITERAL_PATHSPECS": "1"} if paths is not None else None,
    ).stdout
    items: list[str] = []
    recs = out.split("\0")
    i = 0
    while i < len(recs):
        rec = recs[i]
        i += 1
        if not rec:
            continue
        code, path = rec[:2], rec[3:]
        if code[0] in "RC":  # rename/copy: the next record is the source path
            i += 1
        items.append(f"{code.strip() or '?'} {path}")
    return items


def operation_in_progress(git_dir: Path) -> str | None:
    """``"git am"``/``"rebase"``/... when the checkout is in the middle of one, else None."""
    for name, what in (
        ("rebase-apply", "a git am or rebase"),
        ("rebase-merge", "a rebase"),
        ("MERGE_HEAD", "a merge"),
        ("CHERRY_PICK_HEAD", "a cherry-pick"),
        ("REVERT_HEAD", "a revert"),
        ("BISECT_LOG", "a bisect"),
    ):
        if (git_dir / name).exists():
            return what
    return None


def _sparse_pattern(path: str) -> str:
    escaped = re.sub(r"([*?\[\]\\!#])", r"\\\1", path)
    return "/" + escaped


@contextmanager
def throwaway_worktree(
    repo: Path, commit: str, sparse_paths: Sequence[str] | None = None
) -> Iterator[tuple[Path, dict[str, str]]]:
    """A detached worktree of ``repo`` at ``commit`` in a temp dir, removed on exit.

    With ``sparse_paths`` only those files are checked out (the sparse-checkout file lives in the
    worktree's own admin dir and the setting is passed by environment, so no config changes).
    Yields ``(path, env)``: pass ``env`` to every git command run in the worktree.
    """
    parent = Path(tempfile.mkdtemp(prefix="sm120kit-wt-"))
    wt = parent / "wt"
    env: dict[str, str] = dict(_SPARSE_ENV) if sparse_paths is not None else {}
    admin: Path | None = None
    try:
        args = ["worktree", "add", "--detach"]
        if sparse_paths is not None:
            args.append("--no-checkout")
        run_git([*args, str(wt), commit], repo)
        admin = _admin_dir(wt)
        if sparse_paths is not None:
            (admin / "info").mkdir(parents=True, exist_ok=True)
            (admin / "info" / "sparse-checkout").write_text(
                "".join(_sparse_pattern(p) + "\n" for p in sparse_paths), encoding="utf-8"
            )
            run_git(["read-tree", "-mu", "HEAD"], wt, env=env)
        yield wt, env
    finally:
        run_git(["worktree", "remove", "--force", "--force", str(wt)], repo, check=False)
        if admin is not None and admin.exists():
            # `worktree remove` refused (e.g. the directory vanished); drop only our own entry
            shutil.rmtree(admin, ignore_errors=True)
        shutil.rmtree(parent, ignore_errors=True)


def _admin_dir(wt: Path) -> Path:
    """The worktree's administrative dir, from its ``.git`` file (``gitdir: ...``)."""
    try:
        line = (wt / ".git").read_text(encoding="utf-8").strip()
        if line.startswith("gitdir: "):
            p = Path(line[len("gitdir: "):])
            return p if p.is_absolute() else (wt / p).resolve()
    except OSError:
        pass
    return Path(run_git(["rev-parse", "--absolute-git-dir"], wt).stdout.strip())


def run_am(wt: Path, patch_files: Sequence[Path], env: dict[str, str] | None = None) -> AmOutcome:
    """``git am -3`` the files in ``wt``; on failure the am session is left for diagnosis."""
    proc = run_git(
        # --committer-date-is-author-date: the same series on the same base gives the same
        # commit ids on every machine (the committer identity is fixed too)
        ["am", "-3", "--keep-non-patch", "--no-gpg-sign", "--committer-date-is-author-date",
         *[str(p) for p in patch_files]],
        wt,
        check=False,
        env=env,
        config=AM_CONFIG,
    )
    output = (proc.stdout + proc.stderr).strip()
    head = run_git(["rev-parse", "HEAD"], wt, env=env).stdout.strip()
    if proc.returncode == 0:
        return AmOutcome(True, head, len(patch_files), output)
    stopped: int | None = None
    state = wt / run_git(["rev-parse", "--git-path", "rebase-apply/next"], wt).stdout.strip()
    try:
        stopped = int(state.read_text().strip())
    except (OSError, ValueError):
        n = output.count("Applying: ")
        stopped = n if n else None
    applied = (stopped - 1) if stopped else output.count("Applying: ")
    return AmOutcome(False, head, applied, output, stopped)


_CONFLICT_RE = re.compile(r"^CONFLICT \([^)]*\): .*?(?:Merge conflict in|in) (\S+)", re.M)
_PATCH_FAILED_RE = re.compile(r"^error: patch failed: (.+):(\d+)$", re.M)
_NO_SHA_RE = re.compile(r"sha1 information is lacking or useless \((.+)\)")
_INVALID_OBJ_RE = re.compile(r"^error: invalid object \d+ [0-9a-f]+ for '(.+)'$", re.M)
_NOT_IN_INDEX_RE = re.compile(r"^error: (.+): does not exist in index$", re.M)
_APPLYING_RE = re.compile(r"^Applying patch (\S+) with (\d+) reject", re.M)
_REJECTED_RE = re.compile(r"^Rejected hunk #(\d+)\.", re.M)
_CHECKING_RE = re.compile(r"^Checking patch (\S+)\.\.\.$", re.M)


def _reject_hunks(wt: Path, env: dict[str, str], patch: ParsedPatch) -> list[FailedHunk]:
    """Re-run the failing patch with ``git apply --reject`` to learn every hunk that fails."""
    proc = run_git(["apply", "--reject", "--verbose", str(patch.path)], wt, check=False, env=env)
    text = proc.stdout + proc.stderr
    found: list[FailedHunk] = []
    current: str | None = None
    for line in text.splitlines():
        m = _APPLYING_RE.match(line)
        if m:
            current = m.group(1)
            continue
        m = _REJECTED_RE.match(line)
        if m and current:
            n = int(m.group(1))
            fc = patch.change_for(current)
            h = fc.hunks[n - 1] if fc and 0 < n <= len(fc.hunks) else None
            found.append(FailedHunk(current, n, h.header() if h else None))
    if not found:
        for m in _PATCH_FAILED_RE.finditer(text):
            fc = patch.change_for(m.group(1))
            h = fc.hunk_at(int(m.group(2))) if fc else None
            found.append(FailedHunk(m.group(1), h.number if h else None, h.header() if h else None))
    return found


def diagnose_failure(
    wt: Path, env: dict[str, str], outcome: AmOutcome, patches: Sequence[ParsedPatch]
) -> AmFailure:
    """Name the patch, file(s) and hunk(s) that made ``git am`` stop (mutates only ``wt``)."""
    idx = outcome.stopped_at or (outcome.applied + 1)
    idx = max(1, min(idx, len(patches)))
    patch = patches[idx - 1]
    out = outcome.output
    reason: AmFailureReason = "error"
    if (
        _NO_SHA_RE.search(out)
        or "could not build fake ancestor" in out
        or "lacks necessary blobs" in out
    ):
        reason = "missing-preimage"
    elif _CONFLICT_RE.search(out):
        reason = "conflict"
    elif _NOT_IN_INDEX_RE.search(out):
        reason = "missing-file"
    elif _PATCH_FAILED_RE.search(out):
        reason = "conflict"
    # Leave am, go back to the commit before the failing patch and find every failing hunk.
    run_git(["am", "--quit"], wt, check=False, env=env)
    run_git(["reset", "-q", "--hard", "HEAD"], wt, check=False, env=env)
    hunks = _reject_hunks(wt, env, patch)
    if not hunks:
        files = [m.group(1) for m in _CONFLICT_RE.finditer(out)]
        files += [m.group(1) for m in _NOT_IN_INDEX_RE.finditer(out)]
        files += [m.group(1) for m in _NO_SHA_RE.finditer(out)]
        files += [m.group(1) for m in _INVALID_OBJ_RE.finditer(out)]
        hunks = [FailedHunk(f, None, None) for f in dict.fromkeys(files)]
    if reason == "error" and hunks:
        reason = "conflict"
    tail = "\n".join(out.splitlines()[-25:])
    return AmFailure(patch.name, patch.subject, idx, reason, hunks, tail)


def apply_patches_in_worktree(
    repo: Path, base_commit: str, patches: Sequence[ParsedPatch]
) -> WorktreeApply:
    """Apply ``patches`` on ``base_commit`` of ``repo`` in a sparse throwaway worktree.

    Creates no ref: on success ``.commit`` is the resulting commit (reachable only by id until
    the caller creates a branch); on failure ``.failure`` names patch/file/hunk. The worktree is
    gone when this returns, in both cases.
    """
    sparse: dict[str, None] = {}
    for p in patches:
        for path in p.paths():
            sparse.setdefault(path, None)
    if not patches:
        return WorktreeApply(True, base_commit, base_commit, [])
    try:
        with throwaway_worktree(repo, base_commit, list(sparse)) as (wt, env):
            outcome = run_am(wt, [p.path for p in patches], env)
            if outcome.ok:
                return WorktreeApply(True, base_commit, outcome.head, [p.name for p in patches])
            failure = diagnose_failure(wt, env, outcome, patches)
            return WorktreeApply(
                False, base_commit, None, [p.name for p in patches[: failure.index - 1]], failure
            )
    except GitFailed as exc:
        raise UserError(
            f"could not set up a temporary worktree in {repo}: {exc.stderr.strip()[:200]}",
            hint="is the repository writable and not locked by another git process?",
        ) from exc


def branch_exists(repo: Path, branch: str) -> str | None:
    proc = run_git(["rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], repo, check=False)
    return proc.stdout.strip() or None


_PLAIN_BRANCH = re.compile(r"^(?!-)(?!.*(?:\.\.|//|/\.|@\{|\.lock/|\.lock$))[A-Za-z0-9._/+-]+(?<![./])$")


def check_branch_name(repo: Path, branch: str) -> None:
    """Refuse a name git would not accept for a branch (plain names skip the git call)."""
    if _PLAIN_BRANCH.match(branch) and not branch.startswith((".", "/")):
        return
    proc = run_git(["check-ref-format", "--branch", branch], repo, check=False)
    if proc.returncode != 0:
        raise UserError(f"invalid branch name {branch!r}", hint="see `git help check-ref-format`")


def create_branch(repo: Path, branch: str, commit: str, message: str,
                  old: str | None = None) -> None:
    """Create ``refs/heads/<branch>`` at ``commit``; fails if it appeared meanwhile (with
    ``old``: move it from ``old``, failing if it moved meanwhile)."""
    zero = old or "0" * 40
    proc = run_git(
        ["update-ref", "--create-reflog", "-m", message, f"refs/heads/{branch}", commit, zero],
        repo,
        check=False,
    )
    if proc.returncode != 0:
        raise UserError(
            f"could not create branch {branch}: {proc.stderr.strip()[:200]}",
            hint="another process may have created it; re-run `sm120kit apply`",
        )


def ensure_writable(root: Path, paths: Sequence[str]) -> None:
    """Refuse when a file the series changes is read-only in the working tree at ``root``."""
    import stat

    for rel in paths:
        p = root / rel
        try:
            st = p.lstat()
        except FileNotFoundError:
            parent = p.parent
            if parent.exists() and not (parent.stat().st_mode & stat.S_IWUSR):
                raise UserError(
                    f"directory {parent.relative_to(root)} is read-only; the series creates {rel}; "
                    "nothing was changed",
                    hint=f"chmod u+w {parent}",
                ) from None
            continue
        if not (st.st_mode & stat.S_IWUSR) or not os.access(p, os.W_OK):
            raise UserError(
                f"target file {rel} is read-only (mode {stat.S_IMODE(st.st_mode):04o}); nothing was changed",
                hint=f"make it writable first: chmod u+w {p}",
            )
