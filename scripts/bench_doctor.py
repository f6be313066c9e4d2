#!/usr/bin/env python3
"""Benchmark: cold ``sm120kit doctor --json`` (tiers 0-1) vs ``python -m torch.utils.collect_env``.

Each run is a fresh process (cold interpreter, warm OS page cache). Wall time and peak RSS come
from ``os.wait4`` per child. Targets (issue 33): doctor >= 15x faster than the anchor, < 0.3 s,
< 80 MB RSS. Prints medians and the ratios; exit 0 always (a benchmark reports, it does not
judge).

    python scripts/bench_doctor.py [--runs 7] [--anchor-runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time


def run_once(cmd: list[str]) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MB, exit status) of one fresh process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, ru.ru_maxrss / 1024.0, proc.returncode


def bench(name: str, cmd: list[str], runs: int) -> dict[str, float]:
    walls, rss = [], []
    rc = 0
    for _ in range(runs):
        w, r, rc = run_once(cmd)
        walls.append(w)
        rss.append(r)
    res = {"median_s": statistics.median(walls), "min_s": min(walls),
           "max_rss_mb": max(rss), "rc": rc}
    print(f"{name:<34} median {res['median_s']:.3f} s  min {res['min_s']:.3f} s  "
          f"peak RSS {res['max_rss_mb']:.1f} MB  (exit {rc}, {runs} runs)")
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--anchor-runs", type=int, default=3)
    a = ap.parse_args()
    exe = shutil.which("sm120kit")
    doctor = [exe, "doctor", "--json"] if exe else [sys.executable, "-m", "sm120kit", "doctor",
                                                   "--json"]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.2f}")
    bench("python -c pass (interpreter floor)", [sys.executable, "-c", "pass"], a.runs)
    d = bench("sm120kit doctor --json", doctor, a.runs)
    t = bench("python -m torch.utils.collect_env", [sys.executable, "-m",
                                                    "torch.utils.collect_env"], a.anchor_runs)
    ratio = t["median_s"] / d["median_s"] if d["median_s"] else float("inf")
    print(f"ratio collect_env / doctor: {ratio:.1f}x (target >= 15x): "
          f"{'met' if ratio >= 15 else 'MISSED'}")
    print(f"doctor median {d['median_s']:.3f} s (target < 0.3 s): "
          f"{'met' if d['median_s'] < 0.3 else 'MISSED'}")
    print(f"doctor peak RSS {d['max_rss_mb']:.1f} MB (target < 80 MB): "
          f"{'met' if d['max_rss_mb'] < 80 else 'MISSED'}; collect_env {t['max_rss_mb']:.1f} MB "
          f"({t['max_rss_mb'] / d['max_rss_mb']:.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
