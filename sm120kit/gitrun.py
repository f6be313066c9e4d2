"""The one way sm120kit runs ``git`` (base layer: imports only :mod:`sm120kit.errors`).

Every call runs with ``GIT_CONFIG_NOSYSTEM=1``, no terminal prompts, no pager, no editor, hooks
disabled (``core.hooksPath=/dev/null``, so a user's global hooks path never applies) and
automatic gc/maintenance off, so that nothing sm120kit does runs the user's hooks or repacks
their repository. Nothing here writes git configuration: per-command settings go through ``-c``.
``ceiling=True`` stops git's repository discovery at the working directory (for commands run in a
scratch tree that may sit inside somebody's checkout, e.g. a cache under ``.ci/``).

:func:`run_git` returns text, :func:`run_git_bytes` bytes (file contents, patches, merges).
GitPython is not used: importing it costs ~110 ms, more than applying the whole series, and
``git cat-file --batch`` (:func:`read_blobs`) does what it was used for.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from sm120kit.errors import UserError

#: identity for the commits ``git am`` creates; the author stays the patch's author.
COMMITTER = ("sm120kit", "sm120kit@localhost")

#: ``-c`` settings for every command: never run hooks, never auto-gc, never ask for credentials.
SAFE_CONFIG: tuple[str, ...] = (
    "-c", "core.hooksPath=/dev/null",
    "-c", "gc.auto=0",
    "-c", "maintenance.auto=false",
    "-c", "advice.detachedHead=false",
    "-c", "core.pager=cat",
    "-c", "credential.interactive=false",
)

#: extra ``-c`` settings for ``git am``: identity and a stable, non-interactive behaviour.
AM_CONFIG: tuple[str, ...] = (
    "-c", f"user.name={COMMITTER[0]}",
    "-c", f"user.email={COMMITTER[1]}",
    "-c", "am.threeWay=false",
    "-c", "am.keepcr=false",
    "-c", "am.messageid=false",
    "-c", "mailinfo.scissors=false",
    "-c", "commit.gpgSign=false",
    "-c", "core.autocrlf=false",
)


class GitFailed(Exception):
    """A git command exited non-zero (internal; callers turn it into a ``UserError``)."""

    def __init__(self, args: Sequence[str], returncode: int, stdout: str, stderr: str):
        super().__init__(f"git {' '.join(args)} exited {returncode}: {stderr.strip()[:400]}")
        self.args_ = list(args)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


def git_env(extra: Mapping[str, str] | None = None, *, ceiling: Path | str | None = None) -> dict[str, str]:
    """The environment of every git call; ``ceiling``: stop repository discovery below it."""
    env = dict(os.environ)
    env.update(
        {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ASKPASS": "",
            "SSH_ASKPASS": "",
            "GIT_PAGER": "cat",
            # never rewrite the user's index opportunistically (`git status` would refresh it)
            "GIT_OPTIONAL_LOCKS": "0",
            "GIT_EDITOR": "true",
            "LC_ALL": "C",
            "LANGUAGE": "C",
        }
    )
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_CEILING_DIRECTORIES"):
        env.pop(var, None)
    if ceiling is not None:
        env["GIT_CEILING_DIRECTORIES"] = str(Path(ceiling).resolve())
    if extra:
        env.update(extra)
    return env


def _run(
    args: Sequence[str],
    cwd: Path | str,
    *,
    text: bool,
    env: Mapping[str, str] | None,
    input: bytes | None,
    config: Sequence[str],
    timeout: float,
    ceiling: bool,
    stderr_to_terminal: bool = False,
) -> subprocess.CompletedProcess:
    cmd = ["git", *SAFE_CONFIG, *config, *args]
    # ceiling=True: git may look in cwd itself but never above it
    env_ = git_env(env, ceiling=Path(cwd).resolve().parent if ceiling else None)
    try:
        if text:
            return subprocess.run(
                cmd, cwd=str(cwd), env=env_,
                input=input.decode("utf-8", "surrogateescape") if input is not None else None,
                stdout=subprocess.PIPE, stderr=None if stderr_to_terminal else subprocess.PIPE,
                text=True, errors="replace", timeout=timeout,
            )
        return subprocess.run(
            cmd, cwd=str(cwd), env=env_, input=input,
            stdout=subprocess.PIPE, stderr=None if stderr_to_terminal else subprocess.PIPE,
            timeout=timeout,
        )
    except FileNotFoundError as exc:
        if not Path(cwd).is_dir():
            raise UserError(f"{cwd} is not a directory") from exc
        raise UserError("git is not installed or not on PATH", hint="install git >= 2.30") from exc


def run_git(
    args: Sequence[str],
    cwd: Path | str,
    *,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    config: Sequence[str] = (),
    timeout: float = 600,
    ceiling: bool = False,
    stderr_to_terminal: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``git <args>`` in ``cwd``; text output. Raises :class:`GitFailed` when ``check``."""
    proc: subprocess.CompletedProcess[str] = _run(
        args, cwd, text=True, env=env, input=input, config=config, timeout=timeout,
        ceiling=ceiling, stderr_to_terminal=stderr_to_terminal,
    )
    if check and proc.returncode != 0:
        raise GitFailed(args, proc.returncode, proc.stdout, proc.stderr or "")
    return proc


