"""validate proves the reference is another server before a pass, and bounds each wait by its step
(issue 31 items 4, 5, 7), against real server processes (``fake_server.py``) and real sockets:

* one server given as ``http://127.0.0.1:P`` and ``http://localhost:P`` is refused (exit 2), with
  and without /metrics (the address alone decides);
* two servers without /metrics (nothing proves they are two) pass only as "identity unproven",
  exit 1, unless ``--assume-distinct``;
* a port that accepts connections and never answers is refused as a silent server within 15 s
  (the short limit of /v1/models), not after ``--timeout``;
* a numerically wrong server exits 3, a refusal to run exits 2.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sm120kit.cli import run
from sm120kit.validate.client import SHORT_TIMEOUT
from sm120kit.validate.identity import Identity, address_identity, decide

from .conftest import SERVER, _port

FAST = ["--dcp", "4", "--interleave", "64", "--prompt-lengths", "400", "--lengths", "1024",
        "--max-tokens", "16"]


@pytest.fixture(scope="module")
def bare() -> Iterator[dict[str, str]]:
    """A DCP-4 server and a DCP-1 reference without /metrics (an OpenAI-compatible stand-in)."""
    cfg = {"server": ["--dcp", "4", "--cp-kv-cache-interleave-size", "64", "--no-metrics"],
           "reference": ["--dcp", "1", "--no-metrics"]}
    procs = {k: subprocess.Popen([sys.executable, str(SERVER), "--port", "0", *a],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k, a in cfg.items()}
    try:
        yield {k: f"http://127.0.0.1:{_port(p)}" for k, p in procs.items()}
    finally:
        for p in procs.values():
            p.terminate()
            p.wait(timeout=10)


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any], float]:
    t0 = time.monotonic()
    rc = run(["validate", *args, "--json"])
    took = time.monotonic() - t0
    return rc, json.loads(capsys.readouterr().out), took


def _localhost(url: str) -> str:
    return url.replace("127.0.0.1", "localhost")


def test_one_server_as_127_and_localhost_is_refused(
        servers: dict[str, str], bare: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    for url in (servers["lse_base_e"], bare["server"]):  # with and without /metrics
        rc, res, took = _json(capsys, "--url", url, "--reference-url", _localhost(url), *FAST)
        assert rc == 2 and res["status"] == "error", res
        assert "are the same server" in res["error"] and "resolve to 127.0.0.1" in res["error"]
        with capsys.disabled():
            print(f"\n{url} vs localhost: refused in {took:.2f}s")


def test_address_identity_on_real_sockets() -> None:
    with socket.socket() as a, socket.socket() as b:
        a.bind(("0.0.0.0", 0))
        a.listen()
        b.bind(("127.0.0.1", 0))
        b.listen()
        pa, pb = a.getsockname()[1], b.getsockname()[1]
        lan = next((ip for ip in _host_ips() if not ip.startswith("127.")), None)
        if lan is not None:  # one wildcard socket takes loopback and the LAN address alike
            same = address_identity(f"http://127.0.0.1:{pa}", f"http://{lan}:{pa}")
            assert same.status == "same" and "0.0.0.0" in same.how, same
        assert address_identity(f"http://127.0.0.1:{pb}", f"http://localhost:{pb}").status == "same"
        two = address_identity(f"http://127.0.0.1:{pa}", f"http://127.0.0.1:{pb}")
        assert two.status == "unproven"  # two sockets can still front one process


def _host_ips() -> list[str]:
    import psutil

    return [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
            if a.family == socket.AF_INET]


def test_decide_needs_the_servers_own_state() -> None:
    addr = Identity("unproven", "x")
    m1, m2 = "process_start_time_seconds 100.00\n", "process_start_time_seconds 200.00\n"
    assert decide(addr, m1, m2, None).status == "distinct"
    assert decide(addr, m1, m1, False).status == "distinct"  # counters told two processes
    assert decide(addr, None, m2, None).status == "unproven"
    assert "either server" in decide(addr, None, None, None).how


def test_unproven_identity_is_not_a_pass(bare: dict[str, str],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    rc, res, _ = _json(capsys, "--url", bare["server"], "--reference-url", bare["reference"], *FAST)
    assert all(c["verdict"] == "pass" for c in res["checks"]), res["summary"]
    assert rc == 1 and res["verdict"] == "suspicious", res["summary"]
    assert res["summary"].startswith("SUSPICIOUS: identity unproven")
    assert res["identity"]["status"] == "unproven"
    assert "no process_start_time_seconds" in res["identity"]["how"]
    rc, res, _ = _json(capsys, "--url", bare["server"], "--reference-url", bare["reference"],
                       *FAST, "--assume-distinct")
    assert rc == 0 and res["verdict"] == "pass"
    assert any("--assume-distinct" in n for n in res["notes"])


def test_distinct_servers_say_how(servers: dict[str, str],
                                  capsys: pytest.CaptureFixture[str]) -> None:
    rc, res, _ = _json(capsys, "--url", servers["lse_base_e"], "--reference-url",
                       servers["reference"], *FAST)
    assert res["identity"]["status"] == "distinct"
    assert "process_start_time_seconds" in res["identity"]["how"]
    # a numerical failure is 3, not the 2 of a refusal to run
    assert rc == 3 and res["verdict"] == "fail" and res["exit_code"] == 3


def test_silent_port_is_refused_within_15s(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:  # the kernel completes the handshake; nobody ever answers
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        rc, res, took = _json(capsys, "--url", url, "--timeout", "600", *FAST)
    assert rc == 2 and res["status"] == "error"
    assert res["error"].startswith(f"server {url}/v1/models: silent server")
    assert f"within {SHORT_TIMEOUT:g} s" in res["error"] and "raise --timeout" not in res["hint"]
    assert took < 15, took
    with capsys.disabled():
        print(f"\nsilent port refused in {took:.1f}s")
