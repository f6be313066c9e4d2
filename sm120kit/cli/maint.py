"""``revert``, ``rebase`` and ``refresh`` (thin: parse, call the core, render)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from sm120kit.cli import options
from sm120kit.cli.output import emit, progress
from sm120kit.errors import ExitCode, UserError
from sm120kit.gitrun import rev_parse, run_git
from sm120kit.models.series import load_series
from sm120kit.patchset.installed import revert_installed
from sm120kit.patchset.markers import marker_files, read_revisions, variant_marker_states
from sm120kit.patchset.rebase import rebase_variant, refresh_variant
from sm120kit.patchset.targets import require_repo, resolve_repo


@dataclass
class BranchRevertResult:
    """``revert`` on a checkout: the result branch sm120kit created is deleted."""

    repo: Path
    branch: str
    commit: str

    exit_code: int = ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        return {"mode": "git", "status": "reverted", "repo": str(self.repo),
                "branch": self.branch, "commit": self.commit}

    def render(self, console: Any) -> None:
        console.print(f"reverted: deleted branch {self.branch} (was {self.commit[:12]}); "
                      f"restore it with `git branch {self.branch} {self.commit}`")


def _revert_branch(repo: Path | None, alias: str | None, into: str | None) -> BranchRevertResult:
    root = require_repo(repo, "revert")
    if not (alias or into):
        raise UserError("revert on a checkout needs --branch ALIAS or --into BRANCH",
                        hint="or pass --installed for an installed vLLM")
    branch = into or f"sm120kit/dcp-{alias}"
    sha = rev_parse(root, f"refs/heads/{branch}")
    if sha is None:
        raise UserError(f"no branch {branch} in {root}: nothing to revert",
                        hint=_made_branches_hint(root))
    head = run_git(["symbolic-ref", "-q", "--short", "HEAD"], root, check=False).stdout.strip()
    if head == branch:
        raise UserError(f"{branch} is checked out in {root}",
                        hint="check out another branch first (e.g. git checkout -)")
    if alias:
        series = load_series()
        variant = series.variant(series.target(alias).variant)
        contents = read_revisions(root, [sha], marker_files(variant))[sha]
        if not any(s.applied for s in variant_marker_states(variant, contents)):
            raise UserError(f"{branch} does not carry the {variant.name} series; not deleting it")
    run_git(["update-ref", "-d", f"refs/heads/{branch}", sha], root)
    return BranchRevertResult(root, branch, sha)


def _made_branches_hint(root: Path) -> str:
    """Name the result branches sm120kit made in ``root`` (what ``revert`` can delete)."""
    out = run_git(["for-each-ref", "--format=%(refname:short)", "refs/heads/sm120kit/"], root,
                  check=False).stdout.split()
    if not out:
        return "no sm120kit/dcp-* branch here: nothing was applied in this checkout"
    aliases = [b.removeprefix("sm120kit/dcp-") for b in out]
    return ("result branches here: " + ", ".join(out) + f" (e.g. --branch {aliases[0]}"
            ", or --into BRANCH for another name)")


@click.command("revert")
@options.installed_options
@click.option("--force", is_flag=True, help="With --installed: restore even files edited after the apply.")
@options.repo_option
@options.branch_option("On a checkout: delete sm120kit/dcp-ALIAS.")
@click.option("--into", default=None, metavar="BRANCH", help="On a checkout: the result branch to delete.")
@options.json_option
def revert_cmd(installed: bool, python: str | None, state_dir: Path | None, force: bool,
               repo: Path | None, alias: str | None, into: str | None, as_json: bool) -> int:
    """Undo an apply: original bytes of an installed vLLM, or delete the result branch."""
    if installed:
        return emit("revert", revert_installed(python=python, state_dir=state_dir, force=force),
                     as_json)
    return emit("revert", _revert_branch(repo, alias, into), as_json)


@click.command("rebase")
@click.option("--onto", required=True, metavar="ALIAS_OR_REF", help="Release alias, fork alias, or a ref in --repo.")
@options.repo_option
@click.option("--from", "from_variant", default=None, metavar="VARIANT", help="Source variant or alias (default: nearest).")
@click.option("--name", default=None, metavar="NEW", help="Name of the new variant (default vX.Y.Z / the ref).")
@click.option("--write", is_flag=True, help="Write into the checkout's patches/ (default: a copy in --output).")
@click.option("--output", "-o", type=click.Path(path_type=Path), default=None, help="New directory for the patches copy (default: a temp dir).")
@click.option("--report-dir", type=click.Path(path_type=Path), default=None, help="Where a conflict report goes (default: a temp dir).")
@options.json_option
def rebase_cmd(onto: str, repo: Path | None, from_variant: str | None, name: str | None,
               write: bool, output: Path | None, report_dir: Path | None, as_json: bool) -> int:
    """3-way port a variant onto a new release or branch and write it as a new variant."""
    if write and output:
        raise UserError("--write and --output exclude each other")
    root = resolve_repo(repo) if repo is not None else None
    res = rebase_variant(onto, repo=root, from_variant=from_variant, name=name, write=write,
                         output=output, report_dir=report_dir, progress=progress())
    return emit("rebase", res, as_json)


@click.command("refresh")
@click.argument("variant")
@click.option("--from", "from_branch", required=True, metavar="BRANCH", help="Branch carrying the patches as commits.")
@options.repo_option
@click.option("--base", default=None, metavar="REF", help="Commit below the patches (default v<base_release>).")
@click.option("--write", is_flag=True, help="Write into the checkout's patches/ (default: a copy in --output).")
@click.option("--output", "-o", type=click.Path(path_type=Path), default=None, help="New directory for the patches copy (default: a temp dir).")
@options.json_option
def refresh_cmd(variant: str, from_branch: str, repo: Path | None, base: str | None,
                write: bool, output: Path | None, as_json: bool) -> int:
    """Regenerate VARIANT's patch files (full-index) and manifest entry from BRANCH's commits."""
    if write and output:
        raise UserError("--write and --output exclude each other")
    root = require_repo(repo, "refresh")
    res = refresh_variant(variant, from_branch, repo=root, base=base, write=write, output=output)
    return emit("refresh", res, as_json)
