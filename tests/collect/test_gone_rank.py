"""A rank that exits while collect reads its stack is one clean line (issue 31 item 3), not
py-spy's raw ``Error: No such process (os error 3)``: a real process that has exited, and the
real py-spy of this environment."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sm120kit.evidence.stacks import py_spy_dump, py_spy_path


def test_an_exited_process_is_one_clean_line() -> None:
    if py_spy_path() is None:
        pytest.skip("py-spy is not installed")
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(timeout=30)  # reaped: the pid names no process now
    s = py_spy_dump(p.pid, timeout=10.0)
    assert not s.ok and s.error_kind == "gone"
    assert s.error == f"process {p.pid} exited before its stack could be read"
    assert "\n" not in s.error and "os error" not in s.error
