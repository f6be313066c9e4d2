"""How every command prints its result: ``emit`` (human table or ``--json``) and the JSON error
object that ``--json`` promises for failures too.

A result object has ``to_dict()``, ``render(console)`` and ``exit_code``; the command returns
``emit(name, result, as_json)``. Errors are printed once, by :func:`sm120kit.cli.run`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

from sm120kit.errors import UserError
from sm120kit.report import console, dump_json

F = TypeVar("F", bound=Callable[..., Any])


class Result(Protocol):
    @property
    def exit_code(self) -> int: ...

    def to_dict(self) -> dict[str, Any]: ...

    def render(self, console: Any) -> None: ...


def wide_console() -> Any:
    """Rich console; piped output gets 160 columns (rich's 80-column fallback cuts paths)."""
    c = console()
    if not c.is_terminal:
        c.width = max(c.width, 160)
    return c


def emit(command: str, result: Result, as_json: bool) -> int:
    """Print ``result`` as JSON or as its human rendering; return its exit code."""
    if as_json:
        dump_json(command, result.to_dict())
    else:
        result.render(wide_console())
    return int(result.exit_code)


def json_errors(command: str) -> Callable[[F], F]:
    """With ``--json``, a UserError also prints a JSON error object on stdout (then propagates)."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except UserError as exc:
                if kwargs.get("as_json"):
                    payload: dict[str, Any] = {"status": "error", "error": exc.message, "hint": exc.hint}
                    payload.update(getattr(exc, "details", {}) or {})
                    payload["status"] = "error" if payload.get("status") != "failed" else "failed"
                    payload["exit_code"] = exc.exit_code
                    dump_json(command, payload)
                raise

        return cast(F, wrapper)

    return deco


def progress() -> Callable[[str], None]:
    """A progress callback that prints dim lines on stderr (stdout stays the result)."""
    err = console(stderr=True)

    def show(msg: str) -> None:
        err.print(f"[dim]…[/dim] {msg}")

    return show
