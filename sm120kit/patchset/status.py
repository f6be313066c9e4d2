"""``sm120kit status``: per patch applied / not-applied / upstream / conflict on the current tree.

*applied* and *upstream* come from the manifest's markers in the working tree files. For the rest,
``git apply --check`` decides: a patch is *not-applied* when it would apply to the working tree
now (after the earlier not-applied patches that apply, tried on a scratch copy of the touched
files), else *conflict* with the file and hunk. Only reads: nothing in the checkout changes.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from sm120kit.errors import ExitCode
from sm120kit.gitrun import rev_parse, run_git
from sm120kit.models.series import Series
from sm120kit.patchset.forkdcp import ForkDcp, detect, render_fork_dcp
from sm120kit.patchset.markers import (
    marker_files,
    read_revisions,
    read_worktree,
    variant_marker_states,
)
from sm120kit.patchset.patchfile import parse_patch
from sm120kit.patchset.render import new_table
from sm120kit.patchset.targets import select
from sm120kit.report import cell, styled, to_jsonable

_FAILED_RE = re.compile(r"^error: patch failed: (.+):(\d+)$", re.M)
_ERROR_RE = re.compile(r"^error: (.+)$", re.M)


PatchState = Literal["applied", "not-applied", "upstream", "conflict", "in-fork"]


@dataclass
class PatchStatus:
    file: str
    subject: str
    state: PatchState
    detail: str = ""
    missing_markers: list[str] = field(default_factory=list)


@dataclass
class StatusResult:
    alias: str
    variant: str
    repo: str
    head: str | None
    branch: str | None
    patches: list[PatchStatus]
    series_branch: str | None = None  # sm120kit's result branch for this alias, when not HEAD
    #: the tree already runs DCP in the SM120 backend its own way (its gaps against the series)
    fork_dcp: ForkDcp | None = None

    @property
    def summary(self) -> str:
        states = [p.state for p in self.patches]
        if states and all(s in ("applied", "upstream") for s in states):
            return "applied" if "applied" in states else "upstream"
        if self.fork_dcp is not None:
            return "supports-dcp"
        if "conflict" in states:
            return "conflict"
        if "applied" in states:
            return "partial"
        return "not-applied"

    @property
    def exit_code(self) -> int:
        s = self.summary
        if s in ("applied", "upstream", "supports-dcp"):
            return ExitCode.OK
        if s == "conflict":
            return ExitCode.FAILURE
        return ExitCode.FINDINGS

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = to_jsonable(self)
        d["summary"] = self.summary
        d["fork_dcp"] = self.fork_dcp.to_dict() if self.fork_dcp is not None else None
        d["exit_code"] = int(self.exit_code)
        return d

    def render(self, console: Any) -> None:
        where = f"{self.repo}" + (f" ({self.branch})" if self.branch else "")
        table = new_table(
            f"{self.alias} · variant {self.variant} · {where}", "#", "patch", "state", "detail"
        )
        for i, p in enumerate(self.patches, 1):
            table.add_row(str(i), f"{p.file}\n[dim]{p.subject}[/dim]", styled(p.state),
                          cell(p.detail))
        console.print(table)
        console.print(f"series: {styled(self.summary)}")
        if self.fork_dcp is not None:
            console.print("this tree already supports DCP in the SM120 sparse-MLA backend, "
                          "its own way:", markup=False)
            render_fork_dcp(console, self.fork_dcp, self.alias, self.repo)
        if self.series_branch and self.summary != "applied":
            console.print(f"the series is applied on branch {self.series_branch} (not checked "
                          f"out here): git checkout {self.series_branch}", soft_wrap=True)


def _check_detail(text: str, patch_path: Path) -> str:
    m = _FAILED_RE.search(text)
    if m:
        fc = parse_patch(patch_path).change_for(m.group(1))
        h = fc.hunk_at(int(m.group(2))) if fc else None
        return f"{m.group(1)}: {h.describe()}" if h else f"{m.group(1)}:{m.group(2)}"
    errs = [e for e in _ERROR_RE.findall(text) if "patch does not apply" not in e]
    return errs[0] if errs else text.strip().splitlines()[-1:][0] if text.strip() else "does not apply"


def repo_status(series: Series, alias: str, repo: Path) -> StatusResult:
    target, variant = select(series, alias)
    variant.check_checksums()
    repo = Path(repo)
    files = marker_files(variant)
    states = variant_marker_states(variant, read_worktree(repo, files))
    if any(s.upstream for s in states):
        # the patched code may itself contain upstream's markers: "upstream" only when the base has
        # them too (when the base ref is here; without it the working tree has to do)
        base_commit = rev_parse(repo, target.base_ref) if target.base_ref else None
        if base_commit:
            base_states = variant_marker_states(
                variant, read_revisions(repo, [base_commit], files)[base_commit]
            )
            states = [
                replace(s, upstream=False) if s.upstream and not b.upstream else s
                for s, b in zip(states, base_states, strict=True)
            ]
    results: list[PatchStatus] = []
    # The not-applied patches are tried in order on a scratch copy of the touched files (outside
    # any repository), so patch N is judged on the tree as patches 1..N-1 would leave it.
    with tempfile.TemporaryDirectory(prefix="sm120kit-status-") as td:
        scratch = Path(td) / "tree"
        copied = False
        for st in states:
            p = st.patch
            missing = [f"{m.file}: {m.describe()}" for m in st.missing]
            if st.applied or st.upstream:
                results.append(PatchStatus(p.file, p.subject, st.state))
                continue
            if not copied:
                _copy_files(repo, scratch, variant.touched_files())
                copied = True
            path = str(variant.patch_path(p))
            proc = run_git(["apply", "--check", path], scratch, check=False, ceiling=True)
            if proc.returncode == 0:
                run_git(["apply", path], scratch, check=False, ceiling=True)
                results.append(PatchStatus(p.file, p.subject, "not-applied", "applies cleanly", missing))
            else:
                results.append(PatchStatus(
                    p.file, p.subject, "conflict", _check_detail(proc.stderr, Path(path)), missing
                ))
    branch = run_git(["symbolic-ref", "--quiet", "--short", "HEAD"], repo, check=False).stdout.strip()
    made = f"sm120kit/dcp-{alias}"
    held = made if made != branch and rev_parse(repo, f"refs/heads/{made}") else None
    res = StatusResult(alias, variant.name, str(repo), rev_parse(repo, "HEAD"), branch or None,
                       results, held)
    if not all(r.state in ("applied", "upstream") for r in results):
        res.fork_dcp = detect(repo, None, variant)
    if res.fork_dcp is not None:  # what conflicts only because the fork did it its own way
        gaps = {g.patch for g in res.fork_dcp.gaps}
        for r in results:
            if r.state == "conflict" and r.file not in gaps:
                r.state, r.detail = "in-fork", "the tree does this its own way"
    return res


def _copy_files(repo: Path, dest: Path, files: list[str]) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for rel in files:
        src = repo / rel
        if src.is_file():
            out = dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, out)
