"""Release wheels, trees and repositories for tests, skipping only when PyPI is unreachable.

A test that needs a release calls these instead of ``sm120kit.patchset.release`` directly: when
the wheel is neither cached nor downloadable (offline), the test skips with that reason; every
other failure (a bug in the release code, a corrupt wheel) fails the test.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from sm120kit.errors import UserError
from sm120kit.patchset import release
from sm120kit.paths import cache_dir

T = TypeVar("T")


def _offline_skip(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except UserError as exc:
        if exc.message.startswith(("could not download", "pip download")):
            pytest.skip(f"network: {what} is not cached and cannot be downloaded: {exc.message}")
        raise


def wheel(project: str, version: str) -> Path:
    return _offline_skip(f"{project} {version}", lambda: release.fetch_wheel(project, version))


def tree(project: str, version: str) -> Path:
    return _offline_skip(f"{project} {version}", lambda: release.release_tree(project, version))


def repo(version: str) -> Path:
    return _offline_skip(f"vllm {version}", lambda: release.release_repo(version))


#: the release wheels the full suite reads (tests/runtime, tests/port, tests/patches, doctor,
#: installed, ...): fetched once, up front, by :func:`prefetch` when network tests are selected.
#: The FlashInfer releases vLLM pins are added from each vLLM wheel's METADATA.
SUITE_WHEELS: tuple[tuple[str, str], ...] = (
    *(("vllm", v) for v in ("0.34.0", "0.33.0", "0.32.0", "0.31.0", "0.30.0", "0.29.0",
                             "0.28.0", "0.27.1", "0.27.0", "0.26.0", "0.25.1", "0.25.0")),
    ("flashinfer-python", "0.6.13"), ("flashinfer-python", "0.6.14"),
    ("flashinfer-python", "0.7.2.post1"), ("nvidia-nccl-cu13", "2.32.3"),
)


def _pins(whl: Path) -> list[tuple[str, str]]:
    """``flashinfer-python==X`` pins in a vLLM wheel's METADATA."""
    import re
    import zipfile

    with zipfile.ZipFile(whl) as zf:
        meta = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA")), None)
        text = zf.read(meta).decode("utf-8", "replace") if meta else ""
    return [("flashinfer-python", v) for v in
            re.findall(r"^Requires-Dist: flashinfer-python==([^\s;]+)", text, re.M)]


def prefetch(say: Callable[[str], None], workers: int = 3) -> None:
    """Download every wheel of :data:`SUITE_WHEELS` (and the FlashInfer pins) that the cache
    lacks, ``workers`` at a time, one progress line per file. A wheel that cannot be had (offline,
    a pin that is not on PyPI) is one line and no error: the tests that need it skip or fail on
    their own, as they would without the prefetch."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    todo = [pv for pv in SUITE_WHEELS if release.find_cached_wheel(*pv) is None]
    if not todo:
        return
    say(f"prefetch: {len(todo)} release wheel(s) not cached yet "
        f"(cache {cache_dir()}; about 0.3-0.5 GB each for vLLM)")
    done: set[tuple[str, str]] = set()

    def one(pv: tuple[str, str]) -> list[tuple[str, str]]:
        t0 = time.monotonic()
        try:
            whl = release.fetch_wheel(*pv)
        except UserError as exc:
            say(f"prefetch: {pv[0]} {pv[1]}: not fetched ({exc.message})")
            return []
        mb = whl.stat().st_size / 1e6
        say(f"prefetch: {pv[0]} {pv[1]}: {mb:.0f} MB in {time.monotonic() - t0:.1f} s")
        return _pins(whl) if pv[0] == "vllm" else []

    with ThreadPoolExecutor(max_workers=workers) as pool:
        more: list[tuple[str, str]] = []
        for pins in pool.map(one, todo):
            more += pins
        done.update(todo)
        extra = sorted({p for p in more if p not in done
                        and release.find_cached_wheel(*p) is None})
        list(pool.map(one, extra))
