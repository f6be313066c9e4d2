"""Release wheels, trees and repositories for tests, skipping only when PyPI is unreachable.

A test that needs a release calls these instead of ``sm120kit.patchset.release`` directly: when
the wheel is neither cached nor downloadable (offline), the test skips with that reason; every
other failure (a bug in the release code, a corrupt wheel) fails the test.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

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


#: a wheel PyPI did not have (a pin without a wheel for this platform, offline) is not tried
#: again, nor counted, for this long
UNAVAILABLE_TTL_S = 24 * 3600


def _unavailable_file() -> Path:
    return cache_dir() / "wheels" / "prefetch-unavailable.json"


def _unavailable() -> dict[str, dict[str, Any]]:
    import json
    import time

    try:
        got = json.loads(_unavailable_file().read_text())
    except (OSError, ValueError):
        return {}
    now = time.time()
    return {k: v for k, v in got.items() if isinstance(v, dict)
            and now - float(v.get("t") or 0) < UNAVAILABLE_TTL_S}


def _remember_unavailable(pv: tuple[str, str], why: str) -> None:
    import json
    import os
    import time

    got = _unavailable()
    got[f"{pv[0]}=={pv[1]}"] = {"t": time.time(), "why": why}
    dest = _unavailable_file()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}")
    tmp.write_text(json.dumps(got, indent=1))
    os.replace(tmp, dest)


def _todo(wheels: list[tuple[str, str]], skip: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """The wheels of ``wheels`` (and the FlashInfer pins of the vLLM wheels already cached) that
    the cache lacks, less those PyPI did not have on the last try."""
    want = list(dict.fromkeys(wheels))
    for pv in wheels:
        hit = release.find_cached_wheel(*pv) if pv[0] == "vllm" else None
        want += [p for p in (_pins(hit) if hit else []) if p not in want]
    return [pv for pv in want if release.find_cached_wheel(*pv) is None
            and f"{pv[0]}=={pv[1]}" not in skip]


def prefetch(say: Callable[[str], None], workers: int = 3, every: float = 5.0) -> None:
    """Download every wheel of :data:`SUITE_WHEELS` (and the FlashInfer pins) that the cache
    lacks, ``workers`` at a time. The first line counts only what will be fetched (a wheel PyPI
    did not have within :data:`UNAVAILABLE_TTL_S` is left out, and said so); each file then
    gets a line every ``every`` seconds while it downloads (megabytes so far) and one when it is
    done. A wheel that cannot be had is one line and no error: the tests that need it skip or
    fail on their own, as they would without the prefetch."""
    from concurrent.futures import ThreadPoolExecutor

    skip = _unavailable()
    todo = _todo(list(SUITE_WHEELS), skip)
    if skip:
        say(f"prefetch: not trying {len(skip)} wheel(s) PyPI did not have within a day: "
            + ", ".join(sorted(skip)))
    if not todo:
        return
    say(f"prefetch: fetching {len(todo)} release wheel(s) into {cache_dir()} "
        "(about 0.2-0.5 GB each for vLLM): " + ", ".join(f"{p} {v}" for p, v in todo))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        more: list[tuple[str, str]] = []
        for pins in pool.map(lambda x: _fetch_one(say, x[1], f"{x[0] + 1}/{len(todo)}", every),
                             enumerate(todo)):
            more += pins
        extra = sorted({p for p in more if p not in todo and release.find_cached_wheel(*p) is None
                        and f"{p[0]}=={p[1]}" not in skip})
        if extra:
            say(f"prefetch: fetching {len(extra)} more: the FlashInfer pins of those vLLM wheels")
            list(pool.map(lambda x: _fetch_one(say, x[1], f"+{x[0] + 1}/{len(extra)}", every),
                          enumerate(extra)))


def _fetch_one(say: Callable[[str], None], pv: tuple[str, str], tag: str,
               every: float) -> list[tuple[str, str]]:
    import time

    t0 = time.monotonic()
    last = [t0]

    def tick(nbytes: int) -> None:
        now = time.monotonic()
        if now - last[0] >= every:
            last[0] = now
            say(f"prefetch [{tag}] {pv[0]} {pv[1]}: {nbytes / 1e6:.0f} MB so far "
                f"({now - t0:.0f} s)")

    try:
        whl = release.fetch_wheel(*pv, ticker=tick)
    except UserError as exc:
        _remember_unavailable(pv, exc.message)
        say(f"prefetch [{tag}] {pv[0]} {pv[1]}: not fetched ({exc.message}); not tried again "
            "for a day")
        return []
    say(f"prefetch [{tag}] {pv[0]} {pv[1]}: {whl.stat().st_size / 1e6:.0f} MB in "
        f"{time.monotonic() - t0:.1f} s")
    return _pins(whl) if pv[0] == "vllm" else []
