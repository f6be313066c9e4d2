"""``ray`` stays optional: only ``collect/ray_*.py`` import it, inside functions; without it
``collect --ray`` is one ``error:`` line with the pip hint (exit 2); a wrong address fails fast,
and an address that is reachable but not a Ray GCS (a silent TCP listener, an HTTP server) is one
``error:`` line within ``--deadline`` (issue 23 item 2). Fast tests (no cluster); the real
clusters are in ``test_ray_cluster.py`` / ``test_ray_history.py``."""

from __future__ import annotations

import ast
import http.server
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import sm120kit
from sm120kit.collect.ray_cluster import ranks_from_name

PKG = Path(sm120kit.__file__).resolve().parent
RAY_MODULES = sorted((PKG / "collect").glob("ray_*.py"))


def _ray_imports(path: Path) -> list[tuple[int, bool]]:
    """(line, at module level) of every ``import ray...`` / ``from ray... import`` in a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(n) for n in tree.body}
    out = []
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                 else [])
        if any(n == "ray" or n.startswith("ray.") for n in names):
            out.append((node.lineno, id(node) in top))
    return out


def test_only_the_ray_module_imports_ray_and_only_lazily() -> None:
    offenders = [f"{p.relative_to(PKG)}:{ln}" for p in PKG.rglob("*.py")
                 if p not in RAY_MODULES for ln, _top in _ray_imports(p)]
    assert offenders == []
    inside = [x for p in RAY_MODULES for x in _ray_imports(p)]
    assert inside and not any(top for _ln, top in inside)


def _cli_without_ray(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a Python where ``import ray`` fails, as on a machine without the extra."""
    code = ("import sys; sys.modules['ray'] = None; sys.argv = ['sm120kit', *sys.argv[1:]]; "
            "from sm120kit.cli import main; main()")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=60)


def test_collect_ray_without_ray_is_one_error_line(tmp_path: Path) -> None:
    for args in (["collect", "--ray", "-o", str(tmp_path)],
                 ["collect", "--ray", "-o", str(tmp_path), "--", sys.executable, "-c", "pass"]):
        r = _cli_without_ray(*args)
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert lines[0] == "error: --ray needs the `ray` package, which is not installed"
        assert lines[1].startswith("hint: pip install 'sm120kit[ray]'")
        assert "Traceback" not in r.stderr
    assert not list(tmp_path.iterdir())  # nothing launched, no bundle


