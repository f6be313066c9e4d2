"""Port the series onto a fork or an unknown branch by a per-file 3-way merge.

``git am -3`` needs the patch's preimage blobs in the target repository. A fork (the Eldritch
branches), a tree rebuilt from a wheel, or a release the variant was not written for lacks them,
so :func:`port_series` reconstructs what ``-3`` would have used from the PyPI release instead:

1. pick the source ``(variant, release)``: ``--from`` (an alias or a variant name), else the
   target's ``port_from`` variant, else the *nearest* verified release — the one whose files, of
   those the series touches, are most similar (``difflib`` line ratio) to the fork's files;
2. rebuild that release's touched files from the cached wheel tree and apply the variant to them
   in a scratch repository (``git am -3``), keeping the state after every patch;
3. for every patch, for every file it touches, ``git merge-file`` with base = the release file
   before the patch, ours = the fork's file (as ported so far), theirs = the release file after
   the patch; where that conflicts, the definition-level merge of
   :mod:`sm120kit.patchset.defmerge` (definitions matched by qualified name, each side's
   changes kept, a definition both sides changed line-merged alone, imports merged as sets);
4. clean everywhere, every touched ``.py`` compiles and every applied-marker is present → write
   one commit per patch (same author, subject and message) with plumbing (``hash-object``,
   a private index, ``commit-tree``) and create the result branch with ``update-ref``. HEAD, the
   index, the working tree and existing refs are never touched; on any conflict nothing is
   written to the repository at all, a report (patch, file, hunk, both sides) goes to a report
   directory and the result has exit code 2.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sm120kit.errors import ExitCode, UserError
from sm120kit.gitrun import AM_CONFIG, read_blobs, rev_parse, run_git, run_git_bytes, tree_modes
from sm120kit.models.portguide import Step
from sm120kit.models.series import Patch, Series, Target, Variant, load_series
from sm120kit.patchset.conflictguide import explain, guide_lines
from sm120kit.patchset.defmerge import MergeOutcome, fork_only_missing, merge_file
from sm120kit.patchset.release import find_cached_wheel, release_tree
from sm120kit.paths import cache_dir

# --------------------------------------------------------------------------------------------
# small git helpers (bytes in / out)


def _git_bytes(args: list[str], cwd: Path, *, input: bytes | None = None,
               env: dict[str, str] | None = None) -> bytes:
    return run_git_bytes(args, cwd, input=input, env=env).stdout


def read_files_at(repo: Path, rev: str, paths: list[str]) -> dict[str, bytes | None]:
    """``{path: bytes or None}`` of ``rev:path`` in ``repo``."""
    got = read_blobs(repo, [f"{rev}:{p}" for p in paths])
    return {p: got.get(f"{rev}:{p}") for p in paths}


# --------------------------------------------------------------------------------------------
# the release side: preimage and per-patch states


@dataclass
class PatchStep:
    """One patch applied to the release copies: its commit metadata and the files after it."""

    file: str
    subject: str
    author_name: str
    author_email: str
    author_date: str
    message: str
    after: dict[str, bytes | None]


def _release_file_map(release: str, paths: list[str]) -> dict[str, bytes | None]:
    tree = release_tree("vllm", release)
    out: dict[str, bytes | None] = {}
    for p in paths:
        f = tree / p
        out[p] = f.read_bytes() if f.is_file() else None
    return out


def series_steps(originals: dict[str, bytes | None], variant: Variant) -> list[PatchStep]:
    """Apply ``variant`` patch by patch to copies of ``originals``; the state after each patch.

    Raises ``UserError`` naming the patch when one does not apply (the copies are not the
    variant's release).
    """
    with tempfile.TemporaryDirectory(prefix="sm120kit-steps-") as tmp:
        repo = Path(tmp)
        run_git(["init", "-q", "-b", "main"], repo)
        for rel, data in originals.items():
            if data is None:
                continue
            p = repo / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        run_git(["add", "-A"], repo)
        run_git(["commit", "-q", "--no-verify", "--allow-empty", "-m", "release files"], repo,
                config=AM_CONFIG)
        steps: list[PatchStep] = []
        paths = list(originals)
        for patch in variant.patches:
            proc = run_git(["am", "-3", "--whitespace=nowarn", str(variant.patch_path(patch))],
                           repo, check=False, config=AM_CONFIG)
            if proc.returncode != 0:
                run_git(["am", "--abort"], repo, check=False)
                raise UserError(
                    f"patch {patch.file} of {variant.name} does not apply to the release copies: "
                    + _first_error(proc.stdout + proc.stderr)
                )
            meta = run_git(["show", "-s", "--date=raw", "--format=%an%x00%ae%x00%ad%x00%B", "HEAD"],
                           repo).stdout
            an, ae, ad, body = meta.split("\x00", 3)
            for f in patch.files:
                if f not in paths:
                    paths.append(f)
            after = {p: ((repo / p).read_bytes() if (repo / p).is_file() else None) for p in paths}
            steps.append(PatchStep(patch.file, patch.subject, an, ae, ad, body.rstrip("\n") + "\n",
                                   after))
        return steps


def _first_error(text: str) -> str:
    for ln in text.splitlines():
        s = ln.strip()
        if s.startswith(("error: patch failed", "CONFLICT", "error:")):
            return s
    return (text.strip().splitlines() or ["failed"])[-1]


# --------------------------------------------------------------------------------------------
# choosing the source release


@dataclass
class Candidate:
    alias: str | None
    variant: str
    release: str
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {"alias": self.alias, "variant": self.variant, "release": self.release,
                "score": round(self.score, 4)}


def similarity(a: bytes | None, b: bytes | None) -> float:
    """Line-level ``difflib`` ratio of two files (0 when either is missing)."""
    if a is None or b is None:
        return 0.0
    la = a.decode("utf-8", "replace").splitlines()
    lb = b.decode("utf-8", "replace").splitlines()
    return difflib.SequenceMatcher(None, la, lb).ratio()


def _release_available(version: str) -> bool:
    tree = cache_dir() / "trees" / f"vllm-{version}"
    return (tree / ".complete").exists() or find_cached_wheel("vllm", version) is not None


def resolve_from(series: Series, from_alias: str) -> tuple[Variant, list[str]]:
    """``--from`` is an alias (its variant and release) or a variant name (its releases)."""
    if from_alias in series.targets:
        t = series.targets[from_alias]
        if t.status == "unsupported":
            raise UserError(f"--from {from_alias}: not supported: {t.reason}")
        v = series.variant(t.variant)
        return v, [t.release] if t.release else [v.base_release]
    if from_alias in series.variants:
        v = series.variants[from_alias]
        return v, [v.base_release] + [r for r in v.releases if r != v.base_release]
    raise UserError(
        f"--from {from_alias!r} is neither an alias nor a variant",
        hint="aliases: " + ", ".join(sorted(series.targets)) + "; variants: "
        + ", ".join(sorted(series.variants)),
    )


def rank_candidates(
    series: Series,
    ours: Callable[[list[str]], dict[str, bytes | None]],
    pool: list[tuple[Variant, str, str | None]],
) -> list[Candidate]:
    """Score every ``(variant, release)`` of ``pool`` against the fork's files, best first."""
    out = []
    for variant, release, alias in pool:
        files = variant.touched_files()
        mine = ours(files)
        theirs = _release_file_map(release, files)
        score = sum(similarity(mine[f], theirs[f]) for f in files) / max(len(files), 1)
        out.append(Candidate(alias, variant.name, release, score))
    out.sort(key=lambda c: -c.score)
    return out


def candidate_pool(
    series: Series, target: Target | None, from_alias: str | None
) -> list[tuple[Variant, str, str | None]]:
    """The ``(variant, release, alias)`` pairs worth scoring, releases that are cached first."""

    def alias_of(rel: str) -> str | None:
        return series.alias_for_release(rel)

    if from_alias:
        v, rels = resolve_from(series, from_alias)
        local = [r for r in rels if _release_available(r)] or rels[:1]
        return [(v, r, alias_of(r)) for r in local]
    if target is not None and target.port_from:
        v = series.variant(target.port_from)
        rels = [v.base_release] + [r for r in v.releases if r != v.base_release]
        local = [r for r in rels if _release_available(r)] or rels[:1]
        return [(v, r, alias_of(r)) for r in local]
    pool: list[tuple[Variant, str, str | None]] = []
    for alias, t in series.targets.items():
        if t.release and t.status == "verified" and t.variant in series.variants:
            if _release_available(t.release):
                pool.append((series.variants[t.variant], t.release, alias))
    if not pool:
        for v in series.variants.values():
            pool.append((v, v.base_release, alias_of(v.base_release)))
    return pool


# --------------------------------------------------------------------------------------------
# merging and reporting


@dataclass
class Conflict:
    patch: str
    subject: str
    file: str
    number: int
    line: int  # 1-based line of the conflict in the merged output
    hunk: str | None  # the patch hunk it falls in ("@@ -a,b +c,d @@ ...")
    ours: str  # the fork's side
    base: str  # the release preimage
    theirs: str  # the release with the patch
    definition: str | None = None  # the definition (``Class.method``) when merged by definition
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _conflict_regions(merged: str) -> list[tuple[int, str, str, str]]:
    """(line, ours, base, theirs) for each diff3 conflict block of ``merged``."""
    out = []
    lines = merged.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        if lines[i].startswith("<<<<<<< "):
            start = i + 1
            sec: dict[str, list[str]] = {"ours": [], "base": [], "theirs": []}
            cur = "ours"
            i += 1
            while i < len(lines) and not lines[i].startswith(">>>>>>> "):
                ln = lines[i]
                if ln.startswith("||||||| ") and cur == "ours":
                    cur = "base"
                elif ln.rstrip("\r\n") == "=======" and cur in ("ours", "base"):
                    cur = "theirs"
                else:
                    sec[cur].append(ln)
                i += 1
            out.append((start, "".join(sec["ours"]), "".join(sec["base"]), "".join(sec["theirs"])))
        i += 1
    return out


def _hunk_for(variant: Variant, patch_file: str, path: str, base_text: str, base_file: str) -> str | None:
    """The header of the patch hunk (for ``path``) nearest to where ``base_text`` sits."""
    import unidiff

    try:
        ps = unidiff.PatchSet(
            (variant.directory / patch_file).read_text(encoding="utf-8", errors="replace"))
    except Exception:  # noqa: BLE001 - the report is best effort; the conflict itself is exact
        return None
    pos = base_file.find(base_text) if base_text.strip() else -1
    line = base_file.count("\n", 0, pos) + 1 if pos >= 0 else None
    best: tuple[int, str] | None = None
    for pf in ps:
        if pf.path != path:
            continue
        for h in pf:
            header = f"@@ -{h.source_start},{h.source_length} +{h.target_start},{h.target_length} @@"
            if h.section_header:
                header += " " + h.section_header.strip()
            if line is None:
                return header
            end = h.source_start + max(h.source_length, 1)
            dist = 0 if h.source_start <= line < end else min(abs(line - h.source_start),
                                                               abs(line - end))
            if best is None or dist < best[0]:
                best = (dist, header)
    return best[1] if best else None


def _compile_problems(files: dict[str, bytes | None]) -> list[str]:
    bad = []
    for path, data in files.items():
        if path.endswith(".py") and data is not None:
            try:
                compile(data, path, "exec", dont_inherit=True)
            except SyntaxError as exc:
                bad.append(f"{path}:{exc.lineno}: {exc.msg}")
    return bad


# --------------------------------------------------------------------------------------------
# result


PortStatus = Literal["ported", "conflict", "already-applied", "not-needed", "would-port"]


@dataclass
class PortResult:
    status: PortStatus
    alias: str
    repo: Path
    base: str
    into: str | None
    source: Candidate
    candidates: list[Candidate] = field(default_factory=list)
    commits: list[dict[str, str]] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    report: Path | None = None
    note: str = ""
    files: dict[str, bytes | None] = field(default_factory=dict, repr=False)
    #: ``patch: file`` pairs the line merge could not do and the definition-level merge did
    by_definition: list[str] = field(default_factory=list)
    #: on a conflict: per contract, done in the fork or what to change where
    guide: list[Step] = field(default_factory=list)
    #: on a conflict: the other patches ``apply --branch only_alias --only`` takes as they are
    clean_patches: list[int] = field(default_factory=list)
    only_alias: str = ""
    #: on a conflict: the release alias nearest to the fork when the port started elsewhere
    nearest: str | None = None
    #: the patches ported (1-based; empty: the whole series)
    only: list[int] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.status == "conflict":
            return ExitCode.FAILURE
        return ExitCode.FINDINGS if self.status == "would-port" else ExitCode.OK

    @property
    def branch(self) -> str | None:
        return self.into if self.status == "ported" else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": "port",
            "status": self.status,
            "alias": self.alias,
            "repo": str(self.repo),
            "base": self.base,
            "branch": self.into if self.status == "ported" else None,
            "into": self.into,
            "source": self.source.to_dict(),
            "candidates": [c.to_dict() for c in self.candidates],
            "commits": self.commits,
            "conflicts": [c.to_dict() for c in self.conflicts],
            "problems": self.problems,
            "merged_by_definition": self.by_definition,
            "guide": [s.to_dict() for s in self.guide],
            "clean_patches": self.clean_patches,
            "nearest": self.nearest,
            "only": self.only or None,
            "report": str(self.report) if self.report else None,
            "note": self.note or None,
        }

    def render(self, console: Any) -> None:
        from rich.table import Table

        src = self.source
        console.print(f"3-way port of variant {src.variant} (from vllm {src.release}, similarity "
                      f"{src.score:.3f}) onto {self.base[:12]} in {self.repo}")
        if self.commits:
            t = Table(title="ported patches", title_justify="left")
            t.add_column("patch")
            t.add_column("commit")
            for c in self.commits:
                t.add_row(c["patch"], c["commit"][:12])
            console.print(t)
        if self.conflicts:
            t = Table(title="conflicts", title_justify="left")
            for col in ("patch", "file", "definition", "line", "hunk"):
                t.add_column(col)
            for k in self.conflicts:
                t.add_row(k.patch, k.file, k.definition or "-", str(k.line), k.hunk or "?")
            console.print(t)
        for p in self.problems:
            console.print(f"[red]problem[/red]: {p}")
        for m in self.by_definition:
            console.print(f"merged by definition (the line merge conflicted): {m}")
        if self.note:
            console.print(self.note)
        if self.status == "ported":
            console.print(f"[green]ported[/green]: branch {self.into}")
        elif self.status == "conflict":
            for line in guide_lines(self):
                console.print(line, markup=False, soft_wrap=True)
            console.print(f"[bold red]conflict[/bold red]: nothing changed; report: {self.report}")
        else:
            console.print(self.status)


