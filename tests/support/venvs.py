"""A real virtual environment per vLLM release with the release wheel really pip-installed.

``python -m venv --without-pip`` makes the environment; ``pip --python <venv> install --no-deps
--no-compile <cached wheel>`` installs vLLM exactly as a user's container has it (RECORD,
INSTALLER, the ``.so`` files and all), ~8-15 s per release. ``pristine`` re-checks every touched
file against RECORD and removes leftover state, so every test starts from a verified install.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sm120kit.models.series import load_series
from sm120kit.patchset.installed import DEFAULT_STATE_SUBDIR, parse_record
from sm120kit.patchset.release import fetch_wheel, release_tree
from tests.support.gitrepo import hash_tree

__all__ = ["Env", "hash_tree", "make_env", "pristine"]


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
