"""Checks shared by the known-message tests (test_known_messages_engines.py, _infra.py): a log
that must be named by an entry of one catalogue file, and a healthy log that must stay exit 0."""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path

from sm120kit.diagnose.engine import diagnose

# a vLLM 0.9 API-server start as it prints it, and its ready lines: the frame the known-message
# tests put a message into
VLLM_START = (
    "INFO 06-10 09:12:01 [__init__.py:244] Automatically detected platform cuda.\n"
    "INFO 06-10 09:12:03 [api_server.py:1395] vLLM API server version 0.9.1\n"
    "INFO 06-10 09:12:03 [cli_args.py:325] non-default args: {'model': 'Qwen/Qwen3-8B', "
    "'tensor_parallel_size': 2}\n"
)
VLLM_READY = (
    "INFO 06-10 09:14:40 [api_server.py:1457] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
    "INFO:     Started server process [5012]\n"
    "INFO:     Waiting for application startup.\n"
    "INFO:     Application startup complete.\n"
)


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


def assert_top(category: str, rule: str, text: str, tmp_path: Path, name: str = "kept") -> None:
    """The top finding of ``text`` is ``category`` from ``rule`` (an older entry keeps its line)."""
    log = tmp_path / f"{name}.log"
    log.write_text(text)
    res = diagnose([log])
    assert res.findings, res.verdict
    top = res.findings[0]
    assert (top.category, top.rule) == (category, rule), (top.category, top.rule, top.summary)
