"""The embedded default target: a release's Python tree from PyPI, patched into ``./vllm-X.Y.Z-sm120kit``.

``apply_embedded`` builds (or reuses) the cached release repository (:func:`release_repo`), clones
it into a temporary directory next to the output, applies the series there with the same engine as
for a user checkout, checks the result branch out and renames the clone to the output path. A
failure removes the temporary clone; the output path is only ever created complete. The result
records itself in ``.git/sm120kit-result.json`` so that a re-run recognises it ("already applied").
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sm120kit.errors import UserError
from sm120kit.gitrun import rev_parse, run_git
from sm120kit.models.series import Series, Target, Variant
from sm120kit.patchset.apply import ApplyResult, PatchOutcome, apply_to_checkout
from sm120kit.patchset.markers import all_in, marker_files, read_worktree, variant_marker_states
from sm120kit.patchset.release import fetch_wheel, find_cached_wheel, release_repo
from sm120kit.patchset.targets import DEFAULT_BRANCH_PREFIX, select

RESULT_FILE = "sm120kit-result.json"


def default_output(release: str, cwd: Path | None = None) -> Path:
    return (cwd or Path.cwd()) / f"vllm-{release}-sm120kit"


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send fd 1 to fd 2 (pip's download progress must not pollute ``--json`` stdout)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def fetch_release_repo(version: str, progress: Callable[[str], None] | None) -> Path:
    """The cached release repo; downloads the wheel first (pip's progress on stderr)."""
    if find_cached_wheel("vllm", version) is None and progress is not None:
        with stdout_to_stderr():
            fetch_wheel("vllm", version, progress=progress, quiet=False)
    return release_repo(version, progress=progress)


def read_result_record(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((path / ".git" / RESULT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _earlier_result(out: Path, alias: str, target: Target, variant: Variant,
                    branch: str) -> ApplyResult:
    """``out`` exists: the same result again ("already applied"), else a UserError."""
    rec = read_result_record(out)
    if rec is None:
        raise UserError(
            f"{out} exists and is not an sm120kit result",
            hint="move it away or choose another path with --output PATH",
        )
    files = marker_files(variant)
    states = variant_marker_states(variant, read_worktree(out, files))
    if rec.get("alias") == alias and all_in(states):
        head = rev_parse(out, "HEAD") or ""
        return ApplyResult(
            status="already-applied", alias=alias, variant=variant.name, kind="embedded",
            repo=str(out), base=target.base_ref, base_commit=str(rec.get("base_commit", "")),
            branch=str(rec.get("branch", branch)), commit=head, output=str(out),
            message=f"already applied: {out} holds the patched vllm {target.release} tree",
            patches=[
                PatchOutcome(s.patch.file, s.patch.subject,
                             "already-applied" if s.applied else "upstream")
                for s in states
            ],
        )
    raise UserError(
        f"{out} holds an earlier sm120kit result ({rec.get('alias')}) that is not "
        f"{alias} with the current series (changed or different release)",
        hint="remove it, or choose another path with --output PATH",
    )


def apply_embedded(
    series: Series,
    alias: str,
    *,
    output: Path | None = None,
    into: str | None = None,
    dry_run: bool = False,
    progress: Callable[[str], None] | None = None,
) -> ApplyResult:
    target, variant = select(series, alias)
    if not target.release:
        raise UserError(
            f"{alias} is not a PyPI release (fork target); there is no embedded tree for it",
            hint=f"clone {target.repo or 'the fork'} and run `sm120kit apply --branch {alias} --repo PATH`",
        )
    out = Path(output).expanduser() if output else default_output(target.release)
    out = out.absolute()
    branch = into or f"{DEFAULT_BRANCH_PREFIX}{alias}"
    if out.exists() or out.is_symlink():
        return _earlier_result(out, alias, target, variant, branch)
    parent = out.parent
    if not parent.is_dir():
        raise UserError(f"output directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise UserError(f"cannot write into {parent}", hint="choose --output PATH somewhere writable")
    src = fetch_release_repo(target.release, progress)
    tmp = parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        if progress:
            progress(f"cloning the release repository into {out.name}")
        run_git(["clone", "-q", "--no-checkout", str(src), str(tmp)], parent)
        run_git(["checkout", "-q", "--detach", target.base_ref], tmp)
        res = apply_to_checkout(
            series, alias, tmp, into=branch, dry_run=dry_run, kind="embedded"
        )
        if not isinstance(res, ApplyResult):  # pragma: no cover - porting never runs here
            raise UserError("unexpected result from the porting engine")
        if dry_run:
            res.repo = str(out)
            res.output = str(out)
            res.message = (
                f"dry run: the series applies to vllm {target.release}; would create {out}"
            )
            return res
        if res.status != "applied":  # not needed: upstream has it; no output is created
            res.repo = str(src)
            return res
        run_git(["checkout", "-q", branch], tmp)
        record = {
            "alias": alias, "series": series.id, "variant": variant.name,
            "release": target.release, "base_ref": target.base_ref,
            "base_commit": res.base_commit, "branch": branch, "commit": res.commit,
            "patches": [p.sha256 for p in variant.patches],
        }
        (tmp / ".git" / RESULT_FILE).write_text(json.dumps(record, indent=2) + "\n")
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res.repo = str(out)
    res.output = str(out)
    res.checked_out = True
    res.message = f"applied {sum(p.state == 'applied' for p in res.patches)} patch(es): " \
        f"patched vllm {target.release} tree in {out} (branch {branch})"
    return res
