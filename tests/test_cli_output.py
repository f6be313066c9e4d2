"""Output rules (issue 22 item 3, issue 32 item 3): a command or path meant to be copied is
printed on one line (never broken, even past the width); a long table cell is shortened with an
ellipsis while ``--json`` keeps the whole text; on a terminal tables are rich boxes, anywhere
else (a pipe, a file, a ticket) plain records of ``$COLUMNS`` (default 100) columns with no line
longer than that but a whole command."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
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
    want = f"git am -3 {out / 'series.mbox'}"
    assert len(want) > 160
    assert want in [ln.strip() for ln in p.stdout.splitlines()], p.stdout  # on a line of its own


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


BOX = set("┏┃━┡│└┌─╇┼┩")


def _cli(*args: str, columns: str | None = "100") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for var in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE"):  # those ask for a terminal's output
        env.pop(var, None)
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run([sys.executable, "-m", "sm120kit", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def _over(text: str, width: int) -> list[str]:
    """Lines over ``width`` that are not one whole command (what a copy must get on one line):
    a line that starts with a command word or is one unbreakable piece (a `backtick` span, an
    option with its value) may be longer."""
    from sm120kit.report import COMMAND_WORDS, _tokens

    return [ln for ln in text.splitlines() if len(ln) > width
            and not ln.strip().startswith(COMMAND_WORDS) and len(_tokens(ln.strip())) > 1]


def test_piped_doctor_and_targets_are_plain_records_within_columns() -> None:
    for args in (["doctor"], ["targets"]):
        for columns, width in ((None, 100), ("100", 100), ("72", 72)):
            p = _cli(*args, columns=columns)
            assert p.returncode in (0, 1, 2), p.stderr
            assert not BOX & set(p.stdout), p.stdout[:2000]
            assert not _over(p.stdout, width), (args, columns, _over(p.stdout, width))
    t = _cli("targets").stdout.splitlines()
    # one record a line: each supported alias opens a line of its own
    assert any(ln.startswith("vllm-0.34.0 ") for ln in t), t[:20]


def test_doctor_fix_commands_stay_whole_on_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The uvm_hmm and rlimits fixes (the ones the newcomer walk saw cut over three rows)."""
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    from sm120kit.report import console

    cmd = "echo 'options nvidia_uvm uvm_disable_hmm=1' > /etc/modprobe.d/nvidia-uvm.conf"
    opts = "--ulimit memlock=-1 --ulimit stack=67108864 --ulimit nofile=1048576"
    rep = DoctorReport([
        CheckResult("host.uvm_hmm", "host", 0, "warn", "nvidia_uvm HMM is enabled "
                    "(uvm_disable_hmm not set): reported NCCL P2P lockups",
                    fix=f"`{cmd}`, then reload nvidia_uvm or reboot"),
        CheckResult("host.rlimits", "host", 0, "warn", "memlock 8 MiB (want unlimited); nofile "
                    "hard 20000 (< 65536; vLLM raises the soft limit up to it)",
                    fix=f"docker: `{opts}`; bare metal: /etc/security/limits.conf")])
    for width in (60, 80, 100):
        buf = io.StringIO()
        con = console()  # not a terminal here (pytest captures stdout): the plain console
        con.file, con.width = buf, width
        assert not con.is_terminal
        render_table(rep, con)
        text = buf.getvalue()
        assert not BOX & set(text)
        assert sum(cmd in ln for ln in text.splitlines()) == 1, text
        assert sum(opts in ln for ln in text.splitlines()) == 1, text
        assert not [ln for ln in text.splitlines() if len(ln) > width
                    and cmd not in ln and opts not in ln], text


def test_wrap_never_splits_a_command() -> None:
    from sm120kit.report import wrap_line

    line = ("fix: install the driver, then run pip install nvidia-nccl-cu12==2.27.3, "
            "or set `VLLM_NCCL_SO_PATH=/usr/lib/x86_64-linux-gnu/libnccl.so.2` and "
            "--ulimit memlock=-1 for docker > /tmp/x")
    for width in range(20, 120, 7):
        got = wrap_line(line, width, "  ")
        joined = " ".join(x.strip() for x in got)
        assert joined == line
        for piece in ("pip install nvidia-nccl-cu12==2.27.3,",
                      "`VLLM_NCCL_SO_PATH=/usr/lib/x86_64-linux-gnu/libnccl.so.2`",
                      "--ulimit memlock=-1", "docker > /tmp/x"):
            assert any(piece in x for x in got), (width, got)


def test_terminal_gets_rich_tables() -> None:
    """Under a pseudo-terminal the same command draws a rich table."""
    import pty

    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120", "TERM": "xterm"}
    master, slave = pty.openpty()
    try:
        p = subprocess.Popen([sys.executable, "-m", "sm120kit", "targets"], stdout=slave,
                             stderr=subprocess.PIPE, env=env)
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        assert p.wait(timeout=120) == 0
    finally:
        os.close(master)
    assert BOX & set(b"".join(chunks).decode("utf-8", "replace"))


def test_log_lines_are_never_read_as_emoji_codes(tmp_path: Path) -> None:
    """NCCL prefixes its lines with ``host:pid:tid``; ``:1234:`` is also a rich emoji code, and a
    quoted log line must come out as it was written, piped or on a terminal."""
    log = tmp_path / "nccl.txt"
    line = 'node1:1234:1234 [0] transport/p2p.cc:275 NCCL WARN Cuda failure \'peer access is not supported\''
    log.write_text(line + "\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    for extra in ({}, {"FORCE_COLOR": "1"}):
        p = subprocess.run([sys.executable, "-m", "sm120kit", "diagnose", str(log)],
                           capture_output=True, text=True, env={**env, **extra}, timeout=120)
        assert "node1:1234:1234 [0]" in p.stdout, p.stdout
        assert "\N{INPUT SYMBOL FOR NUMBERS}" not in p.stdout
