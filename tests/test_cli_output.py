"""Output rules (issue 22 item 3): a command or path meant to be copied is printed on one line
(never broken by rich, even past the terminal width); a long table cell is shortened with an
ellipsis while ``--json`` keeps the whole text."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from sm120kit.doctor.model import CheckResult, DoctorReport
from sm120kit.doctor.render import render_table
from sm120kit.report import CELL_MAX, cell
from tests.support.paths import ROOT


def test_copyable_path_is_one_line_when_piped(tmp_path: Path) -> None:
    out = tmp_path / ("a-rather-long-directory-name-" * 4) / ("and-another-one-" * 4) / "export"
    out.parent.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
    p = subprocess.run([sys.executable, "-m", "sm120kit", "export", "--branch", "vllm-0.34.0",
                        "-o", str(out)], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    want = f"apply with: git am -3 {out / 'series.mbox'}"
    assert len(want) > 160
    assert want in p.stdout.splitlines()


def test_long_cell_is_elided_and_json_keeps_it() -> None:
    words = " ".join(f"word{i}" for i in range(400))
    rep = DoctorReport([CheckResult("host.shm", "host", 0, "warn", words, fix="do " + words)])
    buf = io.StringIO()
    render_table(rep, Console(file=buf, width=120, soft_wrap=True, highlight=False))
    shown = buf.getvalue()
    assert "…" in shown and "word399" in shown and "word200" not in shown
    assert rep.to_dict()["checks"][0]["summary"] == words
    assert json.loads(json.dumps(rep.to_dict()))["checks"][0]["fix"] == "do " + words


def test_cell_limits_length_and_keeps_markup_literal() -> None:
    assert cell("short [red]x[/red]") == "short \\[red]x\\[/red]"
    assert len(cell("x " * 1000)) <= CELL_MAX + 2
    assert cell(None) == ""
