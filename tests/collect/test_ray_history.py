"""``collect --ray`` on a real local Ray cluster with a past (issue 23 items 2-5): an earlier job
whose rank actors are DEAD and a node that died, then two live vLLM-named instances, a process
of the live job titled ``VLLM::`` and an unrelated ``VLLM::``-titled process on the same host.

Only the live job's actors are ranks (grouped per instance); the dead actors and the dead node
are ``ray/cluster.json`` history, never a node outcome or a verdict line; local discovery keeps
the live job's process and leaves the unrelated one out. The same cluster's dashboard port and a
raylet's gRPC port are refused as "not a Ray GCS" within the deadline."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from .helpers import only_bundle, read_tarball

pytest.importorskip("ray", reason="the [ray] extra is not installed (pip install -e '.[ray]')")

from . import ray_ranks  # noqa: E402

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent


def _cli(*args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "sm120kit", *args], capture_output=True, text=True,
                       timeout=timeout)
    return r, time.monotonic() - t0


def _earlier_job(c: Any, extra_node: Any, head: str) -> None:
    """A finished job with rank actors on the head and on ``extra_node``; then that node dies."""
    code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); import ray_ranks; "
            f"ray_ranks.finished_job({c.address!r}, [{head!r}, {extra_node.node_id!r}])")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=180, capture_output=True)
    c.remove_node(extra_node, allow_graceful=False)
    import ray

    end = time.monotonic() + 30
    while time.monotonic() < end and any(n["NodeID"] == extra_node.node_id and n["Alive"]
                                         for n in ray.nodes()):
        time.sleep(0.3)


def _unrelated_titled(tmp: Path) -> int:
    """A ``VLLM::Worker_TP0`` process that belongs to no Ray job: double-forked, so it is not
    even below this test process (which is a live driver of the cluster)."""
    pidf = tmp / "unrelated.pid"
    subprocess.run(["bash", "-c", f'(exec -a "VLLM::Worker_TP0" "{sys.executable}" -c '
                    f'"import time; time.sleep(600)" & echo $! > "{pidf}")'], check=True, timeout=30)
    end = time.monotonic() + 10
    while not pidf.exists() or not pidf.read_text().strip():
        assert time.monotonic() < end
        time.sleep(0.1)
    return int(pidf.read_text())


def _bundle_pids(files: dict[str, bytes]) -> set[int]:
    pids: set[int] = set()
    for name, data in files.items():
        if name.startswith("nodes/") and name.endswith("stacks/analysis.json"):
            pids |= {int(p) for p in json.loads(data)["processes"]}
    return pids


def _check_view(files: dict[str, bytes], live: list[str], dead_node: str) -> dict[str, Any]:
    man = json.loads(files["manifest.json"])
    assert man["partial"] is False and "partial" not in files["summary.md"].decode()
    st = {n["node_id"]: n["status"] for n in man["ray"]["nodes"]}
    assert set(st) == set(live) and set(st.values()) == {"ok"}, st  # the dead node: not collected
    cl = json.loads(files["ray/cluster.json"])
    labels = sorted(w["label"] for w in cl["workers"])
    want = [f"vllm_Worker_{i}_TP{r}" for i in ("instA", "instB") for r in (0, 1)]
    assert labels == want, labels
    assert cl["instances"] == {"instA": want[:2], "instB": want[2:]}
    assert man["ray"]["instances"] == cl["instances"]
    hist = cl["history"]
    assert sorted(w["label"] for w in hist["workers"]) == ["vllm_Worker_old_TP0",
                                                           "vllm_Worker_old_TP1"], hist
    assert all(w["state"] == "DEAD" for w in hist["workers"])
    assert [n["node_id"] for n in hist["nodes"]] == [dead_node]
    # the past is never the headline
    verdict = " ".join(man["verdict"])
    assert dead_node[:12] not in verdict and "left the cluster" not in verdict, man["verdict"]
    summary = files["summary.md"].decode()
    assert "instance instA" in summary and "instance instB" in summary
    return man


def test_history_is_not_headline_and_local_discovery_is_scoped(tmp_path: Path) -> None:
    import ray

    unrelated = 0
    with ray_ranks.cluster(3) as c:
        head = c.head_node.node_id
        extra = c.worker_nodes and sorted(c.worker_nodes, key=lambda n: n.node_id)[0]
        assert extra
        _earlier_job(c, extra, head)
        live = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
        assert len(live) == 2 and head in live
        actors, _ = ray_ranks.start_idle("instA", 2, live)
        keep_b, _ = ray_ranks.start_idle("instB", 2, live[::-1])  # handles keep actors alive
        head_actor = next(a for a in actors
                          if ray.get(a.where.remote(), timeout=60)["node_id"] == head)
        in_job = ray.get(head_actor.spawn_titled.remote("VLLM::EngineCore_0"), timeout=60)
        unrelated = _unrelated_titled(tmp_path)
        try:
            time.sleep(1.0)  # the titled processes have exec'd
            r, took = _cli("collect", "--ray", c.address, "-o", str(tmp_path / "out"),
                           "--ray-worker-class", "IdleRank", "--no-doctor", "--deadline", "45",
                           "--sample-gap", "0.5", "--json")
            assert r.returncode == 0, r.stderr[-3000:]
            out = json.loads(r.stdout)
            assert out["partial"] is False and sorted(out["instances"]) == ["instA", "instB"]
            files = read_tarball(only_bundle(tmp_path / "out"))
            _check_view(files, live, extra.node_id)
            pids = _bundle_pids(files)
            assert in_job in pids, (in_job, pids)  # the live job's own titled process: in
            assert unrelated not in pids, pids  # a titled process of no job: out
            assert not any(f"/{unrelated}." in n for n in files), "unrelated process collected"
            assert any(b"belong to no live job" in data for data in files.values())
            d, _ = _cli("diagnose", "--json", str(only_bundle(tmp_path / "out")))
            rules = [f["rule"] for f in json.loads(d.stdout)["findings"]]
            assert "node-lost" not in rules, rules
            print(f"\nhistory cluster (2 live nodes, 4 live ranks): command to bundle {took:.1f}s")
            _refuse_non_gcs_ports(c, tmp_path)
            assert keep_b
        finally:
            if unrelated:
                try:
                    psutil.Process(unrelated).kill()
                except psutil.Error:
                    pass


def _refuse_non_gcs_ports(c: Any, tmp: Path) -> None:
    """The same cluster's dashboard (HTTP) port and the head raylet's gRPC port: not a GCS."""
    import ray

    dash = str(c.head_node.address_info.get("webui_url") or "").split("://")[-1]
    head = next(n for n in ray.nodes() if n["NodeID"] == c.head_node.node_id)
    raylet = f"{head['NodeManagerAddress']}:{head['NodeManagerPort']}"
    for addr, kind in ((dash, "not-grpc"), (raylet, "not-gcs")):
        if not addr:
            continue
        r, took = _cli("collect", "--ray", addr, "-o", str(tmp / "refused"), "--deadline", "10")
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 2, r.stderr[-2000:]
        assert lines[0].startswith(f"error: {addr} is not a Ray GCS ({kind}:"), lines
        assert took < 10 + 8, took
        print(f"refused {kind} {addr} in {took:.1f}s")
    assert not (tmp / "refused").exists()