def _write_report(result: PortResult, report_dir: Path | None) -> Path:
    d = Path(report_dir) if report_dir else Path(tempfile.mkdtemp(prefix="sm120kit-port-report-"))
    d.mkdir(parents=True, exist_ok=True)
    (d / "report.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    lines = [
        f"# sm120kit 3-way port: {result.status}",
        "",
        f"- target: `{result.repo}` at `{result.base}` (alias `{result.alias}`)",
        f"- source: variant `{result.source.variant}` from vLLM {result.source.release}",
        "- nothing was changed in the target repository",
        "",
    ]
    for p in result.problems:
        lines.append(f"- problem: {p}")
    guide = guide_lines(result)
    if guide:
        lines += ["## What to do", "", *(f"- {g}" for g in guide), ""]
    for c in result.conflicts:
        lines += [
            f"## {c.file}: conflict {c.number} (patch {c.patch})",
            "",
            f"- patch subject: {c.subject}",
            f"- hunk: `{c.hunk or 'unknown'}`",
            *([f"- definition: `{c.definition}` ({c.reason}); line {c.line} of the fork's file"]
              if c.definition else [f"- line {c.line} of the merged file"]),
            "",
            "### target (fork) side",
            "```python",
            c.ours.rstrip("\n"),
            "```",
            "### release preimage (base)",
            "```python",
            c.base.rstrip("\n"),
            "```",
            "### patched release side",
            "```python",
            c.theirs.rstrip("\n"),
            "```",
            "",
        ]
    path = d / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


