"""Benchmark ``sm120kit collect --ray``: command to finished bundle on a real multi-node Ray
cluster on this machine (Ray's in-process cluster utility, ``tests/collect/ray_ranks.py``), with
DCP warmup ranks (gloo) as actors spread over the nodes and one of them stalled.

For 2 and 3 nodes: the median wall time of ``collect --ray ADDRESS`` (process start to exit,
bundle written) over ``--repeats`` runs, as a ratio against an anchor measured in the same
cluster: one sequential plain ``py-spy dump`` of every rank (the least any stack collection of
these processes costs), plus the absolute seconds for the record (target: < 15 s at the
default ``--deadline`` on a 2-core box).

Then the time to refuse an address that is not a Ray GCS (issue 23 item 2), each a real server:
a silent TCP listener, an HTTP/1 server (a dashboard-like port), the cluster's own dashboard port
and a raylet's gRPC port; as a ratio against an anchor measured in the same run: ``collect --ray``
at a closed port (connection refused: interpreter, ``ray`` import and one TCP connect, the least
any refusal costs). The silent listener is bounded by the probe's 8 s cap, not by ``--deadline``.

The nodes are Ray's in-process cluster utility (a GCS and one raylet process per node, each with
its own node id and ports, as separate ``ray start`` nodes have), not the ``ray start`` CLI: a
second ``ray start`` on one host needs its own temp dir and port set per node, which the utility
does.

    python scripts/bench_collect_ray.py [--nodes 2 3] [--world 3] [--repeats 3]
"""

from __future__ import annotations

import argparse
import http.server
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
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


def _refuse(address: str, deadline: float = 60.0) -> float:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "sm120kit", "collect", "--ray", address, "-o",
                        str(Path(tempfile.gettempdir()) / "bench-refused-never-written"),
                        "--deadline", str(deadline)], capture_output=True, text=True, timeout=300)
    took = time.monotonic() - t0
    if r.returncode != 2 or not r.stderr.startswith("error: "):
        raise SystemExit(f"{address} was not refused:\n{r.stderr[-2000:]}")
    return took


def refusals(extra: dict[str, str]) -> dict[str, Any]:
    """Seconds to refuse each non-GCS address, and the closed-port anchor."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    anchor_addr = f"127.0.0.1:{closed.getsockname()[1]}"
    closed.close()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # accepted by the kernel, never answered
    h = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=h.serve_forever, daemon=True).start()
    try:
        a = statistics.median(_refuse(anchor_addr) for _ in range(3))
        addrs = {"silent-tcp": f"127.0.0.1:{silent.getsockname()[1]}",
                 "http-server": f"127.0.0.1:{h.server_address[1]}", **extra}
        raw = {k: round(_refuse(v), 2) for k, v in addrs.items()}
    finally:
        h.shutdown()
        h.server_close()
        silent.close()
    return {"refuse_s": raw, "anchor_closed_port_s": round(a, 2),
            "ratio_vs_anchor": {k: round(v / a, 1) for k, v in raw.items()}}


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
        # the refusal of a cluster's own non-GCS ports needs a live cluster: a 1-node one
        ports: dict[str, str] = {}
        with ray_ranks.cluster(1) as c:
            import ray

            head = next(n for n in ray.nodes() if n["NodeID"] == c.head_node.node_id)
            ports["raylet-grpc"] = f"{head['NodeManagerAddress']}:{head['NodeManagerPort']}"
            dash = str(c.head_node.address_info.get("webui_url") or "").split("://")[-1]
            if dash:
                ports["dashboard"] = dash
            print(json.dumps({"refusal": refusals(ports)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
