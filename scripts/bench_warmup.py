#!/usr/bin/env python3
"""Benchmark: ``sm120kit warmup run --dcp 8`` (reference backend, CPU, gloo) on this machine.

Each measurement is a fresh ``python -m sm120kit warmup run --json`` process, so the wall time
includes the interpreter, the launcher's torch import and the forked ranks (what a user waits
for). Figures:

* DCP = 8, fixed plan (GLM-5 shapes: 8 heads/rank, top-k 2048, kv_lora_rank 512 + rope 64):
  median wall time (target <= 20 s on the 2-core CI machine) and its ratio to a DCP = 1 run in
  the same session (the anchor);
* the merge cost relative to the local attention, per merge (``ag_rs``, ``a2a``): slowest rank's
  merge time / slowest rank's attend phase, for the warmup shape and for a longer context
  (``--seq-len 16384 --batch 4``, top-k fully used) where the attention has real work.

Exit 0 always: a benchmark reports, it does not judge.

    python scripts/bench_warmup.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any


def run(args: list[str]) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "sm120kit", "warmup", "run", "--json", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"warmup run {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return wall, json.loads(proc.stdout)


def bench(name: str, args: list[str], runs: int) -> dict[str, Any]:
    walls, inner, ratios_ag, ratios_a2a, attend, errs = [], [], [], [], [], []
    for _ in range(runs):
        w, d = run(args)
        walls.append(w)
        inner.append(d["timings"]["wall_s"])
        ratios_ag.append(d["timings"]["merge_over_attend"]["ag_rs"])
        ratios_a2a.append(d["timings"]["merge_over_attend"]["a2a"])
        attend.append(d["timings"]["phase_max_s"]["attend"])
        errs.append(max(e["max_abs"] for e in d["errors"].values()))
    res = {
        "name": name,
        "median_wall_s": statistics.median(walls),
        "median_supervised_s": statistics.median(inner),
        "median_attend_s": statistics.median(attend),
        "merge_ag_rs_over_attend": statistics.median(ratios_ag),
        "merge_a2a_over_attend": statistics.median(ratios_a2a),
        "max_abs_err": max(errs),
    }
    print(
        f"{name:<28} wall {res['median_wall_s']:6.2f}s  (supervised {res['median_supervised_s']:.2f}s)"
        f"  attend {res['median_attend_s'] * 1e3:7.1f} ms"
        f"  merge/attend ag_rs {res['merge_ag_rs_over_attend']:.2f}x"
        f"  a2a {res['merge_a2a_over_attend']:.2f}x  max err {res['max_abs_err']:.1e}",
        flush=True,
    )
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ns = ap.parse_args()
    anchor = bench("anchor: DCP 1 warmup", ["--dcp", "1"], ns.runs)
    dcp8 = bench("DCP 8 warmup (fixed plan)", ["--dcp", "8"], ns.runs)
    unp = bench("DCP 8 unpatched plan", ["--dcp", "8", "--plan", "unpatched"], ns.runs)
    long = bench(
        "DCP 8 seq 16384 batch 4", ["--dcp", "8", "--seq-len", "16384", "--batch", "4"], ns.runs
    )
    print()
    print(f"DCP 8 warmup wall: {dcp8['median_wall_s']:.2f}s (target <= 20 s)")
    print(f"DCP 8 / DCP 1 wall ratio: {dcp8['median_wall_s'] / anchor['median_wall_s']:.2f}x")
    print(
        "merge / local attention: warmup shape ag_rs "
        f"{dcp8['merge_ag_rs_over_attend']:.2f}x a2a {dcp8['merge_a2a_over_attend']:.2f}x; "
        f"long context ag_rs {long['merge_ag_rs_over_attend']:.2f}x "
        f"a2a {long['merge_a2a_over_attend']:.2f}x"
    )
    print(f"unpatched / fixed attend time: {unp['median_attend_s'] / dcp8['median_attend_s']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
