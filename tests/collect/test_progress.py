"""collect tells a cold start from a hang: real processes (fake_vllm_serve.py prints vLLM's
real log lines and runs real compilers / reads a real sparse file), real `sm120kit collect` in a
subprocess, stall timeouts of a few seconds."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from sm120kit.errors import UserError
from sm120kit.services.progress import ProgressSampler, parse_patience

from .helpers import only_bundle, read_tarball, run_collect

FAKE = Path(__file__).resolve().parent / "fake_vllm_serve.py"
STALL = 3.0


def _collect(tmp_path: Path, *args: str, timeout: float = 120) -> tuple[int, dict, str]:
    env = dict(os.environ, HOME=str(tmp_path / "home"))
    r = run_collect(["-o", str(tmp_path / "out"), "--stall-timeout", str(STALL), "--deadline",
                     "15", "--no-doctor", "--status-every", "2", "--json", *args], env=env,
                    timeout=timeout)
    assert r.stdout, r.stderr[-3000:]
    return r.returncode, json.loads(r.stdout), r.stderr


@pytest.mark.slow  # a real child run through a long quiet phase: 12-16 s on 2 busy cores
@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_cold_start_compiling_is_not_a_stall(tmp_path: Path) -> None:
    """~5x the stall timeout of real compiles (cc, and nvcc -arch=sm_120 where installed) with
    only the shm_broadcast wait line printed, then ready: collect waits and exits 0."""
    secs = 5 * STALL
    rc, res, err = _collect(tmp_path, "--until-ready", "--", sys.executable, str(FAKE),
                            "compile", "--seconds", str(secs))
    assert rc == 0 and res["outcome"] == "ready", (res["reason"], err[-2000:])
    assert res["seconds"] > secs
    prog = res["progress"]
    done = prog["compilers_done"]
    assert done.get("cc", 0) + done.get("cc1", 0) + done.get("nvcc", 0) >= 3, prog
    if shutil.which("nvcc"):
        # nvcc itself lives for seconds; its cicc/ptxas children may finish between samples,
        # their CPU then shows as reaped children time
        assert done.get("nvcc", 0) >= 1
    assert prog["compile_cpu_s"] + prog["reaped_children_cpu_s"] > 0
    assert "compiling:" in err and "nvcc done" in err or "compiler runs done" in err
    assert "patience 30 min" in err
    # a healthy run announces no bundle dir and leaves none
    assert "bundle dir" not in err and not list((tmp_path / "out").glob("sm120kit-bundle-*"))
    assert res["bundle"] is None
    # at ready: the KV lines were read (model config not local: engagement unknown)
    kv = res["kv_capacity"]
    assert kv["tokens"] == 164_160 and kv["available_gib"] == 8.25 and kv["engaged"] == "unknown"


def test_ready_reports_dcp_not_engaged(tmp_path: Path) -> None:
    """At ready, collect reads the KV lines: DCP 4 asked, the DCP-1 density printed."""
    model = tmp_path / "GLM-5.2-504B-Nvidia"
    model.mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "data" / "kv" /
                "glm52_reap_nvfp4_config.json", model / "config.json")
    rc, res, err = _collect(tmp_path, "--until-ready", "--", sys.executable, str(FAKE),
                            "compile", "--seconds", "0.5", "--model", str(model),
                            "--decode-context-parallel-size", "4")
    assert rc == 0 and res["outcome"] == "ready", res["reason"]
    kv = res["kv_capacity"]
    assert kv["engaged"] == "no" and kv["requested_dcp"] == 4, kv
    assert "DCP engaged: no" in err


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_engine_ready_timeout_during_jit_is_called_a_cold_start(tmp_path: Path) -> None:
    rc, res, err = _collect(tmp_path, "--", sys.executable, str(FAKE), "compile-timeout",
                            "--seconds", "4")
    assert rc == 1 and res["outcome"] == "stalled"
    assert "rpc-timeout" in res["reason"] and "a cold start past vLLM's" in res["reason"]
    assert "VLLM_ENGINE_READY_TIMEOUT_S=1800" in res["reason"]


@pytest.mark.slow  # a real child run through a long quiet phase: 12-16 s on 2 busy cores
def test_reading_weights_is_not_a_stall(tmp_path: Path) -> None:
    weights = tmp_path / "model-00001-of-00064.safetensors"
    with open(weights, "wb") as fh:
        fh.truncate(8 << 30)  # sparse: 8 GiB of holes, no disk used
    # reads never stop, so the allowed quiet stays near --stall-timeout (the weight-load patience
    # is for slow channels): 5 s keeps a starved sampler on 2 busy cores from looking quiet
    stall = 5.0
    secs = 3 * stall
    rc, res, err = _collect(tmp_path, "--stall-timeout", str(stall), "--until-ready", "--",
                            sys.executable, str(FAKE), "weights", "--seconds", str(secs),
                            "--file", str(weights))
    assert rc == 0 and res["outcome"] == "ready", (res["reason"], err[-2000:])
    assert res["progress"]["io_read_bytes"] > 1 << 30
    assert "loading weights:" in err and "GB read" in err


def test_silent_block_is_caught_within_timeout(tmp_path: Path) -> None:
    mark = tmp_path / "mark"
    rc, res, err = _collect(tmp_path, "--", sys.executable, str(FAKE), "hang", "--mark",
                            str(mark))
    assert rc == 1 and res["outcome"] == "stalled"
    assert "no output and no progress on any channel" in res["reason"]
    latency = res["detected_at"] - float(mark.read_text())
    assert latency < STALL + 4, latency
    files = read_tarball(only_bundle(tmp_path / "out"))
    prog = json.loads(files["progress.json"])
    assert "channels_last_moved_s_ago" in prog and prog["samples"] >= 2


def test_spinning_cpu_is_caught(tmp_path: Path) -> None:
    mark = tmp_path / "mark"
    rc, res, err = _collect(tmp_path, "--", sys.executable, str(FAKE), "spin", "--mark",
                            str(mark))
    assert rc == 1 and res["outcome"] == "stalled", res["reason"]
    assert res["reason"].startswith("spinning: CPU busy (")
    latency = res["detected_at"] - float(mark.read_text())
    assert latency < STALL + 5, latency
    prog = json.loads(read_tarball(only_bundle(tmp_path / "out"))["progress.json"])
    assert prog["moved_last"] == "cpu"


def test_hang_inside_weight_load_is_caught_within_timeout(tmp_path: Path) -> None:
    """Issue 23 item 1: the model-load line, then one frame busy forever (the CPU side of a CUDA
    kernel that never returns): no bytes read, no births, the same py-spy frames. The phase's
    patience (30 min) does not apply when no progress channel moves: stalled within
    stall-timeout + 5 s."""
    mark = tmp_path / "mark"
    rc, res, err = _collect(tmp_path, "--", sys.executable, str(FAKE), "load-spin", "--mark",
                            str(mark))
    assert rc == 1 and res["outcome"] == "stalled", (res["reason"], err[-2000:])
    assert res["current_phase"] == "model-load", res["timeline"]
    latency = res["detected_at"] - float(mark.read_text())
    assert latency < STALL + 5, latency
    assert "inside weight-load" in res["reason"], res["reason"]
    assert "loading weights:" in err and "patience 30 min" in err


@pytest.mark.slow  # 18 s of a slow weight load on purpose
def test_slowly_moving_weight_load_keeps_its_patience(tmp_path: Path) -> None:
    """The other half of item 1: bytes read at growing intervals, the last ones (4.5 s) longer
    than the stall timeout (3 s): a channel moving slowly keeps the phase's patience (the
    allowed quiet is three times the longest recent gap), and the launch becomes ready."""
    weights = tmp_path / "model-00001-of-00064.safetensors"
    with open(weights, "wb") as fh:
        fh.truncate(1 << 30)
    rc, res, err = _collect(tmp_path, "--until-ready", "--", sys.executable, str(FAKE),
                            "load-slow", "--file", str(weights))
    assert rc == 0 and res["outcome"] == "ready", (res["reason"], err[-2000:])
    assert res["seconds"] > 17


def test_interrupted_child_output_stays_out_of_the_terminal(tmp_path: Path) -> None:
    """After collect decides to stop its child (SIGINT first), the child's dying words (a
    KeyboardInterrupt traceback) are not echoed raw onto collect's terminal."""
    rc, res, err = _collect(tmp_path, "--", sys.executable, str(FAKE), "spin")
    assert rc == 1
    assert any(st.get("signal") == "SIGINT" for st in res["stop_steps"]), res["stop_steps"]
    assert "KeyboardInterrupt" not in err and "Traceback" not in err, err[-2000:]
    assert "lost sys.stderr" not in err and "Exception ignored" not in err


def test_patience_option_parsing() -> None:
    assert parse_patience(["jit-compile=60", "autotune=5"]) == {"jit-compile": 60.0,
                                                               "autotune": 5.0}
    for bad in ("jit=5", "weight-load=-1", "autotune"):
        with pytest.raises(UserError, match="--patience"):
            parse_patience([bad])


def test_sampler_sees_a_real_child_tree(tmp_path: Path) -> None:
    import subprocess

    p = subprocess.Popen([sys.executable, "-c", "import subprocess,time; time.sleep(0.5); "
                          "subprocess.run(['sleep','1']); time.sleep(1)"])
    try:
        s = ProgressSampler(p.pid, [tmp_path])
        moved: set[str] = set()
        end = time.monotonic() + 4
        while time.monotonic() < end and p.poll() is None:
            moved |= s.sample().moved
            (tmp_path / f"f{s.samples}").write_bytes(b"x")
            time.sleep(0.3)
        assert {"births", "exits"} <= moved
    finally:
        p.kill()
        p.wait()
