"""Fixtures for the diagnose tests: the shared real vLLM logs and their manifest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

LOG_DIR = Path(__file__).resolve().parents[3] / "shared" / "data" / "vllm-logs"
if not LOG_DIR.is_dir():  # checkout not under /work/main
    LOG_DIR = Path("/work/shared/data/vllm-logs")


def manifest() -> list[dict[str, Any]]:
    if not (LOG_DIR / "manifest.json").is_file():
        return []
    return list(json.loads((LOG_DIR / "manifest.json").read_text()))


@pytest.fixture(scope="session")
def log_dir() -> Path:
    if not (LOG_DIR / "manifest.json").is_file():
        pytest.skip(f"shared vLLM log fixtures not found at {LOG_DIR}")
    return LOG_DIR
