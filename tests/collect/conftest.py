"""Fixtures for the collect tests: a real multi-process gloo job (``gloo_job.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from .helpers import GLOO_JOB, kill_group, wait_for_ranks


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
