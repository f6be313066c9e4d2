"""Fixtures for the DCP series tests: every covered vLLM release as a real git repository (built
from the cached PyPI wheel by ``release_repo``), cloned into a tmp dir, with the release's
variant applied by plain ``git am -3``. Nothing is mocked.

The committer identity and date are those the series was authored with, so ``git am`` recreates
the authoring commits byte for byte on the variant's base release (``test_reexport_*`` uses it).
"""

from __future__ import annotations

import ast
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from sm120kit.models.series import Series, Variant, load_series
from tests.support import releases
from tests.support.gitrepo import SERIES_IDENTITY, git_proc
from tests.support.paths import SM, WS, WU  # noqa: F401  (the series tests import them from here)

RELEASES = ["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"]




def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``git`` as the series' committer, no global config (``git am`` recreates its commits)."""
    return git_proc(cwd, *args, check=check,
                    identity={**SERIES_IDENTITY, "GIT_CONFIG_GLOBAL": os.devnull})


@dataclass
class Applied:
    """One release with its variant applied: ``tree`` (patched clone) and ``base`` (unpatched)."""

    release: str
    variant: Variant
    tree: Path
    base: Path
    am_output: str

    def patched(self, rel: str) -> str:
        return (self.tree / rel).read_text(encoding="utf-8")

    def upstream(self, rel: str) -> str:
        return (self.base / rel).read_text(encoding="utf-8")

    def at(self, n_patches: int, rel: str) -> str:
        """``rel`` after the first ``n_patches`` patches (0 = upstream)."""
        back = len(self.variant.patches) - n_patches
        return git(self.tree, "show", f"HEAD~{back}:{rel}").stdout

    def patched_ast(self, rel: str) -> ast.Module:
        return ast.parse(self.patched(rel), filename=rel)

    def upstream_ast(self, rel: str) -> ast.Module:
        return ast.parse(self.upstream(rel), filename=rel)


@pytest.fixture(scope="session")
def series() -> Series:
    return load_series()


def variant_of(series: Series, release: str) -> Variant:
    return series.variant(series.targets[f"vllm-{release}"].variant)


_APPLIED: dict[str, Applied] = {}


def _apply(series: Series, release: str, workdir: Path) -> Applied:
    base = releases.repo(release)
    variant = variant_of(series, release)
    tree = workdir / f"vllm-{release}"
    git(workdir, "clone", "-q", "--shared", str(base), str(tree))
    patches = [str(variant.patch_path(p)) for p in variant.patches]
    proc = git(tree, "am", "-3", *patches, check=False)
    if proc.returncode != 0:
        git(tree, "am", "--abort", check=False)
        raise AssertionError(f"git am -3 of {variant.name} onto {release} failed:\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return Applied(release, variant, tree, base, proc.stdout + proc.stderr)


def get_applied(series: Series, release: str, factory: pytest.TempPathFactory) -> Applied:
    """The release's variant applied with ``git am -3`` (once per release per session)."""
    if release not in _APPLIED:
        _APPLIED[release] = _apply(series, release, factory.mktemp("dcp-series"))
    return _APPLIED[release]


@pytest.fixture(params=RELEASES)
def applied(request: pytest.FixtureRequest, series: Series,
            tmp_path_factory: pytest.TempPathFactory) -> Applied:
    return get_applied(series, request.param, tmp_path_factory)
