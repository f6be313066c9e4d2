"""The suite's up-front wheel download (``tests/support/releases.prefetch``) against PyPI, with a
small real wheel (unidiff, a dependency of sm120kit) and a version that does not exist: it
counts only what it will fetch, says how far each download is while it runs, and does not count
(nor try) a wheel PyPI did not have again within a day."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.patchset import release
from tests.support import releases


@pytest.mark.network
def test_prefetch_counts_what_it_fetches_and_shows_progress(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SM120KIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(release, "PIP_POLL_S", 0.05)
    wheels = (("unidiff", "0.7.5"), ("unidiff", "0.0.999"))
    monkeypatch.setattr(releases, "SUITE_WHEELS", wheels)
    lines: list[str] = []
    releases.prefetch(lines.append, workers=2, every=0.0)
    if any("unidiff 0.7.5: not fetched" in ln for ln in lines):
        pytest.skip(f"network: PyPI unreachable: {lines}")
    assert lines[0].startswith("prefetch: fetching 2 release wheel(s)"), lines
    assert any("[1/2] unidiff 0.7.5:" in ln and "MB in" in ln for ln in lines), lines
    assert any("unidiff 0.7.5:" in ln and "so far" in ln for ln in lines), lines
    assert any("[2/2] unidiff 0.0.999: not fetched" in ln for ln in lines), lines
    assert release.find_cached_wheel("unidiff", "0.7.5") is not None
    # the next run: nothing to fetch, the missing one named and not counted
    again: list[str] = []
    releases.prefetch(again.append)
    assert len(again) == 1 and again[0].startswith("prefetch: not trying 1 wheel(s)"), again
    assert "unidiff==0.0.999" in again[0]
