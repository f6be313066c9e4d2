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

from sm120kit.errors import UserError
from sm120kit.facts.series import Series, Variant, load_series

RELEASES = ["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"]

WS = "vllm/v1/attention/backends/mla/flashinfer_mla_sparse.py"
SM = "vllm/v1/attention/backends/mla/flashinfer_mla_sparse_sm120.py"
WU = "vllm/v1/worker/gpu/warmup.py"

SERIES_IDENTITY = {
    "GIT_COMMITTER_NAME": "sm120kit",
    "GIT_COMMITTER_EMAIL": "sm120kit@localhost",
    "GIT_COMMITTER_DATE": "2026-12-02T12:00:00+0000",
}


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(SERIES_IDENTITY)
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
                "GIT_TERMINAL_PROMPT": "0"})
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed in {cwd}:\n{proc.stderr}")
    return proc


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
    from sm120kit.patchset.release import release_repo

    try:
        base = release_repo(release)
    except UserError as exc:  # no wheel in the cache and PyPI unreachable
        pytest.skip(f"vLLM {release} wheel unavailable: {exc}")
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