# --------------------------------------------------------------------------------------------
# the port


def resolve_base(repo: Path, target: Target | None, base: str | None) -> str:
    """The commit to port onto: ``base``; else a fork alias' branch (local or fetched); else the
    alias' base ref when the repository has it; else HEAD."""
    if base:
        sha = rev_parse(repo, base)
        if sha is None:
            raise UserError(f"base {base!r} is not a commit in {repo}",
                            hint="fetch it first (git fetch origin TAG_OR_BRANCH)")
        return sha
    if target is not None and target.branch:
        return fetch_branch(repo, target)
    if target is not None and target.base_ref:
        sha = rev_parse(repo, target.base_ref)
        if sha:
            return sha
    sha = rev_parse(repo, "HEAD")
    if sha is None:
        raise UserError(f"{repo} has no commits")
    return sha


def fetch_branch(repo: Path, target: Target) -> str:
    """A fork alias' branch: a local ref if present, otherwise fetched from ``target.repo``.

    Fetching writes only objects and ``FETCH_HEAD`` (no ref is created or moved).
    """
    branch = target.branch or ""
    for ref in (f"refs/heads/{branch}", f"refs/remotes/origin/{branch}"):
        sha = rev_parse(repo, ref)
        if sha:
            return sha
    proc = run_git(["for-each-ref", "--format=%(objectname)", f"refs/remotes/*/{branch}"], repo)
    found = proc.stdout.split()
    if found:
        return found[0]
    if not target.repo:
        raise UserError(f"branch {branch} is not in {repo} and {target.alias} has no remote")
    proc = run_git(["fetch", "--no-tags", target.repo, f"refs/heads/{branch}"], repo,
                   check=False, timeout=900)
    if proc.returncode == 0:
        sha = rev_parse(repo, "FETCH_HEAD")  # fetching creates or moves no ref
        if sha:
            return sha
    err = (proc.stderr.strip().splitlines() or ["unknown error"])[-1]
    raise UserError(
        f"cannot fetch {branch} from {target.repo}: {err}",
        hint=f"offline? fetch it where the network reaches GitHub: git fetch {target.repo} "
        f"{branch}:{branch}, then rerun with --repo",
    )


