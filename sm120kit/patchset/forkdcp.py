"""A fork that already runs DCP in the SM120 backend: what it lacks, and which parts apply.

:func:`sm120kit.models.dcpfeatures.analyze` judges the tree at a commit from what its code does;
here the files are read from git and every gap's patch is tried with ``git apply --check`` on a
scratch copy of the commit's files (nothing in the repository is written).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sm120kit.gitrun import read_blobs, run_git
from sm120kit.models.dcpfeatures import analyze
from sm120kit.models.series import Variant

SM120_SUFFIX = "backends/mla/flashinfer_mla_sparse_sm120.py"
SPARSE_SUFFIX = "backends/mla/flashinfer_mla_sparse.py"
WARMUP = "vllm/v1/worker/gpu/warmup.py"
BACKEND = "vllm/v1/attention/backend.py"


@dataclass
class GapState:
    name: str
    why: str
    fix: str
    patch: str  # the series patch file
    number: int  # its 1-based position in the series
    applies_cleanly: bool


@dataclass
class ForkDcp:
    """The tree already supports DCP in the SM120 backend (the evidence), less ``gaps``."""

    evidence: dict[str, str]
    features: dict[str, bool]
    gaps: list[GapState] = field(default_factory=list)

    def clean_patches(self) -> list[int]:
        return sorted({g.number for g in self.gaps if g.applies_cleanly})

    def to_dict(self) -> dict[str, Any]:
        return {"evidence": self.evidence, "features": self.features,
                "gaps": [g.__dict__ for g in self.gaps], "clean_patches": self.clean_patches()}


def _file(variant: Variant, suffix: str) -> str | None:
    return next((f for f in variant.touched_files() if f.endswith(suffix)), None)


def _read(repo: Path, commit: str | None, paths: list[str]) -> dict[str, bytes | None]:
    if commit is not None:
        blobs = read_blobs(repo, [f"{commit}:{p}" for p in paths])
        return {p: blobs.get(f"{commit}:{p}") for p in paths}
    out: dict[str, bytes | None] = {}
    for p in paths:
        try:
            out[p] = (repo / p).read_bytes()
        except OSError:
            out[p] = None
    return out


def detect_paths(variant: Variant) -> list[str]:
    """The files :func:`detect` reads first (none: the variant has no SM120 backend file)."""
    sm = _file(variant, SM120_SUFFIX)
    return [p for p in (sm, _file(variant, SPARSE_SUFFIX), WARMUP, BACKEND) if p] if sm else []


def detect(repo: Path, commit: str | None, variant: Variant) -> ForkDcp | None:
    """The fork's DCP support at ``commit`` (None: the working tree); None when the tree does
    not run DCP in the SM120 backend."""
    paths = detect_paths(variant)
    if not paths:
        return None
    sm = paths[0]
    blobs = _read(repo, commit, paths)
    first = blobs.get(sm) or b""
    if b"return_lse" not in first or b"rank" not in first:
        return None  # cheap exit: no decode LSE, no DCP rank anywhere in the file

    def text(p: str | None) -> str | None:
        b = blobs.get(p) if p else None
        return b.decode("utf-8", "replace") if b is not None else None

    layer = _merging_layer(repo, commit)
    layer_bytes = _read(repo, commit, [layer]).get(layer) if layer else None
    res = analyze(text(sm), text(_file(variant, SPARSE_SUFFIX)), text(WARMUP), text(BACKEND),
                  layer_bytes.decode("utf-8", "replace") if layer_bytes is not None else None)
    if not res.supports_dcp:
        return None
    clean = _clean_patches(repo, commit, variant, {g.patch for g in res.gaps})
    numbers = {p.file[:4]: i for i, p in enumerate(variant.patches, 1)}
    files = {p.file[:4]: p.file for p in variant.patches}
    gaps = [GapState(g.name, g.why, g.fix, files.get(g.patch, g.patch), numbers.get(g.patch, 0),
                     g.patch in clean) for g in res.gaps]
    return ForkDcp(res.evidence, res.features, gaps)


def _grep_files(repo: Path, commit: str | None, pattern: str, paths: list[str]) -> list[str]:
    args = ["grep", "-l", "-e", pattern, *([commit] if commit else []), "--", *paths]
    out = run_git(args, repo, check=False).stdout.splitlines()
    return [ln.split(":", 1)[1] if commit else ln for ln in out if ln]


def _merging_layer(repo: Path, commit: str | None) -> str | None:
    """The file that runs the impl's ``forward_mqa`` and merges the DCP ranks' outputs."""
    files = _grep_files(repo, commit, "is_lse_base_on_e", ["vllm"])
    hits = _grep_files(repo, commit, "forward_mqa", files) if files else []
    return next(iter(sorted(hits, key=lambda f: ("mla" not in f, f))), None)


def _clean_patches(repo: Path, commit: str | None, variant: Variant,
                   wanted: set[str]) -> set[str]:
    """The patches (by number prefix) of ``wanted`` that ``git apply --check`` accepts on the
    commit's files, each on its own."""
    files = variant.touched_files()
    blobs = _read(repo, commit, files)
    out: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="sm120kit-gaps-") as td:
        root = Path(td)
        for f in files:
            b = blobs.get(f)
            if b is not None:
                (root / f).parent.mkdir(parents=True, exist_ok=True)
                (root / f).write_bytes(b)
        for p in variant.patches:
            if p.file[:4] in wanted:
                proc = run_git(["apply", "--check", str(variant.patch_path(p))], root,
                               check=False, ceiling=True)
                if proc.returncode == 0 or (commit and _applies_3way(
                        repo, commit, variant.patch_path(p), Path(td) / "index")):
                    out.add(p.file[:4])
    return out


