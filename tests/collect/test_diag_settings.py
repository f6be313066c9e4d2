"""Diagnostic settings collect adds to a launch, and the Flight Recorder wait after a timeout.

Both were found on a real H200 run (issue 8): the user had set the deprecated
TORCH_NCCL_DEBUG_INFO_TEMP_FILE, collect added TORCH_FR_DUMP_TEMP_FILE beside it (the new name
wins, so the user's dump location was silently moved), and the 3 s Flight Recorder wait ended
before torch finished dumping after the watchdog timeout.
"""

from __future__ import annotations

from pathlib import Path

from sm120kit.services.launchenv import diagnostic_env
from sm120kit.services.snapshot import FR_TIMEOUT_WAIT_S, CollectContext, Options, _fr_wait

WATCHDOG = (
    "[rank0]:[E1202 17:55:46.981170449 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1048576, "
    "NumelOut=1048576, Timeout(ms)=10000) ran for 10100 milliseconds before timing out."
)


def test_user_fr_prefix_under_old_name_is_kept(tmp_path: Path) -> None:
    user = str(tmp_path / "mine" / "trace_")
    env, added, _, _ = diagnostic_env(
        tmp_path / "b", {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": user}, ["python", "x.py"],
        stall_timeout=30, site_dir=None,
    )
    assert env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == user
    assert "TORCH_FR_DUMP_TEMP_FILE" not in env
    assert "TORCH_FR_DUMP_TEMP_FILE" not in added


def test_fr_prefix_added_when_user_set_none(tmp_path: Path) -> None:
    env, added, _, _ = diagnostic_env(
        tmp_path / "b", {}, ["python", "x.py"], stall_timeout=30, site_dir=None
    )
    assert env["TORCH_FR_DUMP_TEMP_FILE"] == env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"]
    assert env["TORCH_FR_DUMP_TEMP_FILE"].startswith(str(tmp_path / "b" / "flight"))
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"


def test_fr_wait_is_long_only_while_torch_dumps() -> None:
    opts = Options()
    plain = CollectContext(mode="launch", reason="no output for 30 s", env={})
    assert _fr_wait(opts, plain) == opts.fr_wait_s
    timed_out = CollectContext(mode="launch", reason=f"known hang message (watchdog-timeout): {WATCHDOG}",
                        env={"TORCH_NCCL_DUMP_ON_TIMEOUT": "1"})
    assert _fr_wait(opts, timed_out) == FR_TIMEOUT_WAIT_S > opts.fr_wait_s
    in_logs = CollectContext(mode="launch", reason="stall", env={}, logs={"rank0": [WATCHDOG]})
    assert _fr_wait(opts, in_logs) == FR_TIMEOUT_WAIT_S
    off = CollectContext(mode="launch", reason=WATCHDOG, env={"TORCH_NCCL_DUMP_ON_TIMEOUT": "0"})
    assert _fr_wait(opts, off) == opts.fr_wait_s
