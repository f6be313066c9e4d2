#!/usr/bin/env python3
"""Benchmark ``sm120kit apply`` against raw ``git am -3`` of the same patch files, same run.

On a real release repository (the PyPI wheel's ``vllm/`` tree, cached by sm120kit), every round
makes two fresh clones (not timed) and times, in alternating order:

* anchor: ``git am -3 <the variant's patch files>`` in clone A (what a user would type);
* ``python -m sm120kit apply --branch ALIAS --repo B`` (the whole CLI: interpreter start,
  checksum + path checks, dirty check, markers, sparse worktree, ``git am -3``, branch);
* ``sm120kit apply`` in-process (library call, no interpreter start), for reference;
* ``python -m sm120kit status`` on the unpatched clone (every patch checked with ``git apply``)
  and on the patched branch.

Each is timed twice over: wall clock and CPU time (user + sys of the process and the children
it waited for, ``getrusage``; a loaded box inflates it much less than wall time). Prints the
absolute medians of both, the apply/anchor ratios of both (target ≤ 1.5× wall), the load
average before and after, and status times (target < 0.5 s).

    python scripts/bench_apply.py [--release 0.34.0] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sm120kit.gitrun import git_env  # noqa: E402
from sm120kit.models.series import load_series  # noqa: E402
from sm120kit.patchset.release import release_repo  # noqa: E402


def _cpu(who: int = resource.RUSAGE_CHILDREN) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one fresh process."""
    c0, t0 = _cpu(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    dt, dc = time.perf_counter() - t0, _cpu() - c0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return dt, dc


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--release", default="0.34.0")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()

    alias = f"vllm-{args.release}"
    series = load_series()
    target, variant = series.targets[alias], series.variant(series.targets[alias].variant)
    patch_files = [str(variant.patch_path(p)) for p in variant.patches]
    src = release_repo(args.release, progress=lambda m: print(m, file=sys.stderr))
    env = git_env()
    env.setdefault("SM120KIT_PATCHES", str(series.root))
    py = sys.executable
    am = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "am", "-3", "-q",
          *patch_files]
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in
                                     ("git am -3", "sm120kit apply", "apply (in-process)",
                                      "status (unpatched)", "status (patched)")}
    from sm120kit.patchset.apply import apply_to_checkout

    load_before = _load()
    with tempfile.TemporaryDirectory(prefix="sm120kit-bench-") as td:
        base = Path(td)
        for i in range(args.rounds + 1):  # round 0 warms caches and is dropped
            a, b, c = base / f"a{i}", base / f"b{i}", base / f"c{i}"
            for d in (a, b, c):
                subprocess.run(["git", "clone", "-q", str(src), str(d)], check=True, env=env)
            order = ["am", "apply"] if i % 2 else ["apply", "am"]
            got: dict[str, tuple[float, float]] = {}
            got["status (unpatched)"] = _run([py, "-m", "sm120kit", "status", "--repo", str(b)], b, env)
            for what in order:
                if what == "am":
                    got["git am -3"] = _run(am, a, env)
                else:
                    got["sm120kit apply"] = _run(
                        [py, "-m", "sm120kit", "apply", "--branch", alias, "--repo", str(b)], b, env
                    )
            c0, t0 = _cpu() + _cpu(resource.RUSAGE_SELF), time.perf_counter()
            apply_to_checkout(series, alias, c)
            got["apply (in-process)"] = (time.perf_counter() - t0,
                                         _cpu() + _cpu(resource.RUSAGE_SELF) - c0)
            subprocess.run(["git", "checkout", "-q", f"sm120kit/dcp-{alias}"], cwd=b, check=True, env=env)
            got["status (patched)"] = _run([py, "-m", "sm120kit", "status", "--repo", str(b)], b, env)
            if i:
                for k, v in got.items():
                    times[k].append(v)
            for d in (a, b, c):
                shutil.rmtree(d)
    med = {k: statistics.median(w for w, _ in v) for k, v in times.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in times.items()}
    print(f"release {args.release}, variant {variant.name} ({len(patch_files)} patches), "
          f"{args.rounds} rounds, {os.cpu_count()} CPUs, load (1/5/15 min) {load_before} before, "
          f"{_load()} after; medians:")
    for k, m in med.items():
        walls = [w for w, _ in times[k]]
        print(f"  {k:<20} wall {m * 1000:8.1f} ms (min {min(walls) * 1000:.1f}, max "
              f"{max(walls) * 1000:.1f})   cpu {cpu[k] * 1000:8.1f} ms")
    am_w, am_c = med["git am -3"], cpu["git am -3"]
    print(f"ratio sm120kit apply / git am -3: {med['sm120kit apply'] / am_w:.2f}x wall, "
          f"{cpu['sm120kit apply'] / am_c:.2f}x cpu (target <= 1.5x wall); in-process: "
          f"{med['apply (in-process)'] / am_w:.2f}x wall, {cpu['apply (in-process)'] / am_c:.2f}x cpu")
    print(f"status: {med['status (unpatched)']:.3f} s unpatched, {med['status (patched)']:.3f} s "
          "patched (target < 0.5 s)")
    print(f"(target {target.alias})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
