"""Ray clusters of the tests take free ports only: with Ray's default ports (GCS 6379, dashboard
8265, dashboard agent 52365) and vLLM's HTTP port 8000 held by listening sockets, as a Ray
cluster and a server already running on the box hold them, a test cluster still starts, its
dashboard answers on a port of its own, and ``collect --ray`` reaches it."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the [ray] extra is not installed (pip install -e '.[ray]')")

from . import ray_ranks  # noqa: E402

pytestmark = pytest.mark.slow
DEFAULT_PORTS = (6379, 8265, 52365, 8000)


@contextlib.contextmanager
def _held(ports: tuple[int, ...]) -> Iterator[list[int]]:
    """Listen on each port that is free (one held by a running cluster is held already)."""
    socks: list[socket.socket] = []
    try:
        for port in ports:
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
                s.listen(1)
                socks.append(s)
            except OSError:  # in use: someone else holds it, which is the point
                s.close()
        yield [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_cluster_starts_with_default_ports_taken(tmp_path: Path) -> None:
    with _held(DEFAULT_PORTS):
        assert all(_in_use(p) for p in DEFAULT_PORTS)
        with ray_ranks.cluster(1) as c:
            url = c.webui_url
            assert url and not url.endswith(":8265"), url
            host_port = url if url.startswith("http") else f"http://{url}"
            with urllib.request.urlopen(f"{host_port}/api/version", timeout=30) as r:
                assert json.loads(r.read())["ray_version"]
            assert not c.address.endswith(":6379"), c.address
            r2 = subprocess.run(
                [sys.executable, "-m", "sm120kit", "--json", "collect", "--ray", c.address, "-o",
                 str(tmp_path / "out"), "--no-ray-local", "--no-doctor", "--deadline", "45"],
                capture_output=True, text=True, timeout=120)
            doc = json.loads(r2.stdout)
            assert r2.returncode in (0, 1), r2.stderr[-2000:]
            assert doc["command"] == "collect", doc