def port_series(
    repo: Path,
    alias: str,
    base: str | None = None,
    into: str = "",
    from_alias: str | None = None,
    *,
    series: Series | None = None,
    report_dir: Path | None = None,
    dry_run: bool = False,
    create_branch: bool = True,
    merge: Callable[..., MergeOutcome] = merge_file,
    replace: bool = False,
    only: list[int] | None = None,
) -> PortResult:
    """3-way port the series onto ``base`` in ``repo`` (see the module docstring).

    ``merge`` merges one file (``merge_file``'s signature): the line merge, then the
    definition-level merge where that conflicts; the drift benchmark passes the alternatives.
    ``only``: port just these patches (1-based), each merged as ``git am -3`` would take it
    alone (base: the release after the patches before it; the others are left out).
    """
    repo = Path(repo)
    series = series or load_series()
    target = _port_target(series, alias, from_alias)
    base_sha = resolve_base(repo, target, base)
    into = into or f"sm120kit/dcp-{alias}"
    old = rev_parse(repo, f"refs/heads/{into}")
    if create_branch and not dry_run and old and not replace:
        raise UserError(f"branch {into} already exists in {repo}",
                        hint="pass --into NEW_BRANCH or delete the old one")

    def ours_at(paths: list[str]) -> dict[str, bytes | None]:
        return read_files_at(repo, base_sha, paths)

    cands = rank_candidates(series, ours_at, candidate_pool(series, target, from_alias))
    src = cands[0]
    variant = series.variant(src.variant)
    variant.check_checksums()
    files = variant.touched_files()
    fork = ours_at(files)

    result = PortResult("ported", alias, repo, base_sha, into, src, cands, only=only or [])
    chosen = [p for i, p in enumerate(variant.patches, 1) if not only or i in only]
    if _markers_hold(chosen, fork, "applied", ours_at):
        result.status = "already-applied"
        return result
    if _markers_hold(chosen, fork, "upstream", ours_at):
        result.status = "not-needed"
        return result

    release_files = _release_file_map(src.release, files)
    steps = series_steps(release_files, variant)
    labels = (f"target {base_sha[:12]}", f"vllm {src.release}", f"vllm {src.release} + {variant.name}")
    cur, per_patch = _merge_steps(result, variant, steps, release_files, fork, ours_at, labels,
                                  merge, only)
    if not result.conflicts:
        result.problems += _result_problems(chosen, files, release_files, fork, cur)
    result.files = {p: cur.get(p) for p in files}
    if result.conflicts or result.problems:
        result.status = "conflict"
        if result.conflicts:
            explain(result, variant, _nearer(series, target, from_alias, src, ours_at),
                    alias if target is not None and target.variant == variant.name
                    else src.alias or alias)
        result.report = _write_report(result, report_dir)
        return result
    if dry_run:
        result.status = "would-port"
        return result
    _commit_result(result, repo, variant, steps, per_patch, create_branch, old if replace else None)
    return result


