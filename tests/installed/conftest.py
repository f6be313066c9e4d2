"""A real virtual environment per vLLM release with the release wheel really pip-installed.

``python -m venv --without-pip`` makes the environment; ``pip --python <venv> install --no-deps
--no-compile <cached wheel>`` installs vLLM exactly as a user's container has it (RECORD,
INSTALLER, the ``.so`` files and all), ~8-15 s per release. One environment per release is
shared by the tests of a module; every test starts from a verified pristine install (the
``pristine`` helper re-checks every touched file against RECORD and removes leftover state).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from sm120kit.facts.series import load_series
from sm120kit.patchset.installed import DEFAULT_STATE_SUBDIR, parse_record
from sm120kit.patchset.release import fetch_wheel, release_tree


@dataclass
class Env:
    version: str
    root: Path  # venv dir
    python: Path
    site: Path  # site-packages (holds vllm/)

    @property
    def pkg(self) -> Path:
        return self.site / "vllm"

    def touched(self) -> list[str]:
        series = load_series()
        alias = series.alias_for_release(self.version)
        assert alias
        return series.variant(series.targets[alias].variant).touched_files()


_HASHES: dict[tuple[str, int, int, int, int], str] = {}


def _file_sha(p: Path) -> str:
    # A file whose inode, size, mtime and ctime are all unchanged has unchanged bytes: ctime
    # cannot be set from user space and moves on every write, chmod, utime or replace. So the
    # ~500 MB of .so files are hashed once per test session, the touched files every time.
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
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            else:
                out[rel] = _file_sha(p)
        for d in dirnames:
            out.setdefault(str((Path(dirpath) / d).relative_to(root)) + "/", "dir")
    return out


def make_env(base: Path, version: str) -> Env:
    venv = base / f"venv-{version}"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    wheel = fetch_wheel("vllm", version)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps",
         "--no-compile", "--no-index", "--disable-pip-version-check", str(wheel)],
        check=True,
    )
    site = Path(subprocess.run([str(py), "-c", "import sysconfig;print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    assert (site / "vllm" / "__init__.py").is_file()
    release_tree("vllm", version)  # the release-tree hash check uses the cached tree
    return Env(version, venv, py, site)


def pristine(env: Env) -> Env:
    """Make sure ``env`` is an untouched install (undo what a failed earlier test left)."""
    shutil.rmtree(env.pkg / DEFAULT_STATE_SUBDIR, ignore_errors=True)
    dist = next(env.site.glob(f"vllm-{env.version}.dist-info"))
    record = parse_record((dist / "RECORD").read_text())
    tree = release_tree("vllm", env.version)
    for rel in env.touched():
        p = env.site / rel
        if hashlib.sha256(p.read_bytes()).hexdigest() != record[rel]:
            p.chmod(0o644)
            shutil.copyfile(tree / rel, p)
        assert hashlib.sha256(p.read_bytes()).hexdigest() == record[rel]
    return env


@pytest.fixture(scope="session")
def envs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Env]:
    base = tmp_path_factory.mktemp("venvs")
    return {v: make_env(base, v) for v in ("0.33.0", "0.34.0")}
