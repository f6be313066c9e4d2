"""Click entry point. Commands are loaded lazily (``cli/group.py``) so ``sm120kit --help`` and
each command start fast.

Each command lives in its own module under ``sm120kit/cli/`` and stays thin: parse options, call
the core, render. Commands never print their own errors: every failure (a capability's
``UserError``, a click usage error, an interrupt) reaches :func:`run`, which hands it to the one
handler, :func:`sm120kit.cli.output.report_failure`.

``--json`` and ``--debug`` are accepted anywhere before ``--`` (before or after the subcommand);
what follows ``--`` is a launch line and is never read.
"""

from __future__ import annotations

import os
import sys
from typing import Any, NamedTuple

import click

from sm120kit import __version__
from sm120kit.cli.group import COMMANDS, LazyGroup
from sm120kit.errors import ExitCode, UserError

__all__ = ["COMMANDS", "cli", "main", "run"]


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sm120kit")
@click.option("--debug", is_flag=True, envvar="SM120KIT_DEBUG",
              help="Show tracebacks for errors (accepted anywhere before `--`).")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """DCP for vLLM's FlashInfer sparse-MLA SM120 backend: patch, check, warm up, diagnose.

    Every command takes --json (machine-readable output: one JSON object on stdout for every
    outcome, errors included) and --debug (tracebacks), anywhere before `--`. On a terminal
    results are tables; piped, plain lines of $COLUMNS (default 100) columns with commands
    whole. Exit codes: 0 ok, 1 warnings or findings, 2 failure or unusable input, 130
    interrupted.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug or bool(ctx.obj.get("debug"))


class Invocation(NamedTuple):
    """argv with ``--json``/``--debug`` lifted out of the part before ``--``."""

    args: list[str]
    command: str  # "doctor", "warmup plan", "" when no command was named
    as_json: bool
    debug: bool


GROUPS = {"warmup": ("plan", "run")}  # command groups and their subcommands


def _command_path(head: list[str]) -> tuple[str, int]:
    """The command named in ``head`` and the index just after it, where ``--json`` goes
    (-1 when no command that takes ``--json`` is named)."""
    for i, tok in enumerate(head):
        if tok in GROUPS:
            sub = head[i + 1] if i + 1 < len(head) else ""
            return (f"{tok} {sub}", i + 2) if sub in GROUPS[tok] else (tok, -1)
        if tok in COMMANDS:
            return tok, i + 1
        if not tok.startswith("-"):
            return "", -1
    return "", -1


def parse_invocation(argv: list[str]) -> Invocation:
    """Find the command, lift ``--json``/``--debug`` from anywhere before ``--``."""
    cut = argv.index("--") if "--" in argv else len(argv)
    head, tail = argv[:cut], argv[cut:]
    as_json = "--json" in head
    debug = "--debug" in head or bool(os.environ.get("SM120KIT_DEBUG"))
    head = [t for t in head if t not in ("--json", "--debug")]
    command, at = _command_path(head)
    if as_json and at >= 0:
        head.insert(at, "--json")
    return Invocation(head + tail, command, as_json, debug)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI, mapping errors to exit codes in this one place."""
    sys.exit(run(argv))


def _help_width() -> int:
    """The width click's help text takes (``$COLUMNS``, else the terminal's, else 80; at most
    78, at least 50), worked out as click does but without importing ``shutil`` (and with it
    bz2 and lzma: a tenth of ``--help``'s time)."""
    try:
        cols = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        cols = 0
    if cols <= 0:
        try:
            cols = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            cols = 0
    return max(min(cols or 80, 80) - 2, 50)


def run(argv: list[str] | None = None) -> int:
    inv = parse_invocation(list(argv if argv is not None else sys.argv[1:]))
    try:
        rv: Any = cli.main(args=inv.args, prog_name="sm120kit", standalone_mode=False,
                           obj={"debug": inv.debug}, terminal_width=_help_width())
    except BaseException as exc:  # noqa: BLE001 - every outcome goes through the one handler
        return _failure(inv, exc)
    return int(rv) if isinstance(rv, int) else ExitCode.OK


def _failure(inv: Invocation, exc: BaseException) -> int:
    from sm120kit.cli.output import report_failure

    if isinstance(exc, click.exceptions.Exit):
        return int(exc.exit_code)
    if isinstance(exc, BrokenPipeError):
        return ExitCode.OK
    if isinstance(exc, (UserError, click.ClickException, click.exceptions.Abort,
                        KeyboardInterrupt)):
        return report_failure(inv.command, exc, as_json=inv.as_json, debug=inv.debug)
    if isinstance(exc, Exception):  # a bug: traceback on stderr, still one JSON object on stdout
        return report_failure(inv.command, exc, as_json=inv.as_json, debug=True)
    raise exc
