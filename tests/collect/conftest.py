"""Fixtures for the collect tests: a real multi-process gloo job (``gloo_job.py``) and helpers
to wait for its ranks and to assert that nothing we started is left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

HERE = Path(__file__).resolve().parent
GLOO_JOB = HERE / "gloo_job.py"


def wait_for_ranks(root_pid: int, n: int, title: str = "VLLM::Worker_TP", timeout: float = 90.0,
                   line_file: Path | None = None) -> list[psutil.Process]:
    """Wait until ``n`` rank processes titled ``title<r>`` exist under root (and, when given,
    every rank logged 'entering all_reduce' / 'skipping' to ``line_file``)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            kids = psutil.Process(root_pid).children(recursive=True)
        except psutil.NoSuchProcess:
            kids = []
        ranks = []
        for k in kids:
            try:
                if " ".join(k.cmdline()).startswith(title):
                    ranks.append(k)
            except psutil.Error:
                pass
        if len(ranks) == n:
            if line_file is None:
                return ranks
            try:
                txt = line_file.read_text()
            except OSError:
                txt = ""
            if txt.count("entering all_reduce") + txt.count("skipping the next") >= n:
                return ranks
        time.sleep(0.2)
    raise AssertionError(f"{n} ranks titled {title!r} did not appear in {timeout}s")


def kill_group(p: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        pass


@pytest.fixture()
def gloo_stall(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], list[psutil.Process], Path]]:
    """A 3-rank gloo job where rank 1 never enters the 4th all_reduce; ranks 0 and 2 block in it.
    Writes Flight Recorder dumps (a thread in each rank) to ``tmp_path/fr/fr_<rank>``."""
    fr = tmp_path / "fr"
    fr.mkdir()
    log = tmp_path / "job.log"
    env = dict(os.environ, TORCH_FR_DUMP_TEMP_FILE=str(fr / "fr_"))
    with open(log, "wb") as out:
        p = subprocess.Popen([sys.executable, str(GLOO_JOB), "--world", "3", "--mode", "stall"],
                             env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ranks = wait_for_ranks(p.pid, 3, line_file=log)
        end = time.monotonic() + 30
        while len(list(fr.glob("fr_[0-9]"))) < 3 and time.monotonic() < end:
            time.sleep(0.2)
        yield p, ranks, log
    finally:
        kill_group(p)


def read_tarball(tb: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    with tarfile.open(tb) as tf:
        for m in tf.getmembers():
            if m.isfile():
                f = tf.extractfile(m)
                assert f is not None
                out[m.name.split("/", 1)[1]] = f.read()
    return out
