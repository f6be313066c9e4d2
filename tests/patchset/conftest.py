"""Fixtures for the patch engine: real release repos (from the cached PyPI wheel) and a small real
series made with ``git format-patch --full-index`` on a clone of one.

Nothing here is a mock: the series is genuine format-patch output against vLLM 0.34.0's real
sources, and every target is a real git repository in a tmp dir."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sm120kit.patchset.release import release_repo
from tests.support.gitrepo import git
from tests.support.miniseries import TEST_VERSION, MiniSeries, build_series


@pytest.fixture(scope="session")
def release34() -> Path:
    return release_repo(TEST_VERSION)


@pytest.fixture(scope="session")
def mini_series_master(tmp_path_factory: pytest.TempPathFactory, release34: Path) -> MiniSeries:
    return build_series(tmp_path_factory.mktemp("series"), release34)


@pytest.fixture()
def mini_series(tmp_path: Path, mini_series_master: MiniSeries, monkeypatch: pytest.MonkeyPatch) -> MiniSeries:
    """A private copy of the test series (tests may tamper with it); SM120KIT_PATCHES points at it."""
    root = tmp_path / "patches"
    shutil.copytree(mini_series_master.root, root)
    monkeypatch.setenv("SM120KIT_PATCHES", str(root))
    vdir = root / "v-test"
    return MiniSeries(root, vdir, sorted(vdir.glob("*.patch")), mini_series_master.alias)


@pytest.fixture()
def checkout(tmp_path: Path, release34: Path) -> Path:
    """A user's vLLM checkout: a clone of the 0.34.0 release repo (tag v0.34.0), with identity."""
    dest = tmp_path / "vllm"
    git(tmp_path, "clone", "-q", str(release34), str(dest))
    git(dest, "config", "user.name", "User")
    git(dest, "config", "user.email", "user@example.invalid")
    return dest
