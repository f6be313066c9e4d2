"""A child that ends itself when its supervisor is gone (:func:`sm120kit.services.proctree.
exit_with_parent`, used by warmup's ranks) -- with real processes: SIGKILL the middle one."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from sm120kit.services.proctree import parent_alive

CHILD = (
    "import os, time\n"
    "from sm120kit.services.proctree import exit_with_parent\n"
    "exit_with_parent(os.getppid(), code=3, interval=0.1)\n"
    "print(os.getpid(), flush=True)\n"
    "time.sleep(60)\n"
)
MIDDLE = (
    "import subprocess, sys, time\n"
    f"p = subprocess.Popen([sys.executable, '-c', {CHILD!r}])\n"
    "time.sleep(60)\n"
)


def test_child_ends_when_its_supervisor_is_killed() -> None:
    mid = subprocess.Popen([sys.executable, "-c", MIDDLE], env=dict(os.environ))
    try:
        end = time.monotonic() + 30
        kids: list[psutil.Process] = []
        while time.monotonic() < end and not kids:
            kids = psutil.Process(mid.pid).children()
            time.sleep(0.05)
        assert kids, "the child never started"
        child = kids[0]
        time.sleep(1.0)  # the child is up and watching
        assert child.is_running() and parent_alive(mid.pid)
    finally:
        mid.kill()
        mid.wait()
    assert not parent_alive(mid.pid)
    gone, _ = psutil.wait_procs([child], timeout=5.0)
    assert gone, "the child outlived its supervisor"