def _nearer(series: Series, target: Target | None, from_alias: str | None, src: Candidate,
            ours_at: Callable[[list[str]], dict[str, bytes | None]]) -> str | None:
    """When the source was imposed (``--from``, ``port_from``): the verified release alias
    whose files are nearer to the fork's, if it belongs to another variant."""
    if not (from_alias or (target is not None and target.port_from)):
        return None
    best = rank_candidates(series, ours_at, candidate_pool(series, None, None))
    if best and best[0].variant != src.variant and best[0].score > src.score:
        return best[0].alias
    return None


def _port_target(series: Series, alias: str, from_alias: str | None) -> Target | None:
    """The target to port onto (None for an alias outside the manifest ported ``--from`` one)."""
    target = series.targets.get(alias)
    if target is None and from_alias is None:
        series.target(alias)  # raises the unknown-alias error listing the known ones
    if target is not None and target.status == "unsupported":
        raise UserError(f"{alias} is not supported: {target.reason}")
    return target


def _markers_hold(patches: list[Patch], content: dict[str, bytes | None], kind: str,
                  ours_at: Callable[[list[str]], dict[str, bytes | None]]) -> bool:
    """Every one of ``patches`` has ``kind`` ("applied" or "upstream") markers and all of them
    hold in ``content`` (a file outside ``content`` is read with ``ours_at``)."""
    ok = True
    for p in patches:
        ms = p.applied_markers if kind == "applied" else p.upstream_markers
        if not ms:
            return False
        for m in ms:
            data = content.get(m.file)
            if data is None and m.file not in content:
                data = ours_at([m.file])[m.file]
            if data is None or not m.holds(data.decode("utf-8", "replace")):
                ok = False
    return ok


