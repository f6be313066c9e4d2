"""``sm120kit diagnose`` through the real CLI: exit codes, the JSON envelope, Markdown, human."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sm120kit import cli

from . import lines as L


def _log(tmp_path: Path, rows: list[str]) -> Path:
    p = tmp_path / "v.log"
    p.write_text("\n".join(rows) + "\n")
    return p


def _crash(tmp_path: Path) -> Path:
    return _log(tmp_path, L.startup(2, 1) + ["(Worker_TP1 pid=401) Traceback (most recent call last):",
                                             f"(Worker_TP1 pid=401) {L.OOM.format(r=1)}"])


def test_exit_codes(tmp_path: Path, capsys) -> None:
    healthy = _log(tmp_path, L.startup(2, 1))
    assert cli.run(["diagnose", str(healthy)]) == 0
    assert cli.run(["diagnose", str(_crash(tmp_path))]) == 1
    assert cli.run(["diagnose", str(tmp_path / "nope.log")]) == 2
    empty = tmp_path / "e.log"
    empty.write_bytes(b"")
    assert cli.run(["diagnose", str(empty)]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "hint:" in err and "Traceback" not in err


def test_json_envelope_and_keys(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "sm120kit", "diagnose", "--json", str(_crash(tmp_path))],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    d = json.loads(r.stdout)
    assert d["tool"] == "sm120kit" and d["command"] == "diagnose"
    assert {"versions", "config", "ranks", "phases", "findings"} <= set(d)
    assert d["findings"][0]["category"] in ("out-of-memory", "rank-crashed")
    assert any(x["rank"] == 1 and x["exception"] for x in d["ranks"])


def test_markdown_and_human(tmp_path: Path, capsys) -> None:
    p = _crash(tmp_path)
    assert cli.run(["diagnose", "--markdown", str(p)]) == 1
    md = capsys.readouterr().out
    head = md.splitlines()
    # one verdict line (cause, where, confidence), its evidence quoted, then the fix
    assert head[0].startswith("**sm120kit diagnose:**") and "confidence 0." in head[0]
    assert head[2] == "```" and head[3].startswith("v.log:") and "Fix: " in md.split("- engine:")[0]
    assert "| rank | process |" in md and "- engine: vllm" in md
    assert cli.run(["diagnose", str(p)]) == 1
    out = capsys.readouterr().out.splitlines()
    # piped, the verdict wraps at word boundaries within COLUMNS; its evidence follows it
    ev = next(i for i, x in enumerate(out) if x.lstrip().startswith("v.log:"))
    verdict = " ".join(x.strip() for x in out[:ev])
    assert 1 <= ev <= 3 and all(len(x) <= 100 for x in out[:ev])
    assert verdict.startswith(("out-of-memory", "rank-crashed")) and "confidence 0." in verdict
    assert any(x.lstrip().startswith("fix:") for x in out[1:8])
    assert "looks like" not in "\n".join(out)


def test_stdin(tmp_path: Path) -> None:
    data = _crash(tmp_path).read_bytes()
    r = subprocess.run([sys.executable, "-m", "sm120kit", "diagnose", "--json", "-"], input=data,
                       capture_output=True, timeout=60)
    assert r.returncode == 1
    assert json.loads(r.stdout)["sources"][0]["source"] == "<stdin>"
