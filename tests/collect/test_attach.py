"""``sm120kit collect --attach``: discovery of a process tree titled like vLLM's (setproctitle:
``VLLM::EngineCore`` launcher, ``VLLM::Worker_TP<r>`` ranks in a real gloo stall); never kills."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil

from sm120kit.evidence.procs import classify, discover

from .helpers import (
    GLOO_JOB,
    kill_group,
    only_bundle,
    read_tarball,
    run_collect,
    wait_for_ranks,
)


def test_classify_titles() -> None:
    assert classify(["VLLM::Worker_TP3_DCP3"]) == ("Worker_TP3_DCP3", "worker")
    assert classify(["VLLM::EngineCore"]) == ("EngineCore", "engine-core")
    assert classify(["VLLM::EngineCore_DP0"]) == ("EngineCore_DP0", "engine-core")
    assert classify(["VLLM::APIServer_0"]) == ("APIServer_0", "api-server")
    assert classify(["sm120kit::warmup_DCP5"]) == ("warmup_DCP5", "warmup-rank")
    assert classify(["/venv/bin/python3", "/venv/bin/vllm", "serve", "m"]) == ("api-server",
                                                                              "api-server")
    assert classify(["/usr/bin/python3", "x.py"])[1] == "python"
    assert classify(["bash"])[0] is None


def test_attach_discovers_and_never_kills(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    with open(log, "wb") as f:
        p = subprocess.Popen([sys.executable, str(GLOO_JOB), "--world", "2", "--mode", "stall",
                              "--launcher-title", "VLLM::EngineCore"],
                             stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ranks = wait_for_ranks(p.pid, 2, line_file=log)
        rank_pids = {r.pid for r in ranks}
        # from a worker pid: climbs to the EngineCore, takes its whole tree
        found = discover(min(rank_pids))
        labels = {d.pid: d.label for d in found}
        assert labels[p.pid] == "EngineCore"
        assert sorted(labels[r] for r in rank_pids) == ["Worker_TP0", "Worker_TP1"]
        # without a pid: a search over all processes finds the same tree (maybe others too)
        assert {p.pid} | rank_pids <= {d.pid for d in discover(None)}
        out = tmp_path / "out"
        r = run_collect(["--attach", str(min(rank_pids)), "-o", str(out), "--deadline", "30",
                         "--json", "--no-doctor"])
        assert r.returncode == 0, r.stderr[-3000:]
        res = json.loads(r.stdout)
        assert res["mode"] == "attach"
        files = read_tarball(only_bundle(out))
        procs = json.loads(files["processes.json"])
        assert procs[str(p.pid)]["label"] == "EngineCore"
        assert procs[str(p.pid)]["ours"] is False
        an = json.loads(files["stacks/analysis.json"])["processes"]
        for rp in rank_pids:
            assert f"stacks/{rp}.json" in files
        colls = sorted(str(an[str(rp)].get("collective")) for rp in rank_pids)
        assert colls == ["None", "all_reduce"]
        assert "launch" not in files["timeline.json"].decode()
        # nothing was signalled
        time.sleep(0.5)
        assert p.poll() is None
        assert all(psutil.Process(rp).status() != psutil.STATUS_ZOMBIE for rp in rank_pids)
    finally:
        kill_group(p)


def test_attach_nothing_found_is_a_user_error(tmp_path: Path) -> None:
    r = run_collect(["--attach", "999999999", "-o", str(tmp_path)])
    assert r.returncode == 2
    assert r.stderr.startswith("error: no process with pid 999999999")
    assert "hint:" in r.stderr
    for args in (["--attach", "vllm", "serve"], ["--attach", "--", "vllm", "serve"],
                 ["--attach", "12", "13"]):
        r = run_collect(args)
        assert r.returncode == 2 and "PID" in r.stderr.splitlines()[0], (args, r.stderr)
    r = run_collect(["--", "no-such-command-sm120kit"])
    assert r.returncode == 2 and r.stderr.startswith("error: command not found")
    r = run_collect([])
    assert r.returncode == 2 and "no command to launch" in r.stderr
