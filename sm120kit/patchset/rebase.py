"""Maintainer workflow: ``rebase`` a variant onto a new release or branch, ``refresh`` one from
a branch that carries the patches as commits.

Both produce a *patches directory*: with ``write=True`` the packaged ``patches/`` of the current
checkout (``Series.root``) is updated in place, ready to ``git commit``; otherwise a copy of it is
made in ``output`` (default: a new temp dir, printed) so the result can be reviewed first, or used
at once with ``SM120KIT_PATCHES=<dir>``. Patch files are ``git format-patch --full-index -N
--no-signature`` output; commit messages (subject, why, ``Origin:``/``Upstream-Status:``) are
kept, only the ``Applies-To:`` line is set to the new target. Markers are taken over patch by
patch from the source variant (same logical change, same marker comments).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sm120kit.errors import ExitCode, UserError
from sm120kit.gitrun import read_blobs, rev_parse, run_git
from sm120kit.models.series import MANIFEST_NAME, Series, Variant, load_series
from sm120kit.patchset.port import PortResult, fetch_branch, fork_clone, port_series, resolve_base
from sm120kit.patchset.release import release_repo
from sm120kit.patchset.targets import checkout_root

_DIFF_RE = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)
_SUBJECT_RE = re.compile(r"^Subject: (?:\[PATCH[^\]]*\] )?(.*(?:\n [^\n]*)*)", re.M)
_APPLIES_RE = re.compile(r"^Applies-To: .*$", re.M)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _patch_info(path: Path) -> tuple[str, list[str]]:
    text = path.read_text(encoding="utf-8", errors="replace")
    m = _SUBJECT_RE.search(text)
    subject = " ".join(m.group(1).split()) if m else path.stem
    files: dict[str, None] = {}
    for a, b in _DIFF_RE.findall(text):
        files.setdefault(b if b != "/dev/null" else a, None)
    return subject, list(files)


def format_patches(repo: Path, base: str, tip: str, out: Path) -> list[Path]:
    """``git format-patch --full-index -N --no-signature base..tip`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    run_git(["format-patch", "-q", "--full-index", "-N", "--no-signature", "-o", str(out),
             f"{base}..{tip}"], repo)
    return sorted(out.glob("*.patch"))


def _set_applies_to(path: Path, applies_to: str) -> None:
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    head, sep, rest = text.partition("\n---\n")
    if _APPLIES_RE.search(head):
        head = _APPLIES_RE.sub(f"Applies-To: {applies_to}", head, count=1)
    path.write_text(head + sep + rest, encoding="utf-8", errors="surrogateescape")


def _entry_patches(directory: Path, files: list[Path], source: Variant) -> list[dict[str, Any]]:
    if len(files) != len(source.patches):
        raise UserError(
            f"{len(files)} commits but {source.name} has {len(source.patches)} patches; markers "
            "are taken over patch by patch, so the counts must match",
            hint="squash or split the commits to one per logical change",
        )
    out = []
    for f, sp in zip(files, source.patches, strict=True):
        subject, touched = _patch_info(f)
        out.append({
            "file": f.name,
            "sha256": hashlib.sha256(f.read_bytes()).hexdigest(),
            "subject": subject,
            "files": touched,
            "applied_markers": [m.to_json() for m in sp.applied_markers],
            "upstream_markers": [m.to_json() for m in sp.upstream_markers],
        })
    return out


def _prepare_output(series: Series, write: bool, output: Path | None) -> Path:
    if write:
        if checkout_root(series.root) is None:
            raise UserError(
                f"--write updates patches/ of an sm120kit source checkout; {series.root} is not "
                "in one (an installed package?)",
                hint="use --output DIR, or run from a git checkout of sm120kit",
            )
        return series.root
    if output is None:
        output = Path(tempfile.mkdtemp(prefix="sm120kit-patches-"))
        shutil.rmtree(output)
    output = Path(output)
    if output.exists() and any(output.iterdir()):
        raise UserError(f"--output {output} exists and is not empty", hint="pick a new directory")
    shutil.copytree(series.root, output, dirs_exist_ok=True)
    return output


def _write_variant(dest_root: Path, name: str, entry: dict[str, Any], patch_files: list[Path],
                   replace: bool) -> Path:
    """Copy ``patch_files`` to ``dest_root/name`` and set the manifest entry (re-read right before)."""
    vdir = dest_root / name
    if vdir.exists():
        if not replace:
            raise UserError(f"variant directory {vdir} already exists",
                            hint="pass --name NEW_VARIANT")
        for old in vdir.glob("*.patch"):
            old.unlink()
    vdir.mkdir(parents=True, exist_ok=True)
    for f in patch_files:
        shutil.copyfile(f, vdir / f.name)
    mpath = dest_root / MANIFEST_NAME
    data = json.loads(mpath.read_text(encoding="utf-8"))
    data.setdefault("variants", {})[name] = entry
    tmp = mpath.with_name(mpath.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(mpath)
    load_series(dest_root).variant(name).check_checksums()
    return vdir




@dataclass
class MaintResult:
    command: Literal["rebase", "refresh"]
    status: Literal["written", "conflict", "already-applied", "not-needed", "would-port"]
    variant: str
    source_variant: str
    output: Path | None
    patches: list[dict[str, Any]] = field(default_factory=list)
    port: PortResult | None = None
    message: str = ""

    @property
    def exit_code(self) -> int:
        return ExitCode.FAILURE if self.status == "conflict" else ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "variant": self.variant,
            "source_variant": self.source_variant,
            "output": str(self.output) if self.output else None,
            "patches": self.patches,
            "port": self.port.to_dict() if self.port else None,
            "message": self.message,
        }

    def render(self, console: Any) -> None:
        from rich.table import Table

        if self.port is not None and self.status == "conflict":
            self.port.render(console)
        if self.patches:
            t = Table(title=f"variant {self.variant}", title_justify="left")
            t.add_column("patch")
            t.add_column("files")
            for p in self.patches:
                t.add_row(p["file"], "\n".join(p["files"]))
            console.print(t)
        console.print(f"{self.status}: {self.message}")


def _work_repo_for(series: Series, onto: str, repo: Path | None,
                   progress: Callable[[str], None] | None, tmp: Path) -> tuple[Path, str, str, str]:
    """(repository, base commit, alias for the port, Applies-To text) for ``--onto``."""
    target = series.targets.get(onto)
    if target is not None and target.status == "unsupported":
        raise UserError(f"{onto} is not supported: {target.reason}")
    if repo is None and target is not None and target.release:
        src = release_repo(target.release, progress=progress)
        work = tmp / "work"
        run_git(["clone", "-q", "--shared", "--no-checkout", str(src), str(work)], tmp)
        sha = rev_parse(work, target.base_ref)
        if sha is None:
            raise UserError(f"{target.base_ref} missing from the release repository {src}")
        return work, sha, onto, target.release
    if repo is None and target is not None and target.repo:
        work = fork_clone(target, progress=progress)
        return work, fetch_branch(work, target), onto, f"{target.branch} ({target.repo})"
    if repo is None:
        raise UserError(f"--onto {onto} is not a known alias; pass --repo PATH for a git ref",
                        hint="`sm120kit targets` lists the aliases")
    if target is not None:
        return repo, resolve_base(repo, target, None), onto, target.release or onto
    sha = rev_parse(repo, onto)
    if sha is None:
        raise UserError(f"--onto {onto} is neither an alias nor a commit in {repo}",
                        hint="fetch the branch first, or use an alias from `sm120kit targets`")
    return repo, sha, onto, onto


def rebase_variant(
    onto: str,
    *,
    repo: Path | None = None,
    from_variant: str | None = None,
    name: str | None = None,
    write: bool = False,
    output: Path | None = None,
    report_dir: Path | None = None,
    series: Series | None = None,
    progress: Callable[[str], None] | None = None,
) -> MaintResult:
    """3-way port the nearest (or ``from_variant``) variant onto ``onto``; write a new variant."""
    series = series or load_series()
    if name is not None and not _NAME_RE.match(name):
        raise UserError(f"--name {name!r}: use letters, digits, '.', '_' and '-'")
    with tempfile.TemporaryDirectory(prefix="sm120kit-rebase-") as tmpd:
        tmp = Path(tmpd)
        work, base_sha, alias, applies_to = _work_repo_for(series, onto, repo, progress, tmp)
        res = port_series(work, alias, base_sha, "", from_variant, series=series,
                          report_dir=report_dir, create_branch=False)
        source = series.variant(res.source.variant)
        if res.status == "conflict":
            return MaintResult("rebase", "conflict", name or "", source.name, None, port=res,
                               message=f"{source.name} does not port onto {onto}; report: "
                               f"{res.report}")
        if res.status != "ported":
            return MaintResult("rebase", res.status, name or "", source.name, None, port=res,
                               message=f"nothing to rebase: {onto} is {res.status}")
        tip = res.commits[-1]["commit"]
        files = format_patches(work, base_sha, tip, tmp / "out")
        for f in files:
            _set_applies_to(f, applies_to)
        vname = name or _default_name(onto, series)
        new_patches = _entry_patches(tmp / "out", files, source)
        entry: dict[str, Any] = {
            "base_release": (series.targets[onto].release if onto in series.targets
                             and series.targets[onto].release else source.base_release),
            "releases": ([series.targets[onto].release] if onto in series.targets
                         and series.targets[onto].release else []),
            "family": f"rebased from {source.name} onto {onto} by `sm120kit rebase` (3-way)",
            "patches": new_patches,
        }
        dest = _prepare_output(series, write, output)
        vdir = _write_variant(dest, vname, entry, files, replace=False)
    return MaintResult(
        "rebase", "written", vname, source.name, dest, new_patches, res,
        f"variant {vname} written to {vdir}" + ("" if write else
        f" (a copy of patches/; use it with SM120KIT_PATCHES={dest} or copy it in)"),
    )


def _default_name(onto: str, series: Series) -> str:
    t = series.targets.get(onto)
    base = f"v{t.release}" if t is not None and t.release else re.sub(r"[^A-Za-z0-9._-]+", "-", onto)
    name, n = base, 2
    while name in series.variants:
        name, n = f"{base}-rebased{'' if n == 2 else n}", n + 1
    return name


def refresh_variant(
    variant: str,
    from_branch: str,
    *,
    repo: Path,
    base: str | None = None,
    write: bool = False,
    output: Path | None = None,
    series: Series | None = None,
) -> MaintResult:
    """Regenerate ``variant``'s patch files from the commits ``base..from_branch`` of ``repo``."""
    series = series or load_series()
    v = series.variant(variant)
    base_ref = base or f"v{v.base_release}"
    base_sha = rev_parse(repo, base_ref)
    if base_sha is None:
        raise UserError(f"base {base_ref} is not in {repo}", hint="pass --base REF")
    tip = rev_parse(repo, from_branch)
    if tip is None:
        raise UserError(f"--from {from_branch} is not a commit in {repo}")
    if run_git(["merge-base", "--is-ancestor", base_sha, tip], repo, check=False).returncode:
        raise UserError(f"{from_branch} does not contain {base_ref}", hint="pass --base REF")
    with tempfile.TemporaryDirectory(prefix="sm120kit-refresh-") as tmpd:
        out = Path(tmpd) / "out"
        files = format_patches(repo, base_sha, tip, out)
        if not files:
            raise UserError(f"{from_branch} has no commits on top of {base_ref}")
        patches = _entry_patches(out, files, v)
        # every applied-marker must be in the branch tip
        wanted = {m["file"] for p in patches for m in p["applied_markers"]}
        blobs = read_blobs(repo, [f"{tip}:{f}" for f in wanted])
        for p in patches:
            for m in p["applied_markers"]:
                data = blobs.get(f"{tip}:{m['file']}")
                if data is None or m["text"] not in data.decode("utf-8", "replace"):
                    raise UserError(
                        f"{from_branch} lacks the applied-marker {m['text']!r} of {p['file']} "
                        f"in {m['file']}",
                        hint="the branch must carry the whole series with its marker comments",
                    )
        raw = json.loads((series.root / MANIFEST_NAME).read_text(encoding="utf-8"))
        entry = dict(raw["variants"][variant])
        entry["patches"] = patches
        dest = _prepare_output(series, write, output)
        vdir = _write_variant(dest, variant, entry, files, replace=True)
    return MaintResult("refresh", "written", variant, variant, dest, patches, None,
                       f"variant {variant} regenerated from {from_branch} into {vdir}")
