"""Helpers for the collect tests: start the real gloo job, wait for its ranks, read bundles,
check that nothing we started is left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import psutil

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
    tail = line_file.read_text(errors="replace")[-3000:] if line_file and line_file.exists() else ""
    raise AssertionError(f"{n} ranks titled {title!r} did not appear in {timeout}s\n{tail}")


def kill_group(p: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        pass



def leftovers(procs_json: dict[str, dict]) -> list[int]:
    """Pids from a bundle's processes.json that still run (same pid and start time)."""
    left = []
    for pid_s, info in procs_json.items():
        try:
            p = psutil.Process(int(pid_s))
            if abs(p.create_time() - float(info["create_time"])) < 0.05 and \
                    p.status() != psutil.STATUS_ZOMBIE:
                left.append(int(pid_s))
        except psutil.Error:
            pass
    return left


def run_collect(args: list[str], *, env: dict[str, str] | None = None, timeout: float = 120,
                cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m sm120kit collect ARGS`` as a real subprocess (own signal handling)."""
    return subprocess.run([sys.executable, "-m", "sm120kit", "collect", *args], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)


def only_bundle(out: Path) -> Path:
    tbs = sorted(out.glob("sm120kit-bundle-*.tar.gz"))
    assert len(tbs) == 1, list(out.iterdir()) if out.exists() else "no out dir"
    return tbs[0]


def read_tarball(tb: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    with tarfile.open(tb) as tf:
        for m in tf.getmembers():
            if m.isfile():
                f = tf.extractfile(m)
                assert f is not None
                out[m.name.split("/", 1)[1]] = f.read()
    return out
