"""Benchmark ``sm120kit collect --ray``: command to finished bundle on a real multi-node Ray
cluster on this machine (Ray's in-process cluster utility, ``tests/collect/ray_ranks.py``), with
DCP warmup ranks (gloo) as actors spread over the nodes and one of them stalled.

For 2 and 3 nodes: the median wall time of ``collect --ray ADDRESS`` (process start to exit,
bundle written) over ``--repeats`` runs, as a ratio against an anchor measured in the same
cluster: one sequential plain ``py-spy dump`` of every rank (the least any stack collection of
these processes costs), plus the absolute seconds for the record (target: < 15 s at the
default ``--deadline`` on a 2-core box).

    python scripts/bench_collect_ray.py [--nodes 2 3] [--world 3] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "collect"))

import ray_ranks  # noqa: E402

from sm120kit.evidence.stacks import py_spy_path  # noqa: E402


def anchor(pids: list[int]) -> float:
    exe = py_spy_path()
    if exe is None:
        raise SystemExit("py-spy is not installed")
    t0 = time.monotonic()
    for pid in pids:
        subprocess.run([exe, "dump", "--pid", str(pid)], capture_output=True, timeout=60)
    return time.monotonic() - t0


def one(n_nodes: int, world: int, repeats: int, tmp: Path) -> dict[str, Any]:
    import ray

    with ray_ranks.cluster(n_nodes) as c:
        nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
        progress = tmp / f"progress-{n_nodes}.jsonl"
        _a, _r, where = ray_ranks.start_ranks(world, nodes, (1, "merge"), progress)
        ray_ranks.wait_stalled(progress, world, 1)
        a = anchor([w["pid"] for w in where.values()])
        walls = []
        for i in range(repeats):
            out = tmp / f"out-{n_nodes}-{i}"
            t0 = time.monotonic()
            r = subprocess.run([sys.executable, "-m", "sm120kit", "collect", "--ray", c.address,
                                "-o", str(out), "--ray-worker-class", "DcpWarmupRank",
                                "--no-ray-local", "--json"],
                               capture_output=True, text=True, timeout=300)
            walls.append(time.monotonic() - t0)
            if r.returncode != 0:
                raise SystemExit(f"collect --ray failed:\n{r.stderr[-3000:]}")
            res = json.loads(r.stdout)
            bad = [n for n in res["nodes"] if n["status"] != "ok"]
            if bad:
                raise SystemExit(f"nodes not collected: {bad}")
    med = statistics.median(walls)
    return {"nodes": n_nodes, "ranks": world, "command_to_bundle_s": round(med, 2),
            "runs_s": [round(w, 2) for w in walls], "anchor_pyspy_s": round(a, 2),
            "ratio_vs_anchor": round(med / a, 1) if a > 0 else None}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--world", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-collect-ray-") as d:
        for n in a.nodes:
            rows.append(one(n, a.world, a.repeats, Path(d)))
            print(json.dumps(rows[-1]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
