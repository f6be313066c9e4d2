"""The phase timeline on the real public vLLM logs in ``tests/data/vllm-logs``, replayed as the
supervised child's output (a child that writes the log's bytes with small sleeps, then waits)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support.paths import VLLM_LOGS

from .helpers import leftovers, only_bundle, read_tarball, run_collect

LOGS = VLLM_LOGS

REPLAY = r'''
import sys, time
data = open(sys.argv[1], "rb").read()
for i, line in enumerate(data.split(b"\n")):
    sys.stdout.buffer.write(line + b"\n")
    sys.stdout.buffer.flush()
    time.sleep(0.002)
if sys.argv[2] == "exit1":
    sys.exit(1)
while True:
    time.sleep(0.2)
'''


def _manifest() -> dict[str, dict]:
    return {e["id"]: e for e in json.loads((LOGS / "manifest.json").read_text())}


@pytest.mark.parametrize("log_id", ["log01", "log06", "log08"])
def test_until_ready_on_real_startup_logs(log_id: str, tmp_path: Path) -> None:
    m = _manifest()[log_id]
    script = tmp_path / "replay.py"
    script.write_text(REPLAY)
    out = tmp_path / "out"
    r = run_collect(["-o", str(out), "--until-ready", "--stall-timeout", "30", "--json", "--",
                     sys.executable, str(script), str(LOGS / f"{log_id}.txt"), "wait"])
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout)
    assert res["outcome"] == "ready"
    phases = [p["phase"] for p in res["timeline"]]
    want = m["phases_seen"][: m["phases_seen"].index("api-server-ready") + 1]
    assert phases[: len(want)] == want
    ts = [p["t"] for p in res["timeline"]]
    assert ts == sorted(ts)
    assert res["stop_steps"][0]["signal"] == "SIGINT"  # the waiting child was stopped by us
    assert res["bundle"] is None and not (out.exists() and list(out.iterdir()))


def test_crashed_log_gives_error_timeline_and_bundle(tmp_path: Path) -> None:
    m = _manifest()["log09"]
    script = tmp_path / "replay.py"
    script.write_text(REPLAY)
    out = tmp_path / "out"
    r = run_collect(["-o", str(out), "--stall-timeout", "30", "--json", "--no-doctor", "--",
                     sys.executable, str(script), str(LOGS / "log09.txt"), "exit1"])
    assert r.returncode == 1, r.stderr[-2000:]
    res = json.loads(r.stdout)
    # the log's "died"/"EngineCore failed" lines are death signals: caught before the exit
    assert res["outcome"] == "crashed"
    assert res["reason"].startswith("known hang message (")
    files = read_tarball(only_bundle(out))
    tl = json.loads(files["timeline.json"])
    phases = [p["phase"] for p in tl["phases"]]
    assert phases == m["phases_seen"][: len(phases)] and "error" in phases
    assert tl["stall_kind"] == "signal"
    assert "Phase timeline" in files["summary.md"].decode()
    # per-source split of vLLM prefixes
    assert any(k.startswith("logs/by-source/") and k != "logs/by-source/stdout.log" for k in files)
    assert leftovers(json.loads(files["processes.json"])) == []