def test_other_commands_work_without_ray(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("INFO 12-02 10:00:00 [core.py:1] hello\n")
    assert _cli_without_ray("collect", "--help").returncode == 0
    assert _cli_without_ray("diagnose", str(log)).returncode in (0, 1, 2)
    code = ("import sys; import sm120kit.cli.collect, sm120kit.services.supervision, "
            "sm120kit.diagnose.engine, sm120kit.collect.ray_cluster; "
            "print('ray' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "False", r.stderr


def test_unreachable_address_fails_fast(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = subprocess.run([sys.executable, "-m", "sm120kit", "collect", "--ray",
                        f"127.0.0.1:{port}", "-o", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=60)
    if "needs the `ray` package" in r.stderr:
        return  # covered by the test above
    assert r.returncode == 2
    assert r.stderr.startswith(f"error: cannot reach the Ray GCS at 127.0.0.1:{port}")
    assert not (tmp_path / "out").exists()


def test_ranks_from_vllm_actor_names() -> None:
    # vLLM's build_actor_name (v1/executor/ray_utils.py, 0.24-0.34): vllm_Worker_<id>[_TP][_PP][_PCP]
    assert ranks_from_name("vllm_Worker_3f2a_TP5") == {"TP": 5}
    assert ranks_from_name("vllm_Worker_3f2a_TP1_PP1_PCP0") == {"TP": 1, "PP": 1, "PCP": 0}
    assert ranks_from_name("vllm_Worker_3f2a") == {}
    assert ranks_from_name(None) == {}


def _has_ray() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


needs_ray = pytest.mark.skipif(not _has_ray(), reason="the [ray] extra is not installed")


def _collect_at(address: str, out: Path, deadline: float, *extra: str
                ) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "sm120kit", *extra, "collect", "--ray", address,
                        "-o", str(out), "--deadline", str(deadline)],
                       capture_output=True, text=True, timeout=deadline + 60)
    return r, time.monotonic() - t0


@contextmanager
def _silent_listener() -> Iterator[int]:
    """A real TCP listener that accepts connections and never sends a byte."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        s.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(s.accept()[0])
            except OSError:
                continue

    th = threading.Thread(target=accept, daemon=True)
    th.start()
    try:
        yield int(s.getsockname()[1])
    finally:
        stop.set()
        th.join(2)
        for c in held:
            c.close()
        s.close()


def _one_error_line(r: subprocess.CompletedProcess[str], address: str) -> str:
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"error: {address} is not a Ray GCS"), lines
    assert lines[1].startswith("hint: pass the head's GCS address"), lines
    return lines[0]


@needs_ray
def test_silent_tcp_listener_is_refused_within_the_deadline(tmp_path: Path) -> None:
    with _silent_listener() as port:
        addr = f"127.0.0.1:{port}"
        r, took = _collect_at(addr, tmp_path / "out", 6)
    line = _one_error_line(r, addr)
    assert "silent" in line
    # the probe stops at the deadline; interpreter + ray import start-up is the rest
    assert took < 6 + 8, took
    assert not (tmp_path / "out").exists()


@needs_ray
def test_http_server_port_is_refused_fast(tmp_path: Path) -> None:
    """A dashboard-like HTTP/1 port: not HTTP/2, so not gRPC, so not a GCS, refused long before
    the deadline (well under 1 s on an idle machine; bounded here by a tenth of the 60 s deadline,
    as a loaded CI box took 4.1 s for the probe's second try)."""
    h = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    th = threading.Thread(target=h.serve_forever, daemon=True)
    th.start()
    try:
        addr = f"127.0.0.1:{h.server_address[1]}"
        deadline = 60
        r, took = _collect_at(addr, tmp_path / "out", deadline)
    finally:
        h.shutdown()
        h.server_close()
    line = _one_error_line(r, addr)
    assert "not-grpc" in line
    checked = float(line.rsplit("checked in ", 1)[1].split("s", 1)[0])
    assert checked < deadline / 10 and took < deadline / 2, (checked, took)


@needs_ray
def test_refused_address_with_json_is_one_json_object(tmp_path: Path) -> None:
    import json

    with _silent_listener() as port:
        addr = f"127.0.0.1:{port}"
        rj = subprocess.run([sys.executable, "-m", "sm120kit", "collect", "--ray", addr, "-o",
                             str(tmp_path / "out"), "--deadline", "3", "--json"],
                            capture_output=True, text=True, timeout=60)
    assert rj.returncode == 2, rj.stderr
    body = json.loads(rj.stdout)
    assert body["status"] == "error" and body["exit_code"] == 2
    assert body["error"].startswith(f"{addr} is not a Ray GCS")


def test_instance_and_live_split_from_the_tables() -> None:
    """The rule of ``ray_view.build_view`` on table rows shaped like Ray's (the real-cluster
    version is test_ray_history.py): ALIVE actors of live jobs are ranks; a DEAD actor, an
    ALIVE actor of a finished job (a detached leftover) and a dead node are history."""
    from sm120kit.collect.ray_view import RayJob, RayNode, RayWorker, build_view, instance_from_name

    assert instance_from_name("vllm_Worker_3f2a_TP1_PP1_PCP0") == "3f2a"
    assert instance_from_name("vllm_Worker_my_inst_TP0") == "my_inst"
    assert instance_from_name("other") is None
    nodes = [RayNode("n1", "10.0.0.1", "a", True), RayNode("n2", "10.0.0.2", "b", False)]
    jobs = [RayJob("01", False, 11, "10.0.0.1"), RayJob("02", True, 22, "10.0.0.1"),
            RayJob("03", True, 33, "10.0.0.1")]

    def w(name: str, state: str, job: str, node: str = "n1", cls: str = "RayWorkerProc"
          ) -> RayWorker:
        return RayWorker(name, cls, name, 100, node, state, job_id=job)

    actors = [w("vllm_Worker_old_TP0", "DEAD", "01", "n2"), w("vllm_Worker_old_TP1", "ALIVE", "01"),
              w("vllm_Worker_a_TP1", "ALIVE", "02"), w("vllm_Worker_a_TP0", "ALIVE", "02"),
              w("vllm_Worker_b_TP0", "ALIVE", "02", "n1", "RayWorkerWrapper"),
              w("helper", "ALIVE", "02", cls="Other"), w("mine", "ALIVE", "03")]
    v = build_view(nodes, jobs, actors, ("RayWorkerProc", "RayWorkerWrapper"), own_job="03")
    assert [x.label for x in v.workers] == ["vllm_Worker_a_TP0", "vllm_Worker_a_TP1",
                                            "vllm_Worker_b_TP0"]
    assert sorted(x.label for x in v.history) == ["vllm_Worker_old_TP0", "vllm_Worker_old_TP1"]
    assert [n.node_id for n in v.nodes] == ["n1"] and [n.node_id for n in v.dead_nodes] == ["n2"]
    assert [j.job_id for j in v.jobs] == ["02"]  # collect's own job (03) is not a job to collect
    body = v.to_json()
    assert body["instances"] == {"a": ["vllm_Worker_a_TP0", "vllm_Worker_a_TP1"],
                                 "b": ["vllm_Worker_b_TP0"]}
    assert len(body["history"]["workers"]) == 2 and body["history"]["nodes"][0]["node_id"] == "n2"
