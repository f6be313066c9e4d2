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
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
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
    """Object ids of several revisions in one ``git cat-file --batch-check`` (None: missing); in a
    :func:`read_ahead` scope, by the scope's ``git cat-file --batch``."""
    wanted = list(dict.fromkeys(revs))
    if not wanted:
        return {}
    batch = _scope_batch(repo)
    if batch is not None:
        got = batch.query([r for r in wanted if not _relative(r)])
        kinds = ("commit", "tag", "tree", "blob")
        return {r: o[0] if (o := got.get(r)) is not None and o[1] in kinds else None
                for r in wanted}
    proc = run_git_bytes(["cat-file", "--batch-check=%(objectname) %(objecttype)"], repo,
                         input=("\n".join(wanted) + "\n").encode("utf-8"), timeout=120)
    lines = proc.stdout.decode("utf-8", "replace").splitlines()
    out: dict[str, str | None] = {}
    for rev, line in zip(wanted, lines, strict=False):
        parts = line.split()
        out[rev] = parts[0] if len(parts) == 2 and parts[1] in ("commit", "tag", "tree", "blob") else None
    return out


class _Batch:
    """One ``git cat-file --batch`` kept open for a :func:`read_ahead` scope: every read of the
    operation (revisions, paths, markers, trees, and the result's markers after new objects were
    written: git looks each object up afresh) is a request to it instead of a process of its own.
    Each request has a deadline (``timeout`` seconds): past it, git is killed and
    :class:`GitFailed` raised."""

    CHUNK = 16384  # bytes of requests written before their answers are read (pipes hold 64 KiB)

    def __init__(self, repo: Path, timeout: float = 120):
        self.repo, self.timeout = repo, timeout
        try:
            self.proc = subprocess.Popen(
                ["git", *SAFE_CONFIG, "cat-file", "--batch"], cwd=str(repo), env=git_env(),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except FileNotFoundError as exc:
            if not Path(repo).is_dir():
                raise UserError(f"{repo} is not a directory") from exc
            raise UserError("git is not installed or not on PATH", hint="install git >= 2.30") from exc

    def query(self, specs: list[str]) -> dict[str, tuple[str, str, bytes] | None]:
        """``{spec: (object id, type, content)}`` (None: missing)."""
        out: dict[str, tuple[str, str, bytes] | None] = {}
        timer = threading.Timer(self.timeout, self.proc.kill)
        timer.start()
        try:
            i = 0
            while i < len(specs):
                chunk: list[str] = []
                size = 0
                while i < len(specs) and (not chunk or size < self.CHUNK):
                    chunk.append(specs[i])
                    size += len(specs[i]) + 1
                    i += 1
                self._ask(chunk, out)
        finally:
            timer.cancel()
        return out

    def _ask(self, chunk: list[str], out: dict[str, tuple[str, str, bytes] | None]) -> None:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write(("\n".join(chunk) + "\n").encode("utf-8"))
            stdin.flush()
        except OSError:
            self._failed()
        for spec in chunk:
            head = stdout.readline()
            if not head.endswith(b"\n"):
                self._failed()
            parts = head.decode("utf-8", "replace").split()
            if len(parts) != 3 or parts[-1] in ("missing", "ambiguous") or not parts[2].isdigit():
                out[spec] = None
                continue
            size = int(parts[2])
            body = stdout.read(size + 1)
            if len(body) != size + 1:
                self._failed()
            out[spec] = (parts[0], parts[1], body[:size])

    def _failed(self) -> None:
        self.proc.kill()
        _, err = self.proc.communicate()
        raise GitFailed(["cat-file", "--batch"], self.proc.returncode, "",
                        (err or b"").decode("utf-8", "replace") or "no answer in time")

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            for f in (self.proc.stdout, self.proc.stderr):
                if f is not None:
                    f.close()


#: objects read ahead for the operation running now (:func:`read_ahead`): per open scope,
#: ``{(repo, "<commit id>:<path>"): (type, content) or None}``
_AHEAD: list[dict[tuple[str, str], tuple[str, bytes] | None]] = []
#: per open scope, the ``git cat-file --batch`` of each repository read in it
_BATCHES: list[dict[str, _Batch]] = []


@contextmanager
def read_ahead() -> Iterator[None]:
    """A scope in which :func:`prefetch` keeps what it read, and in which every object read
    (:func:`resolve_many`, :func:`read_objects`) goes to one ``git cat-file --batch`` per
    repository, open until the scope ends."""
    _AHEAD.append({})
    _BATCHES.append({})
    try:
        yield
    finally:
        _AHEAD.pop()
        for batch in _BATCHES.pop().values():
            batch.close()


def _scope_batch(repo: Path) -> _Batch | None:
    """The open scope's ``git cat-file --batch`` for ``repo`` (started on first use), or None."""
    if not _BATCHES:
        return None
    key = str(repo)
    if key not in _BATCHES[-1]:
        _BATCHES[-1][key] = _Batch(repo)
    return _BATCHES[-1][key]


def _fixed(spec: str) -> bool:
    """``<full commit id>:<path>``: an object that cannot change (a ref or ``HEAD`` can)."""
    rev, sep, _ = spec.partition(":")
    return bool(sep) and len(rev) in (40, 64) and all(c in "0123456789abcdef" for c in rev)


def prefetch(repo: Path, specs: Iterable[str]) -> None:
    """Read the ``<full commit id>:<path>`` objects among ``specs`` in one ``git cat-file
    --batch`` and keep them for the :func:`read_ahead` scope open now (none open: no-op)."""
    if not _AHEAD:
        return
    cache = _AHEAD[-1]
    wanted = [s for s in dict.fromkeys(specs) if _fixed(s) and (str(repo), s) not in cache]
    cache.update({(str(repo), s): o for s, o in _cat_batch(repo, wanted).items()})


def _relative(spec: str) -> bool:
    """``<rev>:./x`` or ``<rev>:../x``: git reads the path from the current directory and, for
    one above the repository, stops the whole ``cat-file --batch``; such a spec is missing."""
    _, sep, path = spec.partition(":")
    return bool(sep) and (path.startswith(("./", "../")) or path in (".", ".."))


def read_objects(repo: Path, specs: Iterable[str]) -> dict[str, tuple[str, bytes] | None]:
    """``{spec: (type, content)}`` of ``<rev>:<path>`` objects (None: missing), from the
    :func:`read_ahead` scope where prefetched, the rest in one ``git cat-file --batch``."""
    wanted = list(dict.fromkeys(specs))
    cache = _AHEAD[-1] if _AHEAD else {}
    out = {s: cache[(str(repo), s)] for s in wanted if (str(repo), s) in cache}
    out.update(_cat_batch(repo, [s for s in wanted if s not in out]))
    return {s: out[s] for s in wanted}


def _cat_batch(repo: Path, specs: list[str]) -> dict[str, tuple[str, bytes] | None]:
    out_of_tree: dict[str, tuple[str, bytes] | None] = {s: None for s in specs if _relative(s)}
    wanted = [s for s in specs if s not in out_of_tree]
    if not wanted:
        return out_of_tree
    return {**out_of_tree, **_cat_batch_ask(repo, wanted)}


def _cat_batch_ask(repo: Path, wanted: list[str]) -> dict[str, tuple[str, bytes] | None]:
    batch = _scope_batch(repo)
    if batch is not None:
        return {s: (o[1], o[2]) if o is not None else None for s, o in batch.query(wanted).items()}
    proc = run_git_bytes(["cat-file", "--batch"], repo,
                         input=("\n".join(wanted) + "\n").encode("utf-8"), timeout=120)
    out: dict[str, tuple[str, bytes] | None] = {}
    data = proc.stdout
    pos = 0
    for spec in wanted:
        nl = data.index(b"\n", pos)
        parts = data[pos:nl].decode("utf-8", "replace").split()
        pos = nl + 1
        if len(parts) != 3 or parts[-1] in ("missing", "ambiguous"):
            out[spec] = None
            continue
        size = int(parts[2])
        out[spec] = (parts[1], data[pos : pos + size])
        pos += size + 1
    return out


def read_blobs(repo: Path, specs: Iterable[str]) -> dict[str, bytes | None]:
    """Contents of ``<rev>:<path>`` objects in one ``git cat-file --batch`` call (None: missing
    or not a file)."""
    return {s: o[1] if o is not None and o[0] == "blob" else None
            for s, o in read_objects(repo, specs).items()}


def tree_entries(raw: bytes, oid_len: int) -> dict[str, tuple[str, bytes]]:
    """A raw tree object's ``{name: (mode, binary object id)}`` (``oid_len``: 20 or 32)."""
    out: dict[str, tuple[str, bytes]] = {}
    pos = 0
    while pos < len(raw):
        nul = raw.index(b"\0", pos)
        mode, _, name = raw[pos:nul].decode("utf-8", "surrogateescape").partition(" ")
        out[name] = (mode, raw[nul + 1: nul + 1 + oid_len])
        pos = nul + 1 + oid_len
    return out


def tree_modes(repo: Path, rev: str, paths: Iterable[str]) -> dict[str, str]:
    """``{path: mode}`` for the given paths (files or directories) that exist at ``rev``, as
    ``git ls-tree`` prints them (``040000`` for a directory), read from their parent trees."""
    wanted = sorted(set(paths))
    if not wanted:
        return {}
    trees = read_objects(repo, [f"{rev}:{_parent(p)}" for p in wanted])
    oid_len = _oid_len(repo, rev)
    modes: dict[str, str] = {}
    for p in wanted:
        tree = trees[f"{rev}:{_parent(p)}"]
        if tree is None or tree[0] != "tree" or not p or p.endswith("/"):
            continue
        entry = tree_entries(tree[1], oid_len).get(p.rsplit("/", 1)[-1])
        if entry is not None:
            modes[p] = entry[0].rjust(6, "0")
    return modes


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def _oid_len(repo: Path, rev: str) -> int:
    """Bytes of an object id in ``repo``: 32 in a SHA-256 repository, else 20."""
    if _fixed(f"{rev}:"):
        return len(rev) // 2
    fmt = run_git(["rev-parse", "--show-object-format"], repo, check=False).stdout.strip()
    return 32 if fmt == "sha256" else 20
