"""``sm120kit status``: per patch applied / not-applied / upstream / conflict on the current tree.

*applied* and *upstream* come from the manifest's markers in the working tree files. For the rest,
``git apply --check`` decides: a patch is *not-applied* when it (stacked on the earlier not-applied
patches that apply) would apply to the working tree now, else *conflict* with the file and hunk.
Only reads: nothing in the checkout changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sm120kit.errors import ExitCode
from sm120kit.patchset.gitcmd import rev_parse, run_git
from sm120kit.patchset.manifest import Series
from sm120kit.patchset.markers import marker_files, read_worktree, variant_marker_states
from sm120kit.patchset.targets import select

_FAILED_RE = re.compile(r"^error: patch failed: (.+):(\d+)$", re.M)
_ERROR_RE = re.compile(r"^error: (.+)$", re.M)


@dataclass
class PatchStatus:
    file: str
    subject: str
    state: str  # applied | not-applied | upstream | conflict
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

    @property
    def summary(self) -> str:
        states = [p.state for p in self.patches]
        if states and all(s in ("applied", "upstream") for s in states):
            return "applied" if "applied" in states else "upstream"
        if "conflict" in states:
            return "conflict"
        if "applied" in states:
            return "partial"
        return "not-applied"

    @property
    def exit_code(self) -> int:
        s = self.summary
        if s in ("applied", "upstream"):
            return ExitCode.OK
        if s == "conflict":
            return ExitCode.FAILURE
        return ExitCode.FINDINGS

    def to_dict(self) -> dict[str, Any]:
        from sm120kit.report import to_jsonable

        d: dict[str, Any] = to_jsonable(self)
        d["summary"] = self.summary
        d["exit_code"] = int(self.exit_code)
        return d

    def render(self, console: Any) -> None:
        from rich.table import Table

        from sm120kit.report import styled

        where = f"{self.repo}" + (f" ({self.branch})" if self.branch else "")
        table = Table(title=f"{self.alias} · variant {self.variant} · {where}")
        table.add_column("#", justify="right")
        table.add_column("patch")
        table.add_column("state")
        table.add_column("detail")
        for i, p in enumerate(self.patches, 1):
            table.add_row(str(i), f"{p.file}\n[dim]{p.subject}[/dim]", styled(p.state), p.detail)
        console.print(table)
        console.print(f"series: {styled(self.summary)}")


def _check_detail(text: str, patch_path: Path) -> str:
    m = _FAILED_RE.search(text)
    if m:
        from sm120kit.patchset.patchfile import parse_patch

        fc = parse_patch(patch_path).change_for(m.group(1))
        h = fc.hunk_at(int(m.group(2))) if fc else None
        return f"{m.group(1)}: {h.describe()}" if h else f"{m.group(1)}:{m.group(2)}"
    errs = [e for e in _ERROR_RE.findall(text) if "patch does not apply" not in e]
    return errs[0] if errs else text.strip().splitlines()[-1:][0] if text.strip() else "does not apply"


def repo_status(series: Series, alias: str, repo: Path) -> StatusResult:
    target, variant = select(series, alias)
    variant.check_checksums()
    repo = Path(repo)
    contents = read_worktree(repo, marker_files(variant))
    states = variant_marker_states(variant, contents)
    results: list[PatchStatus] = []
    stack: list[str] = []  # not-applied patches that apply, in order
    for st in states:
        p = st.patch
        missing = [f"{m.file}: {m.text}" for m in st.missing]
        if st.applied or st.upstream:
            results.append(PatchStatus(p.file, p.subject, st.state))
            continue
        path = variant.patch_path(p)
        proc = run_git(["apply", "--check", *stack, str(path)], repo, check=False)
        if proc.returncode == 0:
            stack.append(str(path))
            results.append(PatchStatus(p.file, p.subject, "not-applied", "applies cleanly", missing))
        else:
            results.append(
                PatchStatus(p.file, p.subject, "conflict", _check_detail(proc.stderr, path), missing)
            )
    branch = run_git(["symbolic-ref", "--quiet", "--short", "HEAD"], repo, check=False).stdout.strip()
    return StatusResult(alias, variant.name, str(repo), rev_parse(repo, "HEAD"), branch or None, results)
