"""Collect building blocks against real inputs: the diagnostic environment and vLLM
``--watchdog-config`` detection on a real vLLM release tree, log-source attribution, py-spy on a
live process (and its ptrace refusal where the sandbox refuses it), faulthandler parsing, the
busy/blocked comparison, the Flight Recorder pg_config fill, the manifest on failure, and the
NCCL RAS client."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sm120kit.evidence import flight, ras, stacks
from sm120kit.services.bundles import Bundle, CollectorRecord
from sm120kit.services.capture import source_of
from sm120kit.services.launchenv import diagnostic_env, is_vllm_serve, vllm_supports_watchdog
from tests.support import releases


@pytest.fixture(scope="module")
def vllm033() -> Path:
    return releases.tree("vllm", "0.33.0")


def _fake_venv(tmp: Path, vllm_tree: Path) -> Path:
    """A venv layout (bin/vllm with a shebang, site-packages/vllm → the real release tree)."""
    sp = tmp / "venv" / "lib" / "python3.11" / "site-packages"
    sp.mkdir(parents=True)
    (sp / "vllm").symlink_to(vllm_tree / "vllm")
    bin_ = tmp / "venv" / "bin"
    bin_.mkdir()
    py = bin_ / "python3"
    py.symlink_to(sys.executable)
    exe = bin_ / "vllm"
    exe.write_text(f"#!{py}\nimport sys\n")
    exe.chmod(0o755)
    return exe


def test_watchdog_config_detected_from_real_vllm_source(tmp_path: Path, vllm033: Path) -> None:
    exe = _fake_venv(tmp_path, vllm033)
    ok, where = vllm_supports_watchdog(str(exe))
    assert ok is True and where.endswith("vllm/engine/arg_utils.py")
    b = tmp_path / "bundle"
    b.mkdir()
    env, added, argv, note = diagnostic_env(
        b, {"PATH": "/usr/bin", "NCCL_DEBUG": "WARN", "TORCH_NCCL_DUMP_ON_TIMEOUT": "0"},
        [str(exe), "serve", "m", "--api-key", "k"], stall_timeout=120, site_dir=None)
    i = argv.index("--watchdog-config")
    cfg = json.loads(argv[i + 1])
    assert cfg["dump_dir"] == str(b / "vllm-watchdog") and cfg["timeout"] == 90
    assert note and "added --watchdog-config" in note
    # user settings win: NCCL_DEBUG set → no NCCL_DEBUG_FILE; DUMP_ON_TIMEOUT kept at 0
    assert env["NCCL_DEBUG"] == "WARN" and "NCCL_DEBUG_FILE" not in env
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "0" and "TORCH_NCCL_DUMP_ON_TIMEOUT" not in added
    assert env["TORCH_FR_DUMP_TEMP_FILE"] == str(b / "flight" / "nccl_trace_rank_")
    assert env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == env["TORCH_FR_DUMP_TEMP_FILE"]
    assert "NCCL_RAS_ENABLE" not in added  # RAS left as it is
    # a user-given --watchdog-config is kept
    _e, _a, argv2, note2 = diagnostic_env(b, {}, [str(exe), "serve", "m", "--watchdog-config",
                                                  "{}"], stall_timeout=60, site_dir=None)
    assert argv2.count("--watchdog-config") == 1 and note2 and "kept" in note2


def test_watchdog_not_claimed_without_support(tmp_path: Path, vllm033: Path) -> None:
    """A vLLM whose arg parser has no --watchdog-config (the real 0.33 source with the flag
    removed, standing in for an older release) gets no flag."""
    tree = tmp_path / "old"
    (tree / "vllm" / "engine").mkdir(parents=True)
    src = (vllm033 / "vllm" / "engine" / "arg_utils.py").read_text()
    (tree / "vllm" / "engine" / "arg_utils.py").write_text(src.replace('"--watchdog-config"', '"--x"'))
    exe = _fake_venv(tmp_path, tree)
    _e, _a, argv, note = diagnostic_env(tmp_path, {}, [str(exe), "serve", "m"], stall_timeout=60,
                                        site_dir=None)
    assert "--watchdog-config" not in argv and note and "not supported" in note
    assert is_vllm_serve([str(exe), "serve", "m"]) and not is_vllm_serve(["python", "x.py"])


def test_source_of_prefixes() -> None:
    assert source_of("(Worker_TP3_DCP3 pid=237) INFO 12-02 ...", "stderr") == "Worker_TP3_DCP3"
    assert source_of("\x1b[0;36m(EngineCore_DP0 pid=77352)\x1b[0;0m INFO", "stdout") == "EngineCore_DP0"
    assert source_of("(VllmWorker rank=0 pid=85) ERROR 03-20", "stdout") == "VllmWorker_rank0"
    assert source_of("[rank3]:[E1012 22:31:22.267 ProcessGroupNCCL.cpp:607] x", "stderr") == "rank3"
    assert source_of("node-01:3873285:3873285 [0] NCCL INFO Bootstrap", "stdout") == "nccl-3873285"
    assert source_of("plain print", "stdout") == "stdout"


def test_py_spy_live_and_ptrace_facts(tmp_path: Path) -> None:
    p = subprocess.Popen([sys.executable, "-c", "import time\ndef idle_here():\n    while True:"
                          " time.sleep(0.1)\nidle_here()"])
    try:
        time.sleep(1.0)
        s1 = stacks.py_spy_dump(p.pid, native=True, timeout=10)
        assert s1.ok, s1.error
        assert "idle_here" in stacks.render_text(s1)
        time.sleep(0.5)
        s2 = stacks.py_spy_dump(p.pid, native=False, timeout=10)
        a = stacks.compare(s1, s2)
        assert a["state"] == "blocked" and "idle_here" in a["top"]
    finally:
        p.kill()
        p.wait()
    gone = stacks.py_spy_dump(p.pid, native=False, timeout=5)
    assert not gone.ok and gone.error_kind == "gone"
    f = stacks.ptrace_facts()
    assert "cap_sys_ptrace" in f
    adv = stacks.ptrace_advice({"cap_sys_ptrace": False, "yama_ptrace_scope": 1, "uid": 1000})
    assert "--cap-add SYS_PTRACE" in adv and "kernel.yama.ptrace_scope=0" in adv


def test_py_spy_refused_on_a_process_outside_our_reach() -> None:
    """pid 1 of this sandbox is outside our ptrace reach even as root (py-spy prints
    'Permission denied (os error 13)'); where it is reachable, the dump simply works."""
    s = stacks.py_spy_dump(1, native=False, timeout=10)
    if s.ok:
        assert s.threads
    else:
        assert s.error_kind in ("permission", "not-python"), s.error
        assert stacks.classify_error("Error: Permission denied (os error 13)") == "permission"


def test_parse_faulthandler_text() -> None:
    txt = ('Thread 0x00007f0000000001 (most recent call first):\n'
           '  File "/x/threading.py", line 320 in wait\n'
           '  File "/x/worker.py", line 12 in loop\n\n'
           'Current thread 0x00007f0000000000 (most recent call first):\n'
           '  File "/v/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce\n'
           '  File "/app/run.py", line 5 in <module>\n')
    th = stacks.parse_faulthandler(txt)
    assert len(th) == 2 and th[1]["frames"][0]["name"] == "all_reduce"
    s = stacks.Sample(pid=7, ok=True, method="faulthandler", threads=th)
    w = stacks.where(s)
    assert w["collective"] == "all_reduce" and w["caller"].startswith("<module> (run.py:5")


def test_fill_pg_config_on_gloo_shape() -> None:
    dump = {"version": "2.10", "pg_config": {"": {"name": "", "desc": "", "ranks": "[]"}},
            "entries": [{"process_group": ("0", "default_pg"), "collective_seq_id": 1},
                        {"process_group": ("1", "tp"), "collective_seq_id": 1}]}
    d2, changed = flight.fill_pg_config(dump, [0, 1, 2])
    assert changed and set(d2["pg_config"]) == {"0", "1"}
    assert d2["pg_config"]["1"] == {"name": "1", "desc": "tp", "ranks": "[0, 1, 2]"}
    assert dump["pg_config"] == {"": {"name": "", "desc": "", "ranks": "[]"}}  # input untouched


def test_manifest_is_valid_after_a_failing_collector(tmp_path: Path) -> None:
    b = Bundle.create(tmp_path)
    r1 = CollectorRecord(name="a", started="t", status="ok", seconds=0.1)
    b.record(r1)
    r2 = CollectorRecord(name="b", started="t", status="error", error="boom")
    b.record(r2)
    m = json.loads((b.root / "manifest.json").read_text())
    assert [(c["name"], c["status"]) for c in m["collectors"]] == [("a", "ok"), ("b", "error")]
    p = b.write_text("logs/big.txt", "x" * 100 + "END", cap=50)
    assert p.read_text().endswith("END") and "truncated" in p.read_text()
    tb = b.make_tarball()
    assert tb.exists() and tb.name == b.root.name + ".tar.gz"


class _RasServer:
    """A stand-in for NCCL's RAS listener (needs libnccl with a GPU job, which cannot exist
    here): it speaks the documented line protocol and answers two reports."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.n = 0
        self.th = threading.Thread(target=self.serve, daemon=True)
        self.th.start()

    def serve(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with c:
                f = c.makefile("rwb")
                fmt = "text"
                for raw in f:
                    line = raw.decode().strip()
                    if line.startswith("CLIENT PROTOCOL"):
                        f.write(b"SERVER PROTOCOL 2\n")
                    elif line.startswith("TIMEOUT") or line == "SET FORMAT json":
                        fmt = "json" if "json" in line else fmt
                        f.write(b"OK\n")
                    elif line.endswith("STATUS"):
                        self.n += 1
                        body = (json.dumps({"communicators_count": 1}) if fmt == "json" else
                                f"Group Comms ... Status Errors\n0 1 RUNNING MISMATCH #{self.n}\n")
                        f.write(body.encode())
                        f.flush()
                        break
                    f.flush()
                f.close()  # the report ends with EOF, as NCCL's does

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept()
        except OSError:
            pass
        self.sock.close()
        self.th.join(5)


def test_ras_client_protocol() -> None:
    srv = _RasServer()
    try:
        r = ras.query(f"127.0.0.1:{srv.port}", timeout=5)
        assert r.ok and "RUNNING MISMATCH" in r.text
        j = ras.query(f"127.0.0.1:{srv.port}", fmt="json", timeout=5)
        assert j.ok and json.loads(j.text)["communicators_count"] == 1
    finally:
        srv.close()
    closed = ras.query(f"127.0.0.1:{srv.port}", timeout=2)
    assert not closed.ok and not closed.listening
    assert ras.parse_addr("[::1]:2000") == ("::1", 2000)
    assert ras.parse_addr(None) == ("localhost", 28028)


def test_ras_collector_writes_two_snapshots(tmp_path: Path) -> None:
    from sm120kit.services.snapshot import CollectContext, Options, collect_procs

    srv = _RasServer()
    try:
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            from sm120kit.evidence.procs import tree

            tb, res = collect_procs(tree(p.pid), tmp_path, reason="t", deadline_s=20,
                                    options=Options(ras_addr=f"127.0.0.1:{srv.port}",
                                                    ras_gap_s=0.2, doctor=False, sample_gap_s=0.2),
                                    context=CollectContext())
        finally:
            p.kill()
            p.wait()
    finally:
        srv.close()
    d = tb.with_name(tb.name[: -len(".tar.gz")])
    assert "#1" in (d / "ras" / "status-1.txt").read_text()
    assert "#3" in (d / "ras" / "status-2.txt").read_text()  # 1: text, 2: json, 3: text
    assert (d / "ras" / "status-1.json").exists()
    man = {c["name"]: c for c in json.loads((d / "manifest.json").read_text())["collectors"]}
    assert man["ras"]["status"] == "ok" and man["doctor"]["status"] == "skipped"
    assert os.path.exists(tb)
