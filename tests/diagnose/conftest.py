"""Fixtures for the diagnose tests: the real public vLLM logs (tests/data/vllm-logs) and their manifest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import VLLM_LOGS

LOG_DIR = VLLM_LOGS


def manifest() -> list[dict[str, Any]]:
    return list(json.loads((LOG_DIR / "manifest.json").read_text()))


@pytest.fixture(scope="session")
def log_dir() -> Path:
    return LOG_DIR
