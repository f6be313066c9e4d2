"""Evaluate the manifest's applied / upstream markers against a tree or a git revision."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sm120kit.gitrun import read_blobs
from sm120kit.models.series import Marker, Patch, Variant

# file contents by path (None: the file does not exist)
Contents = dict[str, str | None]


def marker_files(variant: Variant) -> list[str]:
    seen: dict[str, None] = {}
    for p in variant.patches:
        for m in (*p.applied_markers, *p.upstream_markers):
            seen.setdefault(m.file, None)
    return list(seen)


def read_worktree(root: Path, files: Iterable[str]) -> Contents:
    out: Contents = {}
    for f in files:
        try:
            out[f] = (Path(root) / f).read_text(encoding="utf-8", errors="replace")
        except OSError:
            out[f] = None
    return out


def read_revisions(repo: Path, revs: Iterable[str], files: Iterable[str]) -> dict[str, Contents]:
    """``{rev: {file: text}}`` for every rev, in one ``git cat-file --batch`` call."""
    revs = list(revs)
    files = list(files)
    blobs = read_blobs(repo, [f"{r}:{f}" for r in revs for f in files])
    result: dict[str, Contents] = {}
    for r in revs:
        c: Contents = {}
        for f in files:
            b = blobs.get(f"{r}:{f}")
            c[f] = b.decode("utf-8", "replace") if b is not None else None
        result[r] = c
    return result


def _present(m: Marker, contents: Contents) -> bool:
    return m.holds(contents.get(m.file))


@dataclass(frozen=True)
class MarkerState:
    patch: Patch
    applied: bool
    upstream: bool
    missing: tuple[Marker, ...]  # applied markers not found

    @property
    def state(self) -> Literal["applied", "upstream", "not-applied"]:
        if self.applied:
            return "applied"
        if self.upstream:
            return "upstream"
        return "not-applied"


def patch_marker_state(patch: Patch, contents: Contents) -> MarkerState:
    missing = tuple(m for m in patch.applied_markers if not _present(m, contents))
    applied = bool(patch.applied_markers) and not missing
    upstream = (
        not applied
        and bool(patch.upstream_markers)
        and all(_present(m, contents) for m in patch.upstream_markers)
    )
    return MarkerState(patch, applied, upstream, missing)


def variant_marker_states(variant: Variant, contents: Contents) -> list[MarkerState]:
    return [patch_marker_state(p, contents) for p in variant.patches]


def all_in(states: list[MarkerState]) -> bool:
    """Every patch is applied or already upstream."""
    return bool(states) and all(s.applied or s.upstream for s in states)
