"""Patch-series commands: apply, status, verify, export, targets, series (thin: parse, call, render)."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from sm120kit.errors import UserError

F = TypeVar("F", bound=Callable[..., Any])

json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
repo_option = click.option(
    "--repo",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="vLLM git checkout (default: the checkout containing the current directory).",
)


def _console() -> Any:
    """Rich console; piped output gets 160 columns (rich's 80-column fallback cuts paths)."""
    from sm120kit.report import console

    c = console()
    if not c.is_terminal:
        c.width = max(c.width, 160)
    return c


def _emit(command: str, result: Any, as_json: bool) -> int:
    from sm120kit.report import dump_json

    if as_json:
        dump_json(command, result.to_dict())
    else:
        result.render(_console())
    return int(result.exit_code)


def _json_errors(command: str) -> Callable[[F], F]:
    """With ``--json``, a UserError also prints a JSON error object on stdout (then propagates)."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except UserError as exc:
                if kwargs.get("as_json"):
                    from sm120kit.report import dump_json

                    payload: dict[str, Any] = {"status": "error", "error": exc.message, "hint": exc.hint}
                    payload.update(getattr(exc, "details", {}) or {})
                    payload["status"] = "error" if payload.get("status") != "failed" else "failed"
                    payload["exit_code"] = exc.exit_code
                    dump_json(command, payload)
                raise

        return cast(F, wrapper)

    return deco


def _series() -> Any:
    from sm120kit.facts.series import load_series

    return load_series()


def _optional(module: str, attr: str, flag: str) -> Callable[..., Any]:
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module:
            raise UserError(f"{flag} is not available in this build") from None
        raise
    fn = getattr(mod, attr, None)
    if fn is None:
        raise UserError(f"{flag} is not available in this build")
    return cast(Callable[..., Any], fn)


def _progress() -> Callable[[str], None]:
    from sm120kit.report import console

    err = console(stderr=True)

    def show(msg: str) -> None:
        err.print(f"[dim]…[/dim] {msg}")

    return show


@click.command("apply")
@click.option("--branch", "alias", metavar="ALIAS", help="Target alias, e.g. vllm-0.34.0 (see `sm120kit targets`).")
@repo_option
@click.option("--base", default=None, metavar="REF", help="Apply on REF instead of the alias' base ref.")
@click.option("--into", default=None, metavar="BRANCH", help="Result branch (default sm120kit/dcp-ALIAS).")
@click.option("--checkout", is_flag=True, help="Check the result branch out (working tree must be clean).")
@click.option("--dry-run", is_flag=True, help="Check that the series applies; create nothing (exit 1 if it would).")
@click.option(
    "--output", "-o", type=click.Path(path_type=Path), default=None,
    help="Embedded default only: where the patched tree goes (default ./vllm-X.Y.Z-sm120kit).",
)
@click.option("--installed", is_flag=True, help="Patch the vLLM installed in a Python environment.")
@click.option("--python", "python", default=None, metavar="PATH", help="With --installed: that interpreter.")
@click.option("--state-dir", type=click.Path(path_type=Path), default=None, help="With --installed: state directory.")
@click.option("--from", "from_alias", default=None, metavar="ALIAS", help="Take the variant from another alias (porting).")
@click.option("--port/--no-port", default=None, help="Allow 3-way porting when the variant does not apply.")
@json_option
@_json_errors("apply")
def apply_cmd(
    alias: str | None, repo: Path | None, base: str | None, into: str | None, checkout: bool,
    dry_run: bool, output: Path | None, installed: bool, python: str | None,
    state_dir: Path | None, from_alias: str | None, port: bool | None, as_json: bool,
) -> int:
    """Apply the DCP series atomically: on a branch of a git checkout, or to a fresh release tree."""
    if installed:
        fn = _optional("sm120kit.patchset.installed", "apply_installed", "--installed")
        res = fn(alias=alias, python=python, state_dir=state_dir, dry_run=dry_run)
        return _emit("apply", res, as_json)
    if not alias:
        raise UserError("--branch ALIAS is required", hint="`sm120kit targets` lists the aliases")
    from sm120kit.patchset.targets import is_fork, resolve_repo

    series = _series()
    root = resolve_repo(repo)
    target = series.targets.get(alias)
    if target is not None and is_fork(target):  # fetch/clone its branch, apply or 3-way port
        apply_fork = _optional("sm120kit.patchset.port", "apply_fork", f"the fork alias {alias}")
        res = apply_fork(series, alias, root, base=base, into=into, checkout=checkout,
                         dry_run=dry_run, from_alias=from_alias, port=port, progress=_progress())
        return _emit("apply", res, as_json)
    if root is None:
        if base or checkout or from_alias:
            raise UserError(
                "--base/--checkout/--from need a git checkout (none found here)",
                hint="pass --repo PATH",
            )
        from sm120kit.patchset.embedded import apply_embedded

        res = apply_embedded(
            series, alias, output=output, into=into, dry_run=dry_run,
            progress=_progress(),
        )
    else:
        if output is not None:
            raise UserError("--output is for the embedded default; on a checkout the result is a branch",
                            hint="use --into BRANCH")
        from sm120kit.patchset.apply import apply_to_checkout

        res = apply_to_checkout(
            series, alias, root, base=base, into=into, checkout=checkout, dry_run=dry_run,
            from_alias=from_alias, port=port,
        )
    return _emit("apply", res, as_json)


@click.command("status")
@repo_option
@click.option("--branch", "alias", default=None, metavar="ALIAS", help="Alias (default: inferred from the checkout).")
@click.option("--installed", is_flag=True, help="Status of the installed vLLM instead of a checkout.")
@click.option("--python", "python", default=None, metavar="PATH", help="With --installed: that interpreter.")
@click.option("--state-dir", type=click.Path(path_type=Path), default=None, help="With --installed: state directory.")
@json_option
@_json_errors("status")
def status_cmd(
    repo: Path | None, alias: str | None, installed: bool, python: str | None,
    state_dir: Path | None, as_json: bool,
) -> int:
    """Per patch: applied, not-applied, upstream or conflict (exit 0 all in, 1 pending, 2 conflict)."""
    if installed:
        fn = _optional("sm120kit.patchset.installed", "status_installed", "--installed")
        return _emit("status", fn(python=python, state_dir=state_dir), as_json)
    from sm120kit.patchset.status import repo_status
    from sm120kit.patchset.targets import infer_alias, require_repo

    series = _series()
    root = require_repo(repo, "status", series, alias)
    alias = alias or infer_alias(root, series)
    return _emit("status", repo_status(series, alias, root), as_json)


@click.command("verify")
@repo_option
@click.option("--branch", "alias", default=None, metavar="ALIAS", help="Alias (default: inferred from the checkout).")
@click.option("--base", default=None, metavar="REF", help="Unpatched base to compare with (default: the alias' base ref).")
@json_option
@_json_errors("verify")
def verify_cmd(repo: Path | None, alias: str | None, base: str | None, as_json: bool) -> int:
    """Touched files compile, no new pyflakes undefined names/unused imports, markers present."""
    from sm120kit.patchset.targets import infer_alias, require_repo
    from sm120kit.patchset.verify import verify_tree

    series = _series()
    root = require_repo(repo, "verify", series, alias)
    alias = alias or infer_alias(root, series)
    return _emit("verify", verify_tree(series, alias, root, base), as_json)


@click.command("export")
@click.option("--branch", "alias", required=True, metavar="ALIAS", help="Target alias.")
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path), help="New or empty directory.")
@json_option
@_json_errors("export")
def export_cmd(alias: str, out: Path, as_json: bool) -> int:
    """Write the variant's patch files, series.mbox (for git am) and the series order file."""
    from sm120kit.patchset.export import export_variant

    return _emit("export", export_variant(_series(), alias, out), as_json)


@click.command("targets")
@json_option
@_json_errors("targets")
def targets_cmd(as_json: bool) -> int:
    """Supported aliases: release, base ref, variant, status and how it was verified."""
    from sm120kit.patchset.listing import list_targets

    return _emit("targets", list_targets(_series()), as_json)


@click.command("series")
@click.option("--branch", "alias", default=None, metavar="ALIAS", help="Only the variant of this alias.")
@json_option
@_json_errors("series")
def series_cmd(alias: str | None, as_json: bool) -> int:
    """The series' variants and patches, with subjects and the files each touches."""
    from sm120kit.patchset.listing import list_series

    return _emit("series", list_series(_series(), alias), as_json)
