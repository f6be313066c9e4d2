"""``--json`` promises exactly one JSON object on stdout for every outcome (docs/json.md): this
loops over every command with at least one bad input each, through the real CLI in a subprocess,
and checks the error object (``status``, ``error``, ``hint``, ``exit_code``) and the exit code
documented in docs/exit-codes.md. Usage errors (unknown option, missing argument, bad value) are
included, and ``--json`` is also given before the subcommand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sm120kit.cli.group import COMMANDS
from tests.support.paths import ROOT

MISSING = "/nonexistent/sm120kit-test"

# (argv, the words the error must contain): every command, each with at least one bad input
CASES: list[tuple[list[str], str]] = [
    (["apply", "--json", "--branch", "vllm-9.99.0"], "vllm-9.99.0"),
    (["apply", "--json", "--branch"], "requires an argument"),
    (["status", "--json", "--repo", MISSING], ""),
    (["verify", "--json", "--repo", MISSING], ""),
    (["export", "--json", "--branch", "vllm-9.99.0", "-o", "out"], "vllm-9.99.0"),
    (["targets", "--json", "--bogus"], "--bogus"),
    (["series", "--json", "--branch", "vllm-9.99.0"], "vllm-9.99.0"),
    (["revert", "--json"], ""),
    (["rebase", "--json"], "Missing"),
    (["refresh", "--json"], "Missing"),
    (["doctor", "--dcp", "0", "--json"], "--dcp"),
    (["doctor", "--only", "bogus", "--json"], "bogus"),
    (["doctor", "--tier", "7", "--json"], "--tier"),
    (["--json", "doctor", "--bogus"], "--bogus"),
    (["warmup", "plan", "--json"], "DCP"),
    (["warmup", "plan", "--json", "--interleave", "0"], ""),
    (["warmup", "run", "--json", "--bogus"], "--bogus"),
    (["collect", "--json", "--attach", "999999"], "999999"),
    (["diagnose", "--json", MISSING], MISSING),
    (["diagnose", "--json"], "nothing to diagnose"),
    (["report", "--json", MISSING], MISSING),
    (["report", "--json"], "Missing"),
    (["validate", "--url", "http://127.0.0.1:9", "--json"], "127.0.0.1:9"),
    (["validate", "--json", "--bogus"], ""),
    (["--json", "warmup"], "needs a subcommand"),
    (["--json"], "needs a subcommand"),
]


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SM120KIT_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "sm120kit", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def one_object(stdout: str) -> dict:
    """stdout is exactly one JSON object (nothing before, nothing after)."""
    obj, end = json.JSONDecoder().raw_decode(stdout.strip())
    assert stdout.strip()[end:] == "", stdout
    assert isinstance(obj, dict)
    return obj


def test_every_command_has_a_bad_input_case() -> None:
    named = {a[0] if a[0] != "--json" else a[1] for a, _ in CASES if a != ["--json"]}
    assert named == set(COMMANDS)
    assert {" ".join(a[:2]) for a, _ in CASES if a[0] == "warmup"} >= {"warmup plan",
                                                                      "warmup run"}


@pytest.mark.parametrize("argv,words", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_json_error_object(argv: list[str], words: str, tmp_path: Path) -> None:
    p = _run(argv, tmp_path)
    obj = one_object(p.stdout)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert obj["exit_code"] == p.returncode
    assert obj["status"] in ("error", "failed")
    assert obj["tool"] == "sm120kit"
    assert words in obj["error"], obj
    assert isinstance(obj["hint"], str) and obj["hint"].strip(), obj
    assert "Traceback" not in p.stderr
    # stderr carries the same error as one line, not click's usage block
    assert p.stderr.splitlines()[0] == f"error: {obj['error']}", p.stderr


def test_without_json_stdout_stays_empty_on_error(tmp_path: Path) -> None:
    p = _run(["doctor", "--only", "bogus"], tmp_path)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("error: ")


def test_json_after_double_dash_belongs_to_the_launch_line(tmp_path: Path) -> None:
    """``--json`` after ``--`` is a serve flag, not ours: the human rendering is printed."""
    p = _run(["warmup", "plan", "--dcp", "2", "--", "vllm", "serve", "m", "--json"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert not p.stdout.lstrip().startswith("{")
    q = _run(["--json", "warmup", "plan", "--dcp", "2"], tmp_path)
    assert q.returncode == 0 and one_object(q.stdout)["command"] == "warmup plan"


def test_usage_error_hint_names_the_subcommand(tmp_path: Path) -> None:
    obj = one_object(_run(["apply", "--json", "--branch"], tmp_path).stdout)
    assert obj["hint"] == "`sm120kit apply --help` lists the options and arguments"


def test_debug_after_the_subcommand_shows_the_traceback(tmp_path: Path) -> None:
    """Issue 23 item 7: ``--debug`` used to work only before the subcommand."""
    for argv in (["--debug", "doctor", "--only", "bogus"], ["doctor", "--only", "bogus", "--debug"]):
        p = _run(argv, tmp_path)
        assert p.returncode == 2
        assert "Traceback" in p.stderr and "UserError" in p.stderr, argv
        assert "error: unknown check 'bogus'" in p.stderr.splitlines()
    p = _run(["doctor", "--only", "bogus"], tmp_path)
    assert "Traceback" not in p.stderr


def test_success_objects_carry_the_exit_code(tmp_path: Path) -> None:
    """docs/json.md: every object has ``exit_code``, successes and findings too."""
    log = next(iter(sorted((ROOT / "tests" / "data" / "vllm-logs").iterdir())))
    for argv in (["diagnose", "--json", str(log)], ["warmup", "plan", "--json", "--dcp", "2"],
                 ["doctor", "--tier", "0", "--json", "--only", "host"], ["targets", "--json"]):
        p = _run(argv, tmp_path)
        assert one_object(p.stdout)["exit_code"] == p.returncode, argv
