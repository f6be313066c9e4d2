"""``sm120kit collect -- CMD``: real supervised launches of the gloo job (real processes, real
collectives), run through the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.support import sigint_default

from .helpers import GLOO_JOB, leftovers, only_bundle, read_tarball, run_collect


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env


@pytest.mark.slow  # a multi-rank gloo job run to a stall/crash: 15-30 s on 2 busy cores
def test_launch_stall_bundle_has_every_rank(tmp_path: Path) -> None:
    out = tmp_path / "out"
    t0 = time.monotonic()
    r = run_collect(["-o", str(out), "--stall-timeout", "4", "--deadline", "30", "--json", "--",
                     sys.executable, str(GLOO_JOB), "--world", "3", "--mode", "stall"], env=_env())
    wall = time.monotonic() - t0
    assert r.returncode == 1, r.stderr[-3000:]
    res = json.loads(r.stdout)
    assert res["outcome"] == "stalled" and "no output" in res["reason"]
    assert res["detect_to_bundle_s"] < 30 + 5  # within its deadline (+ packing)
    assert wall < 120
    tb = only_bundle(out)
    assert res["bundle"] == str(tb)
    files = read_tarball(tb)
    procs = json.loads(files["processes.json"])
    ranks = {pid: p for pid, p in procs.items() if p["role"] == "worker"}
    assert sorted(p["label"] for p in ranks.values()) == ["Worker_TP0", "Worker_TP1", "Worker_TP2"]
    an = json.loads(files["stacks/analysis.json"])["processes"]
    for pid in ranks:
        assert f"stacks/{pid}.json" in files and f"stacks/{pid}.2.json" in files
        assert an[pid]["state"] in ("blocked", "spinning", "progressing")
    by_label = {ranks[pid]["label"]: an[pid] for pid in ranks}
    assert by_label["Worker_TP0"]["collective"] == "all_reduce"
    assert by_label["Worker_TP2"]["collective"] == "all_reduce"
    assert by_label["Worker_TP1"].get("collective") is None
    assert "skip_collective_forever" in by_label["Worker_TP1"]["top"]
    assert by_label["Worker_TP0"]["state"] == "blocked"
    # launch-mode layout
    log = files["logs/child.log"].decode()
    assert "entering all_reduce" in log and "skipping the next collective" in log
    assert "logs/by-source/Worker_TP1.log" in files
    env = json.loads(files["env.json"])
    assert env["added_by_collect"]["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert env["added_by_collect"]["NCCL_DEBUG"] == "INFO"
    assert env["added_by_collect"]["TORCH_FR_DUMP_TEMP_FILE"].endswith("flight/nccl_trace_rank_")
    # the gloo ranks wrote FR dumps to the prefix collect gave them: analysed with pg_config filled
    idx = json.loads(files["flight/index.json"])
    assert idx["groups"] and idx["groups"][0]["summary"]["not_joined"][0]["missing_ranks"] == [1], idx
    summary = files["summary.md"].decode()
    # the verdict is the diagnose rules engine's over the bundle
    assert "Worker_TP1 is elsewhere" in summary and "never joined collective" in summary
    man = json.loads(files["manifest.json"])
    assert {c["name"] for c in man["collectors"]} >= {"stacks", "nvml", "ras", "flight", "doctor",
                                                       "host", "env", "logs"}
    # stopped cleanly, nothing left behind
    assert res["stop_steps"] and res["stop_steps"][0]["signal"] == "SIGINT"
    assert leftovers(procs) == []


@pytest.mark.slow  # a multi-rank gloo job run to a stall/crash: 15-30 s on 2 busy cores
def test_launch_crash_on_one_rank(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = run_collect(["-o", str(out), "--stall-timeout", "60", "--deadline", "30", "--json", "--",
                     sys.executable, str(GLOO_JOB), "--world", "3", "--mode", "crash",
                     "--survivor-delay", "15"], env=_env())
    assert r.returncode == 1, r.stderr[-3000:]
    res = json.loads(r.stdout)
    assert res["outcome"] == "crashed"
    assert "Worker_TP1" in res["reason"] and "died" in res["reason"]
    files = read_tarball(only_bundle(out))
    tl = json.loads(files["timeline.json"])
    assert tl["deaths"][0]["label"] == "Worker_TP1"
    assert any(p["phase"] == "error" for p in tl["phases"])
    assert "simulated failure in warmup" in files["logs/child.log"].decode()
    assert "Traceback (most recent call last)" in files["logs/by-source/rank1.log"].decode()
    an = json.loads(files["stacks/analysis.json"])["processes"]
    survivors = sorted(a["label"] for a in an.values() if a["role"] == "worker")
    assert survivors == ["Worker_TP0", "Worker_TP2"]  # snapshot taken while they still ran
    assert all("busy_elsewhere" in (a.get("caller") or "") for a in an.values()
               if a["role"] == "worker")
    # the verdict is the diagnose rules engine's: the first failing rank with its exception
    summary = files["summary.md"].decode()
    assert "Worker_TP1 rank 1 pid" in summary and "failed first" in summary
    assert leftovers(json.loads(files["processes.json"])) == []


@pytest.mark.slow  # a multi-rank gloo job run to a stall/crash: 15-30 s on 2 busy cores
def test_launch_watchdog_line_is_a_stall_signal(tmp_path: Path) -> None:
    out = tmp_path / "out"
    t0 = time.monotonic()
    r = run_collect(["-o", str(out), "--stall-timeout", "300", "--deadline", "20", "--json",
                     "--sample-gap", "1", "--", sys.executable, str(GLOO_JOB), "--world", "2",
                     "--mode", "watchdog"], env=_env())
    assert r.returncode == 1, r.stderr[-3000:]
    assert time.monotonic() - t0 < 100  # far below the 300 s silence timeout
    res = json.loads(r.stdout)
    assert res["outcome"] == "stalled"
    assert "watchdog-timeout" in res["reason"] and "WorkNCCL(SeqNum=4" in res["reason"]
    files = read_tarball(only_bundle(out))
    assert json.loads(files["timeline.json"])["stall_kind"] == "signal"
    assert leftovers(json.loads(files["processes.json"])) == []


@pytest.mark.slow  # a multi-rank gloo job run to a stall/crash: 15-30 s on 2 busy cores
def test_faulthandler_fallback_when_ptrace_is_not_used(tmp_path: Path) -> None:
    """``--stacks faulthandler`` forces the no-ptrace path: our sitecustomize registered SIGUSR1
    in every launched Python process; collect signals only those and parses the dumps."""
    out = tmp_path / "out"
    r = run_collect(["-o", str(out), "--stall-timeout", "4", "--deadline", "20", "--json",
                     "--stacks", "faulthandler", "--no-doctor", "--", sys.executable,
                     str(GLOO_JOB), "--world", "2", "--mode", "stall"], env=_env())
    assert r.returncode == 1, r.stderr[-3000:]
    files = read_tarball(only_bundle(out))
    procs = json.loads(files["processes.json"])
    an = json.loads(files["stacks/analysis.json"])["processes"]
    workers = {procs[pid]["label"]: an[pid] for pid in an if procs[pid]["role"] == "worker"}
    assert set(workers) == {"Worker_TP0", "Worker_TP1"}
    assert all(a["method"] == "faulthandler" for a in workers.values())
    assert workers["Worker_TP0"]["collective"] == "all_reduce"
    assert "skip_collective_forever" in workers["Worker_TP1"]["top"]
    assert leftovers(procs) == []


@pytest.mark.slow  # a multi-rank gloo job run to a stall/crash: 15-30 s on 2 busy cores
def test_ctrl_c_writes_bundle_and_exits_130(tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-m", "sm120kit", "collect", "-o", str(out),
                          "--stall-timeout", "600", "--deadline", "20", "--no-doctor", "--",
                          sys.executable, str(GLOO_JOB), "--world", "2", "--mode", "stall"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=sigint_default)  # Ctrl-C reaches it under `pytest &` too
    try:
        end = time.monotonic() + 90
        bundle_dir = None
        while time.monotonic() < end:
            dirs = [d for d in out.glob("sm120kit-bundle-*") if d.is_dir()] if out.exists() else []
            if dirs and "entering all_reduce" in (dirs[0] / "logs" / "child.log").read_text(
                    errors="replace"):
                bundle_dir = dirs[0]
                break
            time.sleep(0.3)
        assert bundle_dir is not None
        p.send_signal(signal.SIGINT)
        _o, err = p.communicate(timeout=90)
    finally:
        if p.poll() is None:  # the test failed: do not leave collect or its job behind
            kids = psutil.Process(p.pid).children(recursive=True)
            p.kill()
            p.wait()
            for k in kids:
                try:
                    k.kill()
                except psutil.Error:
                    pass
    assert p.returncode == 130, err[-3000:]
    files = read_tarball(only_bundle(out))
    assert json.loads(files["timeline.json"])["stall_kind"] == "interrupt"
    assert any(k.startswith("stacks/") and k.endswith(".2.json") for k in files)
    assert leftovers(json.loads(files["processes.json"])) == []


def test_exit_codes_and_bundles_for_plain_exits(tmp_path: Path) -> None:
    """Exit 0 → 0 and no bundle (nothing left in -o); a non-zero exit → that code and a
    post-mortem bundle with the output."""
    out = tmp_path / "ok"
    r = run_collect(["-o", str(out), "--", sys.executable, "-c", "print('fine')"], env=_env())
    assert r.returncode == 0 and "fine" in r.stdout
    assert not out.exists() or not list(out.iterdir())
    out = tmp_path / "bad"
    r = run_collect(["-o", str(out), "--", sys.executable, "-c",
                     "import sys; print('hello'); sys.exit(3)"], env=_env())
    assert r.returncode == 3
    assert "hello" in r.stdout
    files = read_tarball(only_bundle(out))
    assert "hello" in files["logs/child.log"].decode()
    assert json.loads(files["timeline.json"])["exit_code"] == 3


def test_closed_terminal_still_stops_the_child_and_bundles(tmp_path: Path) -> None:
    """collect's own stdout/stderr closed (a dead terminal, `| head`): it still detects the stall,
    writes the bundle and stops its child tree."""
    out = tmp_path / "out"
    child = ("import time, sys\nfor i in range(50): print('line', i, flush=True)\n"
             "while True: time.sleep(0.2)\n")
    p = subprocess.Popen([sys.executable, "-m", "sm120kit", "collect", "-o", str(out),
                          "--stall-timeout", "2", "--deadline", "15", "--no-doctor", "--",
                          sys.executable, "-c", child],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()
    p.stderr.close()
    try:
        rc = p.wait(timeout=90)
    finally:
        if p.poll() is None:
            for k in psutil.Process(p.pid).children(recursive=True):
                k.kill()
            p.kill()
    assert rc == 1
    files = read_tarball(only_bundle(out))
    assert "line 49" in files["logs/child.log"].decode()
    assert leftovers(json.loads(files["processes.json"])) == []


def test_keep_running_after_a_stall(tmp_path: Path) -> None:
    """--keep-running: the bundle is written at the stall, the command is left alone and exits
    by itself; collect still reports the stall (exit 1)."""
    out = tmp_path / "out"
    child = ("import time\nprint('step 1', flush=True)\ntime.sleep(4)\n"
             "print('recovered', flush=True)\n")
    r = run_collect(["-o", str(out), "--stall-timeout", "1.5", "--deadline", "10", "--json",
                     "--keep-running", "--no-doctor", "--sample-gap", "0.5", "--",
                     sys.executable, "-c", child], env=_env())
    assert r.returncode == 1, r.stderr[-2000:]
    res = json.loads(r.stdout)
    assert res["outcome"] == "stalled" and res["child_exit_code"] == 0
    assert res["stop_steps"] == []  # never signalled: it finished on its own
    assert "recovered" in r.stderr  # with --json the child's stdout is echoed on stderr
    files = read_tarball(only_bundle(out))
    assert "step 1" in files["logs/child.log"].decode()
