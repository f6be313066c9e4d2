"""``collect --ray`` against real multi-node Ray clusters on this machine (``ray_ranks.py``):
DCP warmup ranks (gloo) as Ray actors spread over 2 or 3 nodes, one stalled before a collective.
The bundle must hold every rank's stacks from every node and name the stalled rank's node,
``diagnose`` must name that rank, and a node removed during the collect is recorded as lost."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from .helpers import only_bundle, read_tarball

pytest.importorskip("ray", reason="the [ray] extra is not installed (pip install -e '.[ray]')")

from . import ray_ranks  # noqa: E402

pytestmark = pytest.mark.slow
WORKER_CLASS = "DcpWarmupRank"


def _collect(address: str, out: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "sm120kit", "collect", "--ray", address, "-o", str(out),
         "--ray-worker-class", WORKER_CLASS, "--no-ray-local", "--no-doctor", "--deadline", "45",
         "--sample-gap", "1", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _node_ids(c: Any) -> list[str]:
    import ray

    head = c.head_node.node_id
    others = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != head)
    return [head, *others]


def _stall_and_collect(n_nodes: int, world: int, stall_rank: int, tmp: Path,
                       *extra: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    with ray_ranks.cluster(n_nodes) as c:
        nodes = _node_ids(c)
        progress = tmp / "progress.jsonl"
        _actors, _refs, where = ray_ranks.start_ranks(world, nodes, (stall_rank, "merge"),
                                                      progress, env=env)
        ray_ranks.wait_stalled(progress, world, stall_rank)
        t0 = time.monotonic()
        p = _collect(c.address, tmp / "out", *extra)
        out, err = p.communicate(timeout=120)
        took = time.monotonic() - t0
        assert p.returncode == 0, err[-3000:]
        tb = only_bundle(tmp / "out")
        assert json.loads(read_tarball(tb)["manifest.json"])["partial"] is False
        print(f"\n{n_nodes} nodes, {world} ranks: command to bundle {took:.1f}s")
        return {"c": c, "nodes": nodes, "where": where, "tb": tb, "files": read_tarball(tb),
                "took": took, "stderr": err}


def _check_bundle(r: dict[str, Any], world: int, stall_rank: int) -> None:
    files, where, nodes = r["files"], r["where"], r["nodes"]
    man = json.loads(files["manifest.json"])
    recs = {n["node_id"]: n for n in man["ray"]["nodes"]}
    assert set(recs) == set(nodes) and all(n["status"] == "ok" for n in recs.values()), recs
    for rank in range(world):
        node, pid = where[rank]["node_id"], where[rank]["pid"]
        folder = recs[node]["folder"]
        assert f"vllm_Worker_sm120kittest_TP{rank}" in recs[node]["workers"]
        for suffix in (".json", ".2.json"):  # two samples of every rank, on its own node
            body = json.loads(files[f"{folder}/stacks/{pid}{suffix}"])
            assert body["label"] == f"vllm_Worker_sm120kittest_TP{rank}"
        names = {c["name"]: c["status"] for c in
                 json.loads(files[f"{folder}/manifest.json"])["collectors"]}
        assert names["stacks"] == "ok" and {"nvml", "ras", "flight", "host"} <= set(names)
        an = json.loads(files[f"{folder}/stacks/analysis.json"])["processes"][str(pid)]
        assert an["rank"] == rank
        assert (an.get("collective") is None) == (rank == stall_rank), an
    stalled_node = recs[where[stall_rank]["node_id"]]["folder"].split("/", 1)[1]
    line = next(v for v in man["verdict"] if f"rank {stall_rank} (" in v)
    assert f"on node {stalled_node}" in line and "stopped first" in line, man["verdict"]
    assert f"on node {stalled_node}" in files["summary.md"].decode()


def _diagnose(tb: Path) -> dict[str, Any]:
    p = subprocess.run([sys.executable, "-m", "sm120kit", "diagnose", "--json", str(tb)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr[-2000:]
    return json.loads(p.stdout)


def test_two_nodes_stalled_rank_collected_and_diagnosed(tmp_path: Path) -> None:
    world, stall = 3, 1
    secret = "s3cr3t-Value-9f8e7d6c"  # no token pattern: only the learned value can hide it
    hmap = tmp_path / "hosts.json"
    r = _stall_and_collect(2, world, stall, tmp_path, "--obfuscate-hosts", str(hmap),
                           env={"SM120KIT_TEST_SECRET": secret, "MY_API_TOKEN": secret})
    _check_bundle(r, world, stall)
    # redaction and host obfuscation on every node's files, one host map for all nodes
    hosts = json.loads(hmap.read_text())
    ip = next(n["ip"] for n in json.loads(r["files"]["ray/cluster.json"])["nodes"])
    assert ip.startswith("ip-") and len(hosts) >= 2, hosts
    real_ip = next(k for k, v in hosts.items() if v == ip)
    logged = False
    for name, data in r["files"].items():
        text = data.decode("utf-8", "replace")
        assert secret not in text, name
        assert real_ip not in text, name
        logged = logged or ("downloading with <redacted>" in text and name.startswith("nodes/"))
    assert logged, "the workers' Ray log tails were not collected"
    d = _diagnose(r["tb"])
    top = d["findings"][0]
    node = next(n["node"] for n in d["nodes"] for x in n["ranks"] if x["rank"] == stall)
    assert top["rule"] == "cross-node-divergence" and top["ranks"] == [stall], top
    assert f"rank {stall} " in top["summary"] and f"on node {node}" in top["summary"]
    assert len(d["nodes"]) == 2 and sum(len(n["ranks"]) for n in d["nodes"]) == world


def test_three_nodes_stall_then_a_node_lost_during_collect(tmp_path: Path) -> None:
    world, stall = 3, 2
    with ray_ranks.cluster(3) as c:
        nodes = _node_ids(c)
        progress = tmp_path / "progress.jsonl"
        _a, _refs, where = ray_ranks.start_ranks(world, nodes, (stall, "merge"), progress)
        ray_ranks.wait_stalled(progress, world, stall)
        t0 = time.monotonic()
        p = _collect(c.address, tmp_path / "out")
        _out, err = p.communicate(timeout=120)
        took = time.monotonic() - t0
        assert p.returncode == 0, err[-3000:]
        print(f"\n3 nodes, {world} ranks: command to bundle {took:.1f}s")
        r = {"where": where, "nodes": nodes, "files": read_tarball(only_bundle(tmp_path / "out"))}
        _check_bundle(r, world, stall)
        d = _diagnose(only_bundle(tmp_path / "out"))
        assert d["findings"][0]["rule"] == "cross-node-divergence"
        assert d["findings"][0]["ranks"] == [stall]

        # a worker node leaves while the second collect runs: recorded, never fatal
        victim = next(n for n in c.worker_nodes if n.node_id == nodes[1])
        # a long sample gap keeps every node's task running well past the removal below (with a
        # 1 s gap a fast node could finish before it is removed and be recorded 'ok')
        p = _collect(c.address, tmp_path / "out2", "--sample-gap", "10")
        assert p.stderr is not None
        seen: list[str] = []

        def read() -> None:
            assert p.stderr is not None
            for ln in p.stderr:
                seen.append(ln)

        th = threading.Thread(target=read, daemon=True)
        th.start()
        end = time.monotonic() + 60
        while not any("collecting from" in ln for ln in seen) and time.monotonic() < end:
            time.sleep(0.1)
        time.sleep(2.0)  # the node's collector task is running (sampling stacks) by now
        c.remove_node(victim, allow_graceful=False)
        p.wait(timeout=120)
        th.join(5)
        # a bundle with a lost node is partial: exit 1, `partial: true`, a summary line
        assert p.returncode == 1, "".join(seen)[-3000:]
        assert any(ln.startswith("partial: not fully collected:") for ln in seen), seen[-20:]
        files2 = read_tarball(only_bundle(tmp_path / "out2"))
        man = json.loads(files2["manifest.json"])
        st = {n["node_id"]: n["status"] for n in man["ray"]["nodes"]}
        assert st[nodes[1]] == "lost", man["ray"]["nodes"]
        assert st[nodes[0]] == "ok" and st[nodes[2]] == "ok", st
        assert man["partial"] is True and man["partial_nodes"] == [f"nodes/{nodes[1][:12]} (lost)"]
        assert "**partial**: 1 of 3 node(s)" in files2["summary.md"].decode()
        print("lost node:", next(n["error"] for n in man["ray"]["nodes"] if n["status"] == "lost"))
        d2 = _diagnose(only_bundle(tmp_path / "out2"))
        lost = [f for f in d2["findings"] if f["rule"] == "node-lost"]
        assert lost and nodes[1][:12] in lost[0]["summary"], d2["findings"]


def test_supervised_launch_gathers_every_node_at_the_stall(tmp_path: Path) -> None:
    """``collect --ray ADDRESS -- CMD``: CMD is a Ray driver (as `vllm serve` with the Ray
    executor is) whose rank actors live on other nodes, not in CMD's process tree; at the stall
    the bundle still holds every rank from every node."""
    world, stall = 3, 0
    job = Path(__file__).resolve().parent / "ray_job.py"
    with ray_ranks.cluster(2) as c:
        t0 = time.monotonic()
        p = subprocess.run(
            [sys.executable, "-m", "sm120kit", "collect", "--ray", c.address, "-o",
             str(tmp_path / "out"), "--ray-worker-class", WORKER_CLASS, "--no-doctor",
             "--stall-timeout", "4", "--deadline", "45", "--sample-gap", "1", "--",
             sys.executable, str(job), c.address, str(world), str(stall)],
            capture_output=True, text=True, timeout=240)
        took = time.monotonic() - t0
        assert "stalled" in p.stderr, p.stderr[-3000:]
        files = read_tarball(only_bundle(tmp_path / "out"))
    man = json.loads(files["manifest.json"])
    nodes = man["ray"]["nodes"]
    assert len(nodes) == 2 and all(n["status"] == "ok" for n in nodes), nodes
    labels = []
    for n in nodes:
        an = json.loads(files[f"{n['folder']}/stacks/analysis.json"])["processes"]
        labels += [a["label"] for a in an.values()]
    assert sorted(labels) == [f"vllm_Worker_sm120kittest_TP{r}" for r in range(world)]
    # the verdict is the diagnose rules engine's (cross-node-divergence) over the cluster bundle
    assert any(f"rank {stall} (" in v and "stopped first" in v for v in man["verdict"]), \
        man["verdict"]
    print(f"\nsupervised launch, 2 nodes: command to bundle {took:.1f}s (incl. startup + 4s stall)")
