"""Release wheels from PyPI and the Python trees unpacked from them, cached.

``fetch_wheel("vllm", "0.34.0")`` runs ``pip download --no-deps`` into ``<cache>/wheels`` (once);
``release_tree("vllm", "0.34.0")`` unpacks the wheel's ``.py`` files (plus its ``*.dist-info``) into
``<cache>/trees/vllm-0.34.0/`` and returns that directory (it holds ``vllm/`` and the dist-info).
Both are safe to call concurrently from several processes (a lock file per artifact).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sm120kit.errors import UserError
from sm120kit.gitrun import run_git
from sm120kit.paths import cache_dir

_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


def _norm(project: str) -> str:
    return re.sub(r"[-_.]+", "_", project).lower()


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock file ``<path>.lock`` (several processes building one artifact)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def find_cached_wheel(project: str, version: str) -> Path | None:
    wheels = cache_dir() / "wheels"
    if not wheels.is_dir():
        return None
    prefix = f"{_norm(project)}-{version}-"
    for p in sorted(wheels.iterdir()):
        if p.suffix == ".whl" and p.name.lower().startswith(prefix.lower()):
            return p
    return None


def fetch_wheel(
    project: str,
    version: str,
    *,
    progress: Callable[[str], None] | None = None,
    quiet: bool = True,
    ticker: Callable[[int], None] | None = None,
) -> Path:
    """Download ``project==version`` (no deps, any platform wheel) into the cache; return the path.

    ``ticker``: called every few seconds while pip downloads, with the bytes it has so far (pip
    writes the file under its own temporary directory, which is pointed into ours)."""
    if not (_NAME_RE.match(project) and _NAME_RE.match(version)):
        raise UserError(f"invalid package spec {project}=={version}")
    hit = find_cached_wheel(project, version)
    if hit:
        return hit
    wheels = cache_dir() / "wheels"
    with locked(wheels / f"{_norm(project)}-{version}"):
        hit = find_cached_wheel(project, version)
        if hit:
            return hit
        tmp = wheels / f".dl-{_norm(project)}-{version}-{os.getpid()}"
        tmp.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--disable-pip-version-check", "-d", str(tmp), f"{project}=={version}",
        ]
        if quiet and progress is None:
            cmd.insert(4, "-q")
        if progress:
            progress(f"downloading {project}=={version} from PyPI")
        try:
            proc = _pip_download(cmd, tmp, show=bool(progress and not quiet), ticker=ticker,
                                 every=PIP_POLL_S)
        except subprocess.TimeoutExpired as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise UserError(f"pip download {project}=={version} timed out") from exc
        got = [p for p in tmp.iterdir() if p.suffix == ".whl"]
        if proc.returncode != 0 or not got:
            shutil.rmtree(tmp, ignore_errors=True)
            last = (proc.stderr or "").strip().splitlines()[-1:] or ["no wheel"]
            raise UserError(
                f"could not download {project}=={version}: {last[0]}",
                hint="check network access to PyPI, or put the wheel into "
                f"{wheels} (SM120KIT_CACHE)",
            )
        dest = wheels / got[0].name
        os.replace(got[0], dest)
        shutil.rmtree(tmp, ignore_errors=True)
        return dest


#: seconds between two looks at a running ``pip download`` (for ``fetch_wheel``'s ticker)
PIP_POLL_S = 1.0


def _pip_download(cmd: list[str], tmp: Path, *, show: bool,
                  ticker: Callable[[int], None] | None, timeout: float = 1800.0,
                  every: float = 3.0) -> subprocess.CompletedProcess[str]:
    """Run ``pip download`` (bounded by ``timeout``); with ``ticker``, its temporary files live
    under ``tmp/pip-tmp`` and their size is reported every ``every`` seconds."""
    if ticker is None:
        return subprocess.run(cmd, stdout=None if show else subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=timeout)
    import time

    work = tmp / "pip-tmp"
    work.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(work)}
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env) as proc:
        end = time.monotonic() + timeout
        while True:
            try:
                out, err = proc.communicate(timeout=every)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() > end:
                    proc.kill()
                    proc.communicate()
                    raise
                ticker(_tree_bytes(tmp))
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _tree_bytes(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                continue
    return total


def unpack_python_files(wheel: Path, dest: Path, *, include_dist_info: bool = True) -> Path:
    """Extract only ``*.py`` files (and the dist-info) of ``wheel`` into ``dest`` (atomic)."""
    if dest.is_dir() and (dest / ".complete").exists():
        return dest
    with locked(dest):
        if dest.is_dir() and (dest / ".complete").exists():
            return dest
        tmp = dest.with_name(dest.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        import zipfile  # only to unpack a wheel (apply imports this module: ~2 ms)

        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                name = info.filename
                if name.endswith("/") or name.startswith("/") or ".." in Path(name).parts:
                    continue
                top = name.split("/", 1)[0]
                is_dist = top.endswith(".dist-info")
                if not (name.endswith(".py") or (include_dist_info and is_dist)):
                    continue
                target = tmp / name
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
        (tmp / ".complete").write_text(wheel.name + "\n")
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
    return dest


def release_tree(
    project: str, version: str, *, progress: Callable[[str], None] | None = None
) -> Path:
    """The unpacked Python tree of a release wheel (cached): ``<cache>/trees/<project>-<version>``."""
    dest = cache_dir() / "trees" / f"{_norm(project)}-{version}"
    if (dest / ".complete").exists():
        return dest
    wheel = fetch_wheel(project, version, progress=progress)
    return unpack_python_files(wheel, dest)


# A fixed identity and date make the release commit reproducible: the same wheel gives the same
# commit id on every machine.
_RELEASE_ENV = {
    "GIT_AUTHOR_NAME": "sm120kit",
    "GIT_AUTHOR_EMAIL": "sm120kit@localhost",
    "GIT_COMMITTER_NAME": "sm120kit",
    "GIT_COMMITTER_EMAIL": "sm120kit@localhost",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000",
}


def _git(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = run_git(args, cwd, check=False, env=env, ceiling=True)
    if proc.returncode != 0:
        raise UserError(f"git {' '.join(args[:2])} failed in {cwd}: {proc.stderr.strip()[:300]}")
    return proc.stdout


def release_repo(version: str, *, progress: Callable[[str], None] | None = None) -> Path:
    """A cached git repository of vLLM ``version``'s Python tree, tagged ``v<version>``.

    The repository root holds ``vllm/`` exactly as upstream's git checkout lays it out, so the
    series' paths (``vllm/v1/...``) and blob ids match. Callers must not modify it: clone it
    (``git clone --shared``) or add a worktree.
    """
    dest = cache_dir() / "repos" / f"vllm-{version}"
    if (dest / ".git" / "sm120kit-complete").exists():
        return dest
    tree = release_tree("vllm", version, progress=progress)
    with locked(dest):
        if (dest / ".git" / "sm120kit-complete").exists():
            return dest
        if progress:
            progress(f"building git repository of vllm {version} at {dest}")
        tmp = dest.with_name(dest.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        shutil.copytree(tree / "vllm", tmp / "vllm")
        _git(["init", "-q", "-b", "main"], tmp)
        _git(["config", "user.name", "sm120kit"], tmp)
        _git(["config", "user.email", "sm120kit@localhost"], tmp)
        _git(["config", "core.autocrlf", "false"], tmp)
        _git(["add", "-A", "vllm"], tmp)
        _git(
            ["commit", "-q", "--no-verify", "-m", f"vLLM {version} (Python files of the PyPI wheel)"],
            tmp,
            env=_RELEASE_ENV,
        )
        _git(["tag", f"v{version}"], tmp)
        (tmp / ".git" / "sm120kit-complete").write_text(version + "\n")
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
    return dest
