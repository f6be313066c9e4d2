"""Thin, isolated ``git`` subprocess calls used by the patch engine.

Every call runs with ``GIT_CONFIG_NOSYSTEM=1``, no terminal prompts, no pager, hooks disabled and
automatic gc off, so that applying the series never runs the user's hooks or repacks their
repository. Nothing here writes git configuration: per-command settings go through ``-c``.

GitPython is deliberately not used on this path: importing it costs ~110 ms, more than applying
the whole series with ``git am``; the commands that are not latency-bound (``verify``, the
embedded default) use it.
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


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_PAGER": "cat",
            # never rewrite the user's index opportunistically (`git status` would refresh it)
            "GIT_OPTIONAL_LOCKS": "0",
            "GIT_EDITOR": "true",
            "LC_ALL": "C",
            "LANGUAGE": "C",
        }
    )
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY"):
        env.pop(var, None)
    if extra:
        env.update(extra)
    return env


def run_git(
    args: Sequence[str],
    cwd: Path | str,
    *,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    config: Sequence[str] = (),
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """Run ``git <args>`` in ``cwd``; text output. Raises :class:`GitFailed` when ``check``."""
    cmd = ["git", *SAFE_CONFIG, *config, *args]
    try:
        proc = subprocess.run(
            cmd,
            cwd=str(cwd),
            env=git_env(env),
            input=input.decode("utf-8", "surrogateescape") if input is not None else None,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
        )
    except FileNotFoundError as exc:
        raise UserError("git is not installed or not on PATH", hint="install git >= 2.30") from exc
    if check and proc.returncode != 0:
        raise GitFailed(args, proc.returncode, proc.stdout, proc.stderr)
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
    proc = subprocess.run(
        ["git", *SAFE_CONFIG, "cat-file", "--batch-check=%(objectname) %(objecttype)"],
        cwd=str(repo),
        env=git_env(),
        input=("\n".join(wanted) + "\n").encode("utf-8"),
        capture_output=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise GitFailed(["cat-file", "--batch-check"], proc.returncode, "",
                        proc.stderr.decode(errors="replace"))
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
    proc = subprocess.run(
        ["git", *SAFE_CONFIG, "cat-file", "--batch"],
        cwd=str(repo),
        env=git_env(),
        input=("\n".join(wanted) + "\n").encode("utf-8"),
        capture_output=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise GitFailed(["cat-file", "--batch"], proc.returncode, "", proc.stderr.decode(errors="replace"))
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
