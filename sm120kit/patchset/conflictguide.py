"""After a port conflict: what the user must do, judged on the fork's own code.

Three things, all computed without writing to the repository:

* per conflicting contract of the SM120 impl (:func:`sm120kit.models.portguide.guide`): done in
  the fork already (with the line), or what to change and where;
* which of the other patches ``git am`` takes on the base as they are, in series order, each on
  top of the ones before it (what ``apply --only N,M`` does), on a scratch copy of the files;
* the release nearest to the fork's files when the port was told to start from another one.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from sm120kit.gitrun import read_blobs, run_git
from sm120kit.models.portguide import Step, guide
from sm120kit.models.series import Variant

if TYPE_CHECKING:
    from sm120kit.patchset.port import PortResult

SM120_SUFFIX = "backends/mla/flashinfer_mla_sparse_sm120.py"


def conflict_steps(result: PortResult, variant: Variant) -> list[Step]:
    """The guide for the conflicting patches; a hand-merge step for each one it has no contract
    for (the report shows that definition three ways)."""
    sm = next((f for f in variant.touched_files() if f.endswith(SM120_SUFFIX)), None)
    bad = {c.patch[:4]: c for c in result.conflicts}
    fork = read_blobs(result.repo, [f"{result.base}:{sm}"]).get(f"{result.base}:{sm}") \
        if sm else None
    text = fork.decode("utf-8", "replace") if fork is not None else None
    steps = guide(text, {p for p, c in bad.items() if c.file == sm})
    known = {s.patch for s in steps}
    for p, c in sorted(bad.items()):
        if p not in known:
            where = c.definition or c.file
            steps.append(Step(p, c.subject, "to-do", c.line,
                              f"{c.file}: merge {where} by hand (both sides changed it; the "
                              "report shows the fork's side, the release and the patched side)"))
    return steps


def clean_in_order(repo: Path, commit: str, variant: Variant, skip: set[str]) -> list[int]:
    """The 1-based numbers of the patches (not in ``skip``, by number prefix) that apply to the
    commit's files in series order, each on top of those kept before it."""
    files = variant.touched_files()
    blobs = read_blobs(repo, [f"{commit}:{p}" for p in files])
    kept: list[int] = []
    with tempfile.TemporaryDirectory(prefix="sm120kit-only-") as td:
        root = Path(td)
        for f in files:
            b = blobs.get(f"{commit}:{f}")
            if b is not None:
                (root / f).parent.mkdir(parents=True, exist_ok=True)
                (root / f).write_bytes(b)
        for i, p in enumerate(variant.patches, 1):
            if p.file[:4] in skip:
                continue
            if run_git(["apply", str(variant.patch_path(p))], root, check=False,
                       ceiling=True).returncode == 0:
                kept.append(i)
    return kept


def explain(result: PortResult, variant: Variant, nearest: str | None, only_alias: str) -> None:
    """Fill ``result.guide``, ``result.clean_patches`` (for ``apply --branch only_alias
    --only``) and the nearest-release hint."""
    result.guide = conflict_steps(result, variant)
    skip = {c.patch[:4] for c in result.conflicts}
    result.clean_patches = clean_in_order(result.repo, result.base, variant, skip)
    result.nearest = nearest
    result.only_alias = only_alias


def guide_lines(result: PortResult) -> list[str]:
    """The guide as text lines (terminal and report.md)."""
    out: list[str] = []
    if result.nearest:
        out.append(f"the fork's files are nearest to {result.nearest}: try --from "
                   f"{result.nearest} first")
    for s in result.guide:
        mark = "done in the fork" if s.state == "done-in-fork" else "to do"
        out.append(f"patch {s.patch} ({s.contract}): {mark}: {s.what}")
    if result.clean_patches:
        only = ",".join(map(str, result.clean_patches))
        src = result.only_alias or result.alias
        out.append(f"the other patches apply as they are: sm120kit apply --branch {src} "
                   f"--repo {result.repo} --base {result.base[:12]} --only {only}; then make the "
                   f"changes marked 'to do' on that branch, commit, and run sm120kit verify "
                   f"--repo {result.repo} --branch {src} --base {result.base[:12]}")
    return out
