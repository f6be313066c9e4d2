"""Patch-series commands: apply, status, verify, export, targets, series (thin: parse, call, render)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from sm120kit.cli import options
from sm120kit.cli.output import emit, progress
from sm120kit.errors import UserError
from sm120kit.models.series import load_series
from sm120kit.patchset.targets import infer_alias, is_fork, require_repo, resolve_repo

# Each command imports the part of patchset it runs, inside its body: `apply` on a checkout
# does not pay for the installed-package, embedded, export or verify code (bench_cli.py).


@click.command("apply")
@options.branch_option("Target alias, e.g. vllm-0.34.0 (see `sm120kit targets`).  "
                       "[required, except with --installed]")
@options.repo_option
@click.option("--base", default=None, metavar="REF", help="Apply on REF instead of the alias' base ref.")
@click.option("--into", default=None, metavar="BRANCH", help="Result branch (default sm120kit/dcp-ALIAS).")
@click.option("--checkout", is_flag=True, help="Check the result branch out (working tree must be clean).")
@click.option("--dry-run", is_flag=True, help="Check that the series applies; create nothing (exit 1 if it would).")
@click.option(
    "--output", "-o", type=click.Path(path_type=Path), default=None,
    help="Outside a git checkout (the release tree built from the PyPI wheel): where the "
    "patched tree goes (default ./vllm-X.Y.Z-sm120kit).",
)
@options.installed_options
@click.option("--from", "from_alias", default=None, metavar="ALIAS", help="Take the variant from another alias (porting).")
@click.option("--port/--no-port", default=None, help="Allow 3-way porting when the variant does not apply.")
@click.option("--only", default=None, metavar="N,M", help="Apply only these patches (1-based), e.g. a fork's gaps.")
@click.option("--reapply", is_flag=True, help="The result branch is on an older base: apply again and replace it.")
@options.json_option
def apply_cmd(
    alias: str | None, repo: Path | None, base: str | None, into: str | None, checkout: bool,
    dry_run: bool, output: Path | None, installed: bool, python: str | None,
    state_dir: Path | None, from_alias: str | None, port: bool | None, only: str | None,
    reapply: bool, as_json: bool,
) -> int:
    """Apply the DCP series atomically: on a branch of a git checkout, or to a fresh release tree."""
    if installed:
        from sm120kit.patchset.installed import apply_installed

        return emit("apply", apply_installed(alias=alias, python=python, state_dir=state_dir,
                                             dry_run=dry_run), as_json)
    if not alias:
        raise UserError("--branch ALIAS is required", hint="`sm120kit targets` lists the aliases")
    from sm120kit.patchset.apply import apply_to_checkout

    picked = _parse_only(only)
    series = load_series()
    root = resolve_repo(repo)
    target = series.targets.get(alias)
    if target is not None and is_fork(target):  # fetch/clone its branch, apply or 3-way port
        from sm120kit.patchset.forkapply import apply_fork

        res = apply_fork(series, alias, root, base=base, into=into, checkout=checkout,
                         dry_run=dry_run, from_alias=from_alias, port=port, progress=progress(),
                         only=picked, reapply=reapply)
        return emit("apply", res, as_json)
    if root is None:
        if base or checkout or from_alias or picked or reapply:
            raise UserError(
                "--base/--checkout/--from/--only/--reapply need a git checkout (none found here)",
                hint="pass --repo PATH",
            )
        from sm120kit.patchset.embedded import apply_embedded

        res = apply_embedded(series, alias, output=output, into=into, dry_run=dry_run,
                             progress=progress())
    else:
        if output is not None:
            raise UserError("--output is for the release tree built from the PyPI wheel (no "
                            "checkout); on a checkout the result is a branch",
                            hint="use --into BRANCH")
        res = apply_to_checkout(
            series, alias, root, base=base, into=into, checkout=checkout, dry_run=dry_run,
            from_alias=from_alias, port=port, only=picked, reapply=reapply, porter=_port_series,
        )
    return emit("apply", res, as_json)


def _port_series(*args: Any, **kw: Any) -> Any:
    """The 3-way porting engine, imported only when an apply needs a port (most do not)."""
    from sm120kit.patchset.port import port_series

    return port_series(*args, **kw)


def _parse_only(only: str | None) -> list[int] | None:
    if only is None:
        return None
    try:
        picked = sorted({int(x) for x in only.split(",") if x.strip()})
    except ValueError:
        raise UserError(f"--only {only!r}: expected patch numbers such as 1,6",
                        hint="`sm120kit series --branch ALIAS` lists the patches") from None
    if not picked:
        raise UserError("--only needs at least one patch number", hint="e.g. --only 2,6")
    return picked


@click.command("status")
@options.repo_option
@options.branch_option("Alias (default: inferred from the checkout).")
@options.installed_options
@options.json_option
def status_cmd(
    repo: Path | None, alias: str | None, installed: bool, python: str | None,
    state_dir: Path | None, as_json: bool,
) -> int:
    """Per patch: applied, not-applied, upstream or conflict.

    Exit 0 when the series is in, 1 when a patch is pending (with --installed: not applied,
    modified, reinstalled or mixed), 2 on a conflict or an error.
    """
    if installed:
        from sm120kit.patchset.installed import status_installed

        return emit("status", status_installed(python=python, state_dir=state_dir), as_json)
    from sm120kit.patchset.status import repo_status

    series = load_series()
    root = require_repo(repo, "status", series, alias)
    alias = alias or infer_alias(root, series)
    return emit("status", repo_status(series, alias, root), as_json)


@click.command("verify")
@options.repo_option
@options.branch_option("Alias (default: inferred from the checkout).")
@click.option("--base", default=None, metavar="REF", help="Unpatched base to compare with (default: the alias' base ref).")
@options.json_option
def verify_cmd(repo: Path | None, alias: str | None, base: str | None, as_json: bool) -> int:
    """Touched files compile, no new pyflakes undefined names/unused imports, markers present."""
    from sm120kit.patchset.verify import verify_tree

    series = load_series()
    root = require_repo(repo, "verify", series, alias)
    alias = alias or infer_alias(root, series)
    return emit("verify", verify_tree(series, alias, root, base), as_json)


@click.command("export")
@options.branch_option("Target alias.", required=True)
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path), help="New or empty directory.")
@options.json_option
def export_cmd(alias: str, out: Path, as_json: bool) -> int:
    """Write the variant's patch files, series.mbox (for git am) and the series order file."""
    from sm120kit.patchset.export import export_variant

    return emit("export", export_variant(load_series(), alias, out), as_json)


@click.command("targets")
@options.json_option
def targets_cmd(as_json: bool) -> int:
    """Supported aliases: release, base ref, variant, status and how it was verified."""
    from sm120kit.patchset.listing import list_targets

    return emit("targets", list_targets(load_series()), as_json)


@click.command("series")
@options.branch_option("Only the variant of this alias.")
@options.json_option
def series_cmd(alias: str | None, as_json: bool) -> int:
    """The series' variants and patches, with subjects and the files each touches."""
    from sm120kit.patchset.listing import list_series

    return emit("series", list_series(load_series(), alias), as_json)
