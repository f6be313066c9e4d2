"""Issue 23 item 7, the edges a new user found: ``-o`` through a regular file, and torch/glog
lines that carry their own time in the timeline."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from sm120kit.evidence.logs.analyze import LogAnalysis
from sm120kit.evidence.logs.prefix import attribute

from .helpers import run_collect

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm-logs"


def _secs(mon: int, day: int, h: int, m: int, s: int) -> float:
    """The analyser's sortable time (month/day/time, no year): recomputed here, not imported."""
    return float((((mon * 31 + day) * 24 + h) * 60 + m) * 60 + s)


def test_output_dir_through_a_regular_file_is_one_error_line(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("keep me\n")
    marker = tmp_path / "ran"
    r = run_collect(["-o", str(afile / "sub"), "--", sys.executable, "-c",
                     f"open({str(marker)!r}, 'w').close()"],
                    env=dict(os.environ, HOME=str(tmp_path / "home")))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith("error: -o ") and "is a file, not a directory" in lines[0], lines
    assert "Traceback" not in r.stderr and len(lines) <= 2, r.stderr
    assert afile.read_text() == "keep me\n" and not marker.exists()  # nothing lost, nothing run


def test_torch_line_of_a_real_log_has_its_own_time() -> None:
    """log09 (a real 2-node vLLM run): ``[rank1]:[W718 21:14:18.452103478 ...]`` -- c10's month
    is not zero-padded; the line's time is 07-18 21:14:18, not the line before's."""
    line = next(ln for ln in (DATA / "log09.txt").read_text(errors="replace").splitlines()
                if ln.startswith("[rank1]:[W718 21:14:18"))
    o = attribute(line)
    assert o.kind == "torch" and o.level == "WARNING"
    assert o.t == _secs(7, 18, 21, 14, 18)


def test_watchdog_line_gets_its_own_time_in_the_timeline() -> None:
    """A torch watchdog line ten minutes after the last vLLM line, in c10's and in glog's own
    form, each without a rank prefix: the timeline's last time is the watchdog's."""
    vllm = ("(EngineCore_DP0 pid=77) INFO 07-20 10:01:00 [gpu_model_runner.py:2602] Starting to "
            "load model zai-org/GLM-5...")
    for wd in ("[E720 10:11:10.123456789 ProcessGroupNCCL.cpp:685] [PG ID 2 PG GUID 3 Rank 1] "
               "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, "
               "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 "
               "milliseconds before timing out.",
               "E0720 10:11:10.123456 4242 ProcessGroupNCCL.cpp:685] Watchdog caught collective "
               "operation timeout"):
        an = LogAnalysis()
        an.feed_lines("child.log", [vllm, wd])
        an.finish()
        assert an.t_first == _secs(7, 20, 10, 1, 0)
        assert an.t_last == _secs(7, 20, 10, 11, 10), wd[:20]
        assert attribute(wd).level == "ERROR"