def _commit_result(result: PortResult, repo: Path, variant: Variant, steps: list[PatchStep],
                   per_patch: list[dict[str, bytes | None]], create_branch: bool,
                   old: str | None = None) -> None:
    """One commit per patch of the series (of ``result.only``) on top of the base; the branch
    when asked for."""
    keep = [i for i in range(len(steps)) if not result.only or i + 1 in result.only]
    steps, per_patch = [steps[i] for i in keep], [per_patch[i] for i in keep]
    commits = _commit_steps(repo, result.base, steps, per_patch)
    result.commits = [{"patch": s.file, "subject": s.subject, "commit": c}
                      for s, c in zip(steps, commits, strict=True)]
    if create_branch:
        run_git(["update-ref", "-m", f"sm120kit: 3-way port of {variant.name}",
                 f"refs/heads/{result.into}", commits[-1], old or ""], repo)


def _result_problems(patches: list[Patch], files: list[str],
                     release: dict[str, bytes | None], fork: dict[str, bytes | None],
                     cur: dict[str, bytes | None]) -> list[str]:
    """Checked on the merged files: they compile, carry every applied marker of ``patches`` and
    keep every definition the fork added."""
    out = _compile_problems({p: cur.get(p) for p in files})
    for p in patches:
        for m in p.applied_markers:
            data = cur.get(m.file)
            if data is None or m.text not in data.decode("utf-8", "replace"):
                out.append(f"{p.file}: applied-marker {m.text!r} missing from {m.file} after merging")
    for f in files:
        for name in fork_only_missing(release.get(f), fork.get(f), cur.get(f)):
            out.append(f"{f}: the fork's definition {name} is missing after merging")
    return out


