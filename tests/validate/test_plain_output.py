"""``sm120kit validate ... | cat`` (issue 32's done-when): piped, the verdict, the per-check
records and the reasons are plain lines of ``$COLUMNS`` (default 100) columns, one check a line,
no box drawing; against real server processes (``fake_server.py``)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.paths import ROOT

BOX = set("┏┃━┡│└┌─╇┼┩")


def test_piped_validate_is_plain_records(servers: dict[str, str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for var in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE"):
        env.pop(var, None)
    p = subprocess.run(
        [sys.executable, "-m", "sm120kit", "validate", "--url", servers["lse_base_e"],
         "--reference-url", servers["reference"], "--dcp", "4", "--interleave", "64",
         "--prompt-lengths", "400", "--lengths", "1024", "--max-tokens", "16"],
        capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 3, p.stderr[-3000:]  # numerically wrong (docs/exit-codes.md)
    lines = p.stdout.splitlines()
    assert not BOX & set(p.stdout)
    assert [ln for ln in lines if len(ln) > 100] == []
    assert lines[0].startswith("FAIL: ")
    # one record a check: its name opens a line, its verdict on that line
    rows = [ln for ln in lines if ln.startswith(("prose@", "records@", "code@", "needle@"))
            and ln.rstrip().endswith(("fail", "pass", "suspicious"))]
    assert len(rows) >= 4, lines