def _applies_3way(repo: Path, commit: str, patch: Path, index: Path) -> bool:
    """``git apply --3way`` (what ``git am -3`` falls back to) takes the patch on the commit,
    on a private index and a private object directory (the repository's objects readable as an
    alternate): no ref, index, file or object of the repository changes. Blobs one check writes
    (a patch's postimage) serve the next patch's check, as in ``git am -3`` of the series."""
    objects = index.parent / "objects"
    objects.mkdir(exist_ok=True)
    mine = run_git(["rev-parse", "--path-format=absolute", "--git-path", "objects"], repo,
                   check=False).stdout.strip()
    env = {"GIT_INDEX_FILE": str(index), "GIT_OBJECT_DIRECTORY": str(objects),
           "GIT_ALTERNATE_OBJECT_DIRECTORIES": mine}
    index.unlink(missing_ok=True)
    if run_git(["read-tree", commit], repo, check=False, env=env).returncode:
        return False
    return run_git(["apply", "--cached", "--3way", str(patch)], repo, check=False,
                   env=env).returncode == 0


def render_fork_dcp(console: Any, fd: ForkDcp, alias: str, repo: str,
                    base: str | None = None) -> None:
    """The evidence of the fork's own DCP, its gaps and the command that applies the clean ones."""
    for k, v in fd.evidence.items():
        console.print(f"  {k}: {v}", markup=False, soft_wrap=True)
    if not fd.gaps:
        console.print("it has every contract the series adds", markup=False)
        return
    console.print("what it lacks compared with the series:", markup=False)
    for g in fd.gaps:
        how = "applies cleanly" if g.applies_cleanly else "does not apply as is"
        console.print(f"  - {g.name}: {g.why}\n    fix: {g.fix} (patch {g.number} "
                      f"{g.patch}: {how})", markup=False, soft_wrap=True)
    clean = fd.clean_patches()
    if clean:
        console.print("apply only those parts: sm120kit apply --branch "
                      f"{alias} --repo {repo}" + (f" --base {base}" if base else "")
                      + f" --only {','.join(map(str, clean))}",
                      markup=False, soft_wrap=True)
