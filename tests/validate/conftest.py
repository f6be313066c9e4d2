"""Real OpenAI-compatible server processes for the validate tests (``fake_server.py``).

Each server is a subprocess on 127.0.0.1 at a port it picks; the tiny model behind it runs the
project's reference DCP math (an SM120 GPU and a real LLM cannot exist here). One process per
configuration, shared by the module's tests; started in parallel.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

SERVER = Path(__file__).with_name("fake_server.py")

# The reference and the correct server report one process start time, as two servers started by
# one script within a clock tick do (prometheus_client's resolution is 10 ms): validate must still
# tell them apart (by their request counters) and not refuse them as one process.
TICK = ["--start-time", "1764979200.00"]

CONFIGS = {
    "reference": ["--dcp", "1", *TICK],
    "correct": ["--dcp", "4", "--cp-kv-cache-interleave-size", "64", *TICK],
    "lse_base_e": ["--dcp", "4", "--cp-kv-cache-interleave-size", "64", "--merge-base", "e"],
    "keyed": ["--dcp", "4", "--cp-kv-cache-interleave-size", "64", "--api-key", "s3cret-key"],
    "short_reference": ["--dcp", "1", "--max-model-len", "1024"],
    "interleave_1": ["--dcp", "4", "--cp-kv-cache-interleave-size", "64", "--read-interleave", "1"],
}


def _start(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(SERVER), "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _port(p: subprocess.Popen[str], timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    assert p.stdout is not None
    line = p.stdout.readline()  # blocks until the server prints its port (or dies)
    if not line.startswith("PORT ") or time.monotonic() > deadline:
        err = p.stderr.read() if p.stderr else ""
        raise RuntimeError(f"fake server did not start: {line!r} {err[-2000:]}")
    return int(line.split()[1])


@pytest.fixture(scope="session")
def servers() -> Iterator[dict[str, str]]:
    procs = {name: _start(args) for name, args in CONFIGS.items()}
    try:
        yield {name: f"http://127.0.0.1:{_port(p)}" for name, p in procs.items()}
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
