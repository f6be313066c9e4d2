"""How every command prints its result: ``emit`` (human table or ``--json``) and the JSON error
object that ``--json`` promises for failures too.

A result object has ``to_dict()``, ``render(console)`` and ``exit_code``; the command returns
``emit(name, result, as_json)``. Errors are raised, never printed by a command:
:func:`report_failure` prints them once, for every command.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from sm120kit.errors import ExitCode, UserError
from sm120kit.report import console, dump_json

F = TypeVar("F", bound=Callable[..., Any])


class Result(Protocol):
    @property
    def exit_code(self) -> int: ...

    def to_dict(self) -> dict[str, Any]: ...

    def render(self, console: Any) -> None: ...


def wide_console() -> Any:
    """The result console (:func:`sm120kit.report.console`): rich tables on a terminal, plain
    records of ``$COLUMNS`` (default 100) columns anywhere else."""
    return console()


def emit(command: str, result: Result, as_json: bool) -> int:
    """Print ``result`` as JSON or as its human rendering; return its exit code."""
    if as_json:
        dump_json(command, result.to_dict())
    else:
        result.render(wide_console())
    return int(result.exit_code)


def report_failure(command: str, exc: BaseException, *, as_json: bool, debug: bool) -> int:
    """The one error handler: ``error:``/``hint:`` lines on stderr and, with ``--json``, exactly
    one JSON object ``{status, error, hint, exit_code, ...}`` on stdout. Returns the exit code."""
    import click

    payload = failure_payload(exc, command)
    if debug:
        import traceback

        traceback.print_exception(type(exc), exc, exc.__traceback__)
    if isinstance(exc, click.UsageError) and not as_json:
        exc.show()  # click's usage lines: the command's synopsis and how to get help
    else:
        click.echo(f"error: {payload['error']}", err=True)
        if payload.get("hint"):
            click.echo(f"hint: {payload['hint']}", err=True)
    if as_json:
        dump_json(command or "sm120kit", payload)
    return int(payload["exit_code"])


def failure_payload(exc: BaseException, command: str = "") -> dict[str, Any]:
    """``exc`` as the documented error object (docs/json.md#errors)."""
    import click

    if isinstance(exc, UserError):
        payload: dict[str, Any] = {"status": "error", "error": exc.message, "hint": exc.hint}
        payload.update(getattr(exc, "details", None) or {})
        if payload.get("status") != "failed":
            payload["status"] = "error"
        payload["exit_code"] = exc.exit_code
        return payload
    if isinstance(exc, (KeyboardInterrupt, click.exceptions.Abort)):
        return {"status": "error", "error": "interrupted", "hint": None,
                "exit_code": int(ExitCode.INTERRUPTED)}
    if isinstance(exc, click.UsageError):
        path = f"sm120kit {command}" if command else "sm120kit"
        message = exc.format_message()
        if message.startswith("Usage:"):  # a group called with no subcommand prints its help
            message = f"`{path}` needs a subcommand"
        return {"status": "error", "error": message,
                "hint": f"`{path} --help` lists the options and arguments",
                "exit_code": int(ExitCode.FAILURE)}
    if isinstance(exc, click.ClickException):
        return {"status": "error", "error": exc.format_message(), "hint": None,
                "exit_code": int(ExitCode.FAILURE)}
    return {"status": "error", "error": f"internal error: {type(exc).__name__}: {exc}",
            "hint": "a bug in sm120kit: rerun with --debug and report the traceback",
            "exit_code": int(ExitCode.FAILURE)}


def progress() -> Callable[[str], None]:
    """A progress callback that prints dim lines on stderr (stdout stays the result)."""
    err = console(stderr=True)

    def show(msg: str) -> None:
        err.print(f"[dim]…[/dim] {msg}")

    return show
