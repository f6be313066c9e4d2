"""Bring the message index's inputs (release wheels from PyPI) into a cache folder as plain source
trees: ``<cache>/trees/<project>-<version>/`` holding only the files the extractors read.

Downloads with ``pip download --no-deps --only-binary :all:`` (vLLM's sdists cannot be fetched by
pip without building their metadata, which needs the CUDA build toolchain; wheels carry the same
Python files), an sdist only for a release without a wheel; extracts the selected members,
deletes the download (never a wheel found in the test cache, which is only read). Nothing is
imported; pip prepares an sdist's metadata.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Source:
    project: str     # "vllm", "torch", ...
    dist: str        # the PyPI distribution name
    version: str
    globs: tuple[str, ...]   # members to keep (fnmatch on the path inside the wheel; "!" drops)

    def keeps(self, name: str) -> bool:
        if any(fnmatch.fnmatch(name, g[1:]) for g in self.globs if g.startswith("!")):
            return False
        return any(fnmatch.fnmatch(name, g) for g in self.globs if not g.startswith("!"))


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sm120kit" / "msgindex-src"


def _wheel_dirs() -> list[Path]:
    """Folders that may already hold release wheels (the test cache): read, never written."""
    out = []
    for env in ("SM120KIT_TEST_CACHE", "SM120KIT_CACHE"):
        v = os.environ.get(env)
        if v:
            out += [Path(v), Path(v) / "wheels"]
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    out += [Path(base) / "sm120kit" / "wheels", Path(base) / "sm120kit-test" / "wheels"]
    return [p for p in out if p.is_dir()]


def _find_wheel(src: Source) -> Path | None:
    stem = src.dist.replace("-", "_")
    for d in _wheel_dirs():
        for w in d.glob(f"{stem}-{src.version}-*.whl"):
            return w
    return None


def _download(src: Source, dest: Path) -> Path:
    """The release's wheel; a release published only as an sdist (older FlashInfer) is
    downloaded as one (pip prepares its metadata without build isolation: no build runs)."""
    base = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
            "-q", f"{src.dist}=={src.version}", "-d", str(dest)]
    r = subprocess.run(base + ["--only-binary", ":all:"], capture_output=True, text=True,
                       timeout=900)
    got = list(dest.glob("*.whl"))
    if r.returncode != 0 or not got:
        r = subprocess.run(base + ["--no-binary", ":all:", "--no-build-isolation"],
                           capture_output=True, text=True, timeout=900)
        got = list(dest.glob("*.tar.gz"))
    if r.returncode != 0 or not got:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no wheel or sdist"]
        raise RuntimeError(f"pip download {src.dist}=={src.version} failed: {tail[0]}")
    return got[0]


def _members(archive: Path) -> Iterator[tuple[str, bytes]]:
    """(path inside the package, bytes) of a wheel, or of an sdist with its top folder cut."""
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as z:
            for name in z.namelist():
                if not name.endswith("/"):
                    yield name, z.read(name)
        return
    with tarfile.open(archive, "r:gz") as t:
        for m in t.getmembers():
            f = t.extractfile(m) if m.isfile() else None
            if f is not None:
                yield m.name.split("/", 1)[-1], f.read()


def git_dir(repo: str) -> Path:
    """The local git mirror of ``owner/name`` (``$SM120KIT_GIT_MIRRORS/owner+name/repo``, default
    ``/work/.mirror``): read with ``git archive``, never written."""
    base = Path(os.environ.get("SM120KIT_GIT_MIRRORS") or "/work/.mirror")
    d = base / repo.replace("/", "+") / "repo"
    if not d.is_dir():
        raise RuntimeError(f"no git mirror of {repo} at {d} (set SM120KIT_GIT_MIRRORS)")
    return d


def _git_members(repo: str, tag: str) -> Iterator[tuple[str, bytes]]:
    """(path in the repository, bytes) of every file at ``tag`` (``git archive``)."""
    with tempfile.TemporaryFile() as f:
        subprocess.run(["git", "--git-dir", str(git_dir(repo)), "archive", "--format=tar", tag],
                       stdout=f, check=True, timeout=600)
        f.seek(0)
        with tarfile.open(fileobj=f, mode="r:") as t:
            for m in t.getmembers():
                fh = t.extractfile(m) if m.isfile() else None
                if fh is not None:
                    yield m.name, fh.read()


def tree(src: Source, cache: Path) -> Path:
    """The extracted tree of ``src`` (fetched once; a ``.complete`` stamp marks a whole one). A
    ``dist`` of ``git:owner/name`` is read from that repository's git mirror at tag
    ``v<version>`` (TGI's server is not on PyPI)."""
    root = cache / "trees" / f"{src.project}-{src.version}"
    stamp = root / ".complete"
    if stamp.exists():
        return root
    if root.exists():
        shutil.rmtree(root)
    cache.mkdir(parents=True, exist_ok=True)
    if src.dist.startswith("git:"):
        repo = src.dist[4:]
        for name, data in _git_members(repo, f"v{src.version}"):
            if src.keeps(name):
                out = root / name
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(data)
        root.mkdir(parents=True, exist_ok=True)
        stamp.write_text(f"{repo}@v{src.version} git\n")
        return root
    found = _find_wheel(src)
    with tempfile.TemporaryDirectory(dir=cache, prefix="dl-") as tmp:
        archive = found or _download(src, Path(tmp))
        for name, data in _members(archive):
            if src.keeps(name):
                out = root / name
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(data)
    root.mkdir(parents=True, exist_ok=True)
    stamp.write_text(f"{src.dist}=={src.version} {'test-cache' if found else 'pypi'}\n")
    return root
