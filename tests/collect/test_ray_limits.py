"""``collect --ray``: the tool's own limits are never the cluster's fault (issue 31 items 1-3), on
a real healthy two-node Ray cluster (``ray_ranks.cluster``: a GCS and one raylet per node, idle
rank actors named like vLLM's workers on both nodes).

* ``--deadline 2``: exit 1, every node "not collected in time", no node or rank blamed (no
  ``node-lost`` finding, no "stopped first"), the run ends within 0.5 s of the deadline (timed
  from outside, a loaded box gets a little more), Ray's own log lines kept off the terminal;
* Ctrl-C while the nodes are awaited (progress lines at least every 5 s until then): exit 130,
  the bundle flagged ``interrupted`` in manifest.json, summary.md and ``--json``, and
  ``diagnose`` leads with it;
* no worker actor of the class asked for: exit 1 with the hint;
* ``ray://`` addresses: a closed port and an open one (a listener standing in for Ray Client's
  port: this Ray build's test cluster starts no client server) are refused with the reason,
  within the deadline, without claiming an answer that did not come;
* a live driver retitled ``VLLM::EngineCore`` (as vLLM's engine core is): its job entrypoint is
  recorded without the arguments the retitling blanked.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .helpers import only_bundle, read_tarball

pytest.importorskip("ray", reason="the [ray] extra is not installed (pip install -e '.[ray]')")

from . import ray_ranks  # noqa: E402

pytestmark = pytest.mark.slow
CLASS = "IdleRank"
RAY_NOISE = ("logging.cc", "rpc_client.h", "core_worker", "gcs_client")


@pytest.fixture(scope="module")
def healthy() -> Iterator[Any]:
    import ray

    with ray_ranks.cluster(2) as c:
        head = c.head_node.node_id
        nodes = [head, *sorted(n["NodeID"] for n in ray.nodes()
                               if n["Alive"] and n["NodeID"] != head)]
        actors, _where = ray_ranks.start_idle("limits", 2, nodes)
        yield c
        del actors


def _argv(address: str, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "sm120kit", "collect", "--ray", address, "-o", str(out),
            "--no-ray-local", "--no-doctor", *extra]


def _run(argv: list[str], timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    return r, time.monotonic() - t0


def _diagnose(tb: Path) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-m", "sm120kit", "diagnose", str(tb), "--json"],
                       capture_output=True, text=True, timeout=120)
    return dict(json.loads(r.stdout))


def test_a_short_deadline_is_not_collected_in_time(healthy: Any, tmp_path: Path) -> None:
    r, took = _run(_argv(healthy.address, tmp_path / "out", "--ray-worker-class", CLASS,
                         "--deadline", "2", "--json"))
    assert r.returncode == 1, (r.stdout[-2000:], r.stderr[-2000:])
    body = json.loads(r.stdout)
    assert body["status"] == "partial" and body["partial"] is True
    assert body["verdict"][0].startswith("not collected in time"), body["verdict"]
    assert "--deadline 2s" in body["verdict"][0]
    text = json.dumps(body)
    assert "stopped first" not in text and "lost" not in text.replace('"lost"', ""), text
    assert all(n["status"] == "not-collected" for n in body["nodes"]), body["nodes"]
    files = read_tarball(only_bundle(tmp_path / "out"))
    man = json.loads(files["manifest.json"])
    assert man["partial"] is True and man.get("interrupted") is not True
    d = _diagnose(only_bundle(tmp_path / "out"))
    assert not [f for f in d["findings"] if f["rule"] in ("node-lost", "cross-node-divergence")]
    assert d["verdict"].startswith("PARTIAL bundle")
    assert not any(x in r.stderr for x in RAY_NOISE), r.stderr[-2000:]
    print(f"\n--deadline 2 on a healthy 2-node cluster: exit {r.returncode} in {took:.2f}s "
          f"(bundle says {body['seconds']}s from the command's start)")
    # 0.5 s over is the target, met when the box is not overloaded (scripts/bench_collect_ray.py
    # style numbers are in docs/collect.md); a 2-core CI box shared by many jobs gets 3 s
    assert took < 2 + 3.0, took


def test_ctrl_c_leaves_an_interrupted_bundle(healthy: Any, tmp_path: Path) -> None:
    # a 25 s sample gap keeps the nodes busy well past the two progress lines (5 s apart) the
    # test waits for: with 10 s a loaded box sent SIGINT after the nodes had finished (exit 0)
    p = subprocess.Popen(_argv(healthy.address, tmp_path / "out", "--ray-worker-class", CLASS,
                               "--deadline", "60", "--sample-gap", "25"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: list[tuple[float, str]] = []

    def read() -> None:
        assert p.stderr is not None
        for ln in p.stderr:
            seen.append((time.monotonic(), ln.rstrip()))

    th = threading.Thread(target=read, daemon=True)
    th.start()
    end = time.monotonic() + 90
    while time.monotonic() < end and sum("waiting for" in ln for _t, ln in seen) < 2:
        time.sleep(0.1)
    waits = [t for t, ln in seen if "waiting for" in ln]
    start = next(t for t, ln in seen if "collecting from" in ln)
    assert len(waits) >= 2, seen
    gaps = [b - a for a, b in zip([start, *waits], waits, strict=False)]
    assert max(gaps) < 5 + 1.0, gaps  # a line at least every 5 s (the box's lag on top)
    t_int = time.monotonic()
    p.send_signal(signal.SIGINT)
    rc = p.wait(timeout=60)
    th.join(5)
    print(f"\nCtrl-C: exit {rc} {time.monotonic() - t_int:.1f}s after SIGINT; progress gaps "
          f"{[round(g, 1) for g in gaps]}")
    assert rc == 130, seen[-20:]
    files = read_tarball(only_bundle(tmp_path / "out"))
    man = json.loads(files["manifest.json"])
    assert man["interrupted"] is True and man["partial"] is True
    assert {n["status"] for n in man["ray"]["nodes"]} <= {"interrupted", "ok"}
    rec = next(c for c in man["collectors"] if c["name"] == "ray-cluster")
    assert rec["status"] == "interrupted"
    summary = files["summary.md"].decode()
    assert "**INTERRUPTED**" in summary.splitlines()[2]
    assert man["verdict"][0].startswith("INTERRUPTED")
    d = _diagnose(only_bundle(tmp_path / "out"))
    assert d["verdict"].startswith("INTERRUPTED bundle"), d["verdict"]
    assert not [f for f in d["findings"] if f["rule"] == "node-lost"]


def test_no_worker_actor_is_exit_1_with_the_hint(healthy: Any, tmp_path: Path) -> None:
    r, _ = _run(_argv(healthy.address, tmp_path / "out", "--ray-worker-class", "NoSuchWorker",
                      "--deadline", "40"))
    assert r.returncode == 1, r.stderr[-2000:]
    assert "no vLLM worker actor found: is vLLM running with the Ray executor" in r.stderr
    assert "--ray-worker-class CLASS" in r.stderr
    assert not any(x in r.stderr for x in RAY_NOISE), r.stderr[-2000:]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_ray_client_addresses_are_refused_with_the_reason(tmp_path: Path) -> None:
    closed = f"ray://127.0.0.1:{_free_port()}"
    r, took = _run(_argv(closed, tmp_path / "out", "--deadline", "5"))
    assert r.returncode == 2
    line = r.stderr.strip().splitlines()[0]
    assert line.startswith(f"error: {closed} is a Ray Client address and nothing answers there")
    assert "answered" not in line, line
    assert took < 5 + 8, took  # interpreter + ray import on a loaded box; the refusal itself is at once
    with socket.socket() as lst:  # accepts connections, as Ray Client's port does
        lst.bind(("127.0.0.1", 0))
        lst.listen(8)
        addr = f"ray://127.0.0.1:{lst.getsockname()[1]}"
        r, took = _run(_argv(addr, tmp_path / "out", "--deadline", "5", "--json"))
    assert r.returncode == 2
    body = json.loads(r.stdout)
    assert body["error"].startswith(f"{addr} is a Ray Client address: collect needs the GCS "
                                    "address, e.g. 127.0.0.1:6379"), body
    assert took < 5 + 8, took
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
    print(f"\nray:// open port refused in {took:.1f}s: {body['error']}")


DRIVER = """
import sys, time, setproctitle, ray
setproctitle.setproctitle("VLLM::EngineCore")  # as vLLM's engine core, the Ray executor's driver
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
print("ready", flush=True)
time.sleep(600)
"""


def test_a_retitled_driver_entrypoint_is_recorded_clean(healthy: Any, tmp_path: Path) -> None:
    """A live driver retitled like vLLM's engine core: Ray's job table holds the title and blanked
    arguments (``VLLM::EngineCore "" "" ...``); the bundle records the title without the blanks,
    says the command line is not recorded, and keeps Ray's text beside it."""
    pytest.importorskip("setproctitle")
    d = subprocess.Popen([sys.executable, "-c", DRIVER, healthy.address, "--model", "m", "-tp",
                          "2"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert d.stdout is not None and d.stdout.readline().strip() == "ready"
        r, _ = _run(_argv(healthy.address, tmp_path / "out", "--ray-worker-class", CLASS,
                          "--deadline", "40"))
        assert r.returncode in (0, 1), r.stderr[-2000:]
        files = read_tarball(only_bundle(tmp_path / "out"))
    finally:
        d.kill()
        d.wait(10)
    jobs = json.loads(files["ray/cluster.json"])["jobs"]
    mine = [j for j in jobs if j["driver_pid"] == d.pid]
    assert mine, jobs
    assert mine[0]["entrypoint"].startswith("VLLM::EngineCore  (process title set by vLLM")
    assert '""' not in mine[0]["entrypoint"]
    assert mine[0]["entrypoint_recorded"].startswith('VLLM::EngineCore ""')