def run_git_bytes(
    args: Sequence[str],
    cwd: Path | str,
    *,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    config: Sequence[str] = (),
    timeout: float = 600,
    ceiling: bool = False,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``git <args>`` in ``cwd``; bytes in and out. Raises :class:`GitFailed` when ``check``."""
    proc: subprocess.CompletedProcess[bytes] = _run(
        args, cwd, text=False, env=env, input=input, config=config, timeout=timeout,
        ceiling=ceiling,
    )
    if check and proc.returncode != 0:
        raise GitFailed(args, proc.returncode, "", proc.stderr.decode("utf-8", "replace"))
    return proc


def git_out(args: Sequence[str], cwd: Path | str, **kw: object) -> str:
    """stdout of a successful git command, stripped."""
    return run_git(args, cwd, **kw).stdout.strip()  # type: ignore[arg-type]


def rev_parse(repo: Path, ref: str) -> str | None:
    """The commit id ``ref`` names in ``repo``, or None."""
    proc = run_git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"],
                   repo, check=False)
    out = proc.stdout.strip()
    return out if proc.returncode == 0 and out else None


def resolve_many(repo: Path, revs: Iterable[str]) -> dict[str, str | None]:
    """Object ids of several revisions in one ``git cat-file --batch-check`` (None: missing)."""
    wanted = list(dict.fromkeys(revs))
    if not wanted:
        return {}
    proc = run_git_bytes(["cat-file", "--batch-check=%(objectname) %(objecttype)"], repo,
                         input=("\n".join(wanted) + "\n").encode("utf-8"), timeout=120)
    lines = proc.stdout.decode("utf-8", "replace").splitlines()
    out: dict[str, str | None] = {}
    for rev, line in zip(wanted, lines, strict=False):
        parts = line.split()
        out[rev] = parts[0] if len(parts) == 2 and parts[1] in ("commit", "tag", "tree", "blob") else None
    return out


def read_blobs(repo: Path, specs: Iterable[str]) -> dict[str, bytes | None]:
    """Contents of ``<rev>:<path>`` objects in one ``git cat-file --batch`` call (None: missing)."""
    wanted = list(dict.fromkeys(specs))
    if not wanted:
        return {}
    proc = run_git_bytes(["cat-file", "--batch"], repo,
                         input=("\n".join(wanted) + "\n").encode("utf-8"), timeout=120)
    out: dict[str, bytes | None] = {}
    data = proc.stdout
    pos = 0
    for spec in wanted:
        nl = data.index(b"\n", pos)
        header = data[pos:nl].decode("utf-8", "replace")
        pos = nl + 1
        if header.endswith(" missing") or header.endswith(" ambiguous"):
            out[spec] = None
            continue
        parts = header.split()
        size = int(parts[2])
        out[spec] = data[pos : pos + size] if parts[1] == "blob" else None
        pos += size + 1
    return out


def tree_modes(repo: Path, rev: str, paths: Iterable[str]) -> dict[str, str]:
    """``{path: mode}`` for the given paths (files or directories) that exist at ``rev``."""
    wanted = sorted(set(paths))
    if not wanted:
        return {}
    proc = run_git(["ls-tree", "-z", "--full-tree", rev, "--", *wanted], repo)
    modes: dict[str, str] = {}
    for rec in proc.stdout.split("\0"):
        if not rec:
            continue
        meta, _, path = rec.partition("\t")
        modes[path] = meta.split()[0]
    return modes
