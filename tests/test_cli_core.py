"""The CLI root: version, help, the error → exit-code mapping."""

from __future__ import annotations

import subprocess
import sys

import click

from sm120kit import __version__, cli
from sm120kit.errors import ExitCode, UserError


def test_version_via_python_m() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sm120kit", "--version"], capture_output=True, text=True, check=True
    )
    assert __version__ in out.stdout


def test_user_error_maps_to_exit_code_and_one_line(capsys) -> None:
    @click.command("boom")
    def boom() -> None:
        raise UserError("the thing is broken\nsecond line never shown", hint="fix it")

    cli.cli.add_command(boom)
    try:
        rc = cli.run(["boom"])
    finally:
        cli.cli.commands.pop("boom", None)
    err = capsys.readouterr().err
    assert rc == ExitCode.FAILURE
    assert err.splitlines() == ["error: the thing is broken", "hint: fix it"]


def test_unknown_command_is_usage_error() -> None:
    assert cli.run(["no-such-command"]) == 2


def test_int_return_becomes_exit_code() -> None:
    @click.command("one")
    def one() -> int:
        return 1

    cli.cli.add_command(one)
    try:
        assert cli.run(["one"]) == 1
    finally:
        cli.cli.commands.pop("one", None)
