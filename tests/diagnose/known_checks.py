"""Checks shared by the known-message tests (test_known_messages_engines.py, _infra.py): a log
that must be named by an entry of one catalogue file, and a healthy log that must stay exit 0."""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path

from sm120kit.diagnose.engine import diagnose


@cache
def entry_ids(known: Path) -> frozenset[str]:
    """The entry ids of one catalogue file (read once per file)."""
    return frozenset(e["id"] for e in tomllib.loads(known.read_text())["entry"])


def assert_named(known: Path, name: str, expected: str, text: str, tmp_path: Path) -> None:
    log = tmp_path / f"{name}.log"
    log.write_text(text)
    res = diagnose([log])
    assert res.exit_code == 1 and res.findings, res.verdict
    top = res.findings[0]
    assert top.category == expected, (top.category, top.rule, top.summary)
    assert top.rule in entry_ids(known), (top.rule, f"the answer must come from {known.name}")
    assert 0.35 <= top.confidence <= 0.8, top.confidence


def assert_healthy(name: str, text: str, tmp_path: Path) -> None:
    log = tmp_path / f"{name}.log"
    log.write_text(text)
    res = diagnose([log])
    assert res.exit_code == 0 and not res.findings, res.verdict
