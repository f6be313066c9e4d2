"""Real fork files (tests/data/fork-files/manifest.json) placed on real release trees.

The files are third-party source and are not committed: :func:`fork_file` reads one from
``$SM120KIT_FORK_FILES``, else ``<cache>/fork-files/``, checks its sha256 against the manifest and
skips the test, naming the file and where it comes from, when it is absent. :func:`scenario_repo`
clones the release repository (built from the cached PyPI wheel) and commits the fork files over
it on branch ``main``: a fork of that release.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from sm120kit.paths import cache_dir
from tests.support import releases
from tests.support.gitrepo import FORK_IDENTITY, git
from tests.support.paths import ROOT

MANIFEST = ROOT / "tests" / "data" / "fork-files" / "manifest.json"


def manifest() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(MANIFEST.read_text())
    return data


def fork_dir() -> Path:
    env = os.environ.get("SM120KIT_FORK_FILES")
    return Path(env) if env else cache_dir() / "fork-files"


def fork_file(name: str) -> bytes:
    entry = manifest()["files"][name]
    path = fork_dir() / name
    if not path.is_file():
        where = f"{entry['repo'] or 'a fork'}:{entry['path']}@{entry['commit'] or entry.get('index_id')}"
        pytest.skip(f"fork file {name} ({where}) is not in {fork_dir()} (third-party source, "
                    "kept out of the repository; see tests/data/fork-files/manifest.json)")
    data = path.read_bytes()
    assert hashlib.sha256(data).hexdigest() == entry["sha256"], f"{path} is not the recorded file"
    return data


def scenario_repo(tmp: Path, name: str) -> Path:
    """A git repository: the scenario's release (tag ``vX.Y.Z``), then one commit on ``main``
    that puts the scenario's fork files in place."""
    sc = manifest()["scenarios"][name]
    files = {rel: fork_file(f) for rel, f in sc["files"].items()}
    src = releases.repo(sc["release"])
    dest = tmp / name
    git(tmp, "clone", "-q", str(src), str(dest))
    git(dest, "checkout", "-q", "-B", "main")
    for rel, data in files.items():
        (dest / rel).write_bytes(data)
    git(dest, "commit", "-q", "-am", f"fork: {name}", identity=FORK_IDENTITY)
    return dest


def release_clone(tmp: Path, version: str, name: str = "release") -> Path:
    dest = tmp / name
    shutil.rmtree(dest, ignore_errors=True)
    git(tmp, "clone", "-q", str(releases.repo(version)), str(dest))
    git(dest, "checkout", "-q", "-B", "main")
    return dest
