"""Fixtures for the diagnose tests: the shared real vLLM logs and their manifest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import SHARED_LOGS

LOG_DIR = SHARED_LOGS


def manifest() -> list[dict[str, Any]]:
    if not (LOG_DIR / "manifest.json").is_file():
        return []
    return list(json.loads((LOG_DIR / "manifest.json").read_text()))


@pytest.fixture(scope="session")
def log_dir() -> Path:
    if not (LOG_DIR / "manifest.json").is_file():
        pytest.skip(f"shared vLLM log fixtures not found at {LOG_DIR}")
    return LOG_DIR