def _merge_steps(
    result: PortResult,
    variant: Variant,
    steps: list[PatchStep],
    release_files: dict[str, bytes | None],
    fork: dict[str, bytes | None],
    ours_at: Callable[[list[str]], dict[str, bytes | None]],
    labels: tuple[str, str, str],
    merge: Callable[..., MergeOutcome],
    only: list[int] | None = None,
) -> tuple[dict[str, bytes | None], list[dict[str, bytes | None]]]:
    """Merge every patch into the fork's files, file by file: (files at the end, per-patch
    changes); conflicts and problems go into ``result``."""
    prev = dict(release_files)
    cur: dict[str, bytes | None] = dict(fork)
    per_patch: list[dict[str, bytes | None]] = []
    for n, step in enumerate(steps):
        changed: dict[str, bytes | None] = {}
        if only and n + 1 not in only:  # left out: the next patch merges from after it
            per_patch.append(changed)
            prev = dict(step.after)
            continue
        for path, after in step.after.items():
            before = prev.get(path)
            if before == after:
                continue
            mine = cur[path] if path in cur else ours_at([path])[path]
            if mine == before or mine == after:
                changed[path] = after if mine == before else mine
                continue
            if mine is None or before is None or after is None:
                result.conflicts.append(Conflict(
                    step.file, step.subject, path, len(result.conflicts) + 1, 0, None,
                    "(missing)" if mine is None else "(present)",
                    "(missing)" if before is None else "(present)",
                    "(deleted)" if after is None else "(created)"))
                continue
            markers = [m.text for i, p in enumerate(variant.patches[: n + 1], 1)
                       for m in p.applied_markers
                       if m.file == path and (not only or i in only)]
            out = merge(mine, before, after, path=path, labels=labels, markers=markers)
            if out.merged is None:
                _record_conflicts(result, variant, step, path, out, before)
                continue
            if out.method == "definition":
                result.by_definition.append(f"{step.file}: {path}")
            changed[path] = out.merged
        cur.update(changed)
        per_patch.append(changed)
        prev = dict(step.after)
    return cur, per_patch


def _record_conflicts(result: PortResult, variant: Variant, step: PatchStep, path: str,
                      out: MergeOutcome, before: bytes) -> None:
    base_text = before.decode("utf-8", "replace")
    for d in out.conflicts:
        result.conflicts.append(Conflict(
            step.file, step.subject, path, len(result.conflicts) + 1, d.line,
            _hunk_for(variant, step.file, path, d.base, base_text), d.ours, d.base, d.theirs,
            d.definition, d.reason))
    if not out.conflicts:
        for line, o, b, t in _conflict_regions(out.line_merged):
            result.conflicts.append(Conflict(
                step.file, step.subject, path, len(result.conflicts) + 1, line,
                _hunk_for(variant, step.file, path, b, base_text), o, b, t))
    for p in out.problems:
        result.problems.append(f"{step.file}: {p}")
    if not out.conflicts and not out.problems and not out.line_merged:
        result.problems.append(f"{step.file}: {path} could not be merged")


