"""A regular wheel install carries the DCP series: ``sm120kit/_patches`` (a link to the project's
``patches/`` folder, followed when the wheel is built) is package data, and every file the
series loader reads from it matches a package-data pattern, so ``paths.patches_dir()`` finds the
series inside site-packages without ``SM120KIT_PATCHES``."""

from __future__ import annotations

import fnmatch
import tomllib

from sm120kit.models.series import load_series
from tests.support.paths import ROOT


def test_packaged_series_is_the_project_series() -> None:
    link = ROOT / "sm120kit" / "_patches"
    assert link.is_dir() and link.resolve() == (ROOT / "patches").resolve()


def test_every_series_file_is_package_data() -> None:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = cfg["tool"]["setuptools"]["package-data"]["sm120kit"]
    series = load_series(ROOT / "sm120kit" / "_patches")
    needed = ["manifest.json"] + [
        str(v.patch_path(p).relative_to(series.root)) for v in series.variants.values()
        for p in v.patches]
    for rel in needed:
        assert any(fnmatch.fnmatch(f"_patches/{rel}", g) for g in globs), rel
