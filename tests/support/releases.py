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