def _commit_steps(repo: Path, base_sha: str, steps: list[PatchStep],
                  per_patch: list[dict[str, bytes | None]]) -> list[str]:
    """One commit per patch on top of ``base_sha``, written with plumbing and a private index."""
    with tempfile.TemporaryDirectory(prefix="sm120kit-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git_bytes(["read-tree", base_sha], repo, env=env)
        modes = tree_modes(repo, base_sha, [p for ch in per_patch for p in ch])
        parent = base_sha
        out = []
        for step, changed in zip(steps, per_patch, strict=True):
            for path, data in changed.items():
                if data is None:
                    _git_bytes(["update-index", "--force-remove", "--", path], repo, env=env)
                    continue
                blob = _git_bytes(["hash-object", "-w", "--no-filters", "--stdin"], repo,
                                  input=data).decode().strip()
                mode = modes.get(path, "100644")
                _git_bytes(["update-index", "--add", "--cacheinfo", f"{mode},{blob},{path}"],
                           repo, env=env)
            tree = _git_bytes(["write-tree"], repo, env=env).decode().strip()
            cenv = dict(env)
            cenv.update({
                "GIT_AUTHOR_NAME": step.author_name,
                "GIT_AUTHOR_EMAIL": step.author_email,
                "GIT_AUTHOR_DATE": step.author_date,
                "GIT_COMMITTER_NAME": os.environ.get("GIT_COMMITTER_NAME", "sm120kit"),
                "GIT_COMMITTER_EMAIL": os.environ.get("GIT_COMMITTER_EMAIL", "sm120kit@localhost"),
            })
            parent = _git_bytes(["commit-tree", tree, "-p", parent, "-F", "-"], repo,
                                input=step.message.encode(), env=cenv).decode().strip()
            out.append(parent)
        return out


# --------------------------------------------------------------------------------------------
# fork aliases (repo + branch in the manifest): fetch / clone, then apply or port


def fork_clone(target: Target, progress: Callable[[str], None] | None = None) -> Path:
    """A clone of a fork alias' remote branch in the cache (``<cache>/forks/<alias>``).

    Created with ``git clone --single-branch`` (git's own progress on stderr); an existing clone
    is brought up to date with a fetch, or used as is when the remote cannot be reached.
    """
    if not (target.repo and target.branch):
        raise UserError(f"{target.alias} is not a fork alias (no repo/branch in the manifest)")
    dest = cache_dir() / "forks" / target.alias
    if (dest / ".git").is_dir():
        if progress:
            progress(f"updating {dest} from {target.repo}")
        proc = run_git(["fetch", "--no-tags", "origin",
                        f"+refs/heads/{target.branch}:refs/remotes/origin/{target.branch}"],
                       dest, check=False, timeout=1800)
        if proc.returncode != 0:
            if rev_parse(dest, f"refs/remotes/origin/{target.branch}") is None:
                raise UserError(
                    f"cannot fetch {target.branch} from {target.repo}: "
                    + (proc.stderr.strip().splitlines() or ["unknown error"])[-1],
                    hint="check the network, or clone the branch yourself and pass --repo PATH",
                )
            if progress:
                progress("remote unreachable; using the cached clone as it is")
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.alias}-", dir=dest.parent))
    if progress:
        progress(f"cloning {target.repo} ({target.branch}) into {dest}")
    cmd = ["clone", "--single-branch", "--no-tags", *(["--progress"] if progress else []),
           "--branch", target.branch, target.repo, str(tmp / "repo")]
    proc = run_git(cmd, tmp, check=False, timeout=3600, ceiling=True,
                   stderr_to_terminal=progress is not None)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        err = ((proc.stderr or "").strip().splitlines() or ["see the git output above"])[-1]
        raise UserError(
            f"cannot clone {target.branch} from {target.repo}: {err}",
            hint="offline? clone the branch where GitHub is reachable and pass --repo PATH",
        )
    os.replace(tmp / "repo", dest)
    os.rmdir(tmp)
    return dest
