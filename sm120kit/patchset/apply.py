"""``sm120kit apply`` on a git checkout: checks, already-applied detection, atomic apply.

Order of work (nothing is written before the last step succeeds):

1. the variant's patch files match their manifest sha256 and are parsed (unidiff);
2. the checkout is clean and not in the middle of an am/rebase/merge;
3. the base ref resolves (else: how to fetch it); no patch path leaves the tree or crosses a
   symlink of the base tree;
4. markers at the result branch, HEAD and the base decide "already applied" / "not needed";
5. ``git am -3`` in a sparse throwaway worktree; markers are re-checked on the result commit;
6. only then the result branch is created (and checked out with ``--checkout``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sm120kit.errors import ExitCode, UserError
from sm120kit.patchset import gitengine as ge
from sm120kit.patchset.gitcmd import resolve_many, run_git, tree_modes
from sm120kit.patchset.manifest import Series, Target, Variant
from sm120kit.patchset.markers import (
    MarkerState,
    all_in,
    marker_files,
    read_revisions,
    variant_marker_states,
)
from sm120kit.patchset.patchfile import ParsedPatch, check_patch_paths, parse_patch, prefixes
from sm120kit.patchset.requirements import FlashInferRequirement, requirement
from sm120kit.patchset.targets import DEFAULT_BRANCH_PREFIX, fetch_hint, select


class ApplyFailed(UserError):
    """A patch did not apply; ``details`` is the machine-readable failure (for ``--json``)."""

    def __init__(self, message: str, hint: str | None, details: dict[str, Any]):
        super().__init__(message, hint=hint)
        self.details = details


@dataclass
class PatchOutcome:
    file: str
    subject: str
    state: str  # applied | already-applied | upstream | would-apply | failed | not-attempted


@dataclass
class ApplyResult:
    status: str  # applied | already-applied | not-needed | would-apply
    alias: str
    variant: str
    kind: str  # git | embedded
    repo: str
    base: str
    base_commit: str
    branch: str
    commit: str | None = None
    checked_out: bool = False
    output: str | None = None
    message: str = ""
    patches: list[PatchOutcome] = field(default_factory=list)
    #: what the target needs beyond the series (0.25.x: a FlashInfer newer than the pin)
    requirement: FlashInferRequirement | None = None

    @property
    def exit_code(self) -> int:
        return ExitCode.FINDINGS if self.status == "would-apply" else ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        from sm120kit.report import to_jsonable

        d: dict[str, Any] = to_jsonable(self)
        d["exit_code"] = int(self.exit_code)
        return d

    def render(self, console: Any) -> None:
        from sm120kit.patchset.render import new_table
        from sm120kit.report import styled

        table = new_table(
            f"sm120kit apply {self.alias} (variant {self.variant})", "#", "patch", "subject", "result"
        )
        for i, p in enumerate(self.patches, 1):
            st = {"already-applied": "applied", "would-apply": "not-applied"}.get(p.state, p.state)
            table.add_row(str(i), p.file, p.subject, styled(st))
        console.print(table)
        console.print(self.message)
        if self.requirement is not None:
            console.print(self.requirement.line(), markup=False)


def load_patches(variant: Variant) -> list[ParsedPatch]:
    """Checksum-verify then parse every patch of ``variant`` (tampered → UserError)."""
    variant.check_checksums()
    return [parse_patch(variant.patch_path(p)) for p in variant.patches]


def check_safe_paths(repo: Path, base_commit: str, parsed: list[ParsedPatch]) -> None:
    every: set[str] = set()
    for pp in parsed:
        for p in pp.raw_paths:
            if p and not p.startswith("/") and ".." not in p.split("/"):
                every.update(prefixes(p))
    check_patch_paths(parsed, tree_modes(repo, base_commit, every) if every else {})


def _failure_hint(target: Target, failure: ge.AmFailure) -> str:
    if failure.reason == "missing-preimage":
        made_for = f"release {target.release}" if target.release else "the release it was made for"
        return (
            f"the base differs from {made_for} and the repository lacks the blobs a 3-way "
            f"merge needs; make sure the base is upstream's {target.base_ref or 'tag'} "
            "(`git fetch origin tag ...`), or port with --from ALIAS"
        )
    return (
        "the target's code differs from the release this variant was made for; "
        "pick the matching --branch alias, or port with --from ALIAS --port"
    )


def _try_port(
    repo: Path, alias: str, base: str | None, into: str, from_alias: str | None, dry_run: bool
) -> Any | None:
    """Hand over to the 3-way porting engine (``sm120kit.patchset.port``) when it is installed."""
    try:
        from sm120kit.patchset import port
    except ImportError:
        return None
    fn = getattr(port, "port_series", None)
    if fn is None:
        return None
    import inspect

    kwargs: dict[str, Any] = dict(repo=repo, alias=alias, base=base, into=into, from_alias=from_alias)
    if "dry_run" in inspect.signature(fn).parameters:
        kwargs["dry_run"] = dry_run
    return fn(**kwargs)


def apply_to_checkout(series: Series, alias: str, repo: Path, **kw: Any) -> Any:
    """Apply ``alias``'s variant to the git checkout ``repo`` (see :func:`_apply_to_checkout`);
    the result names the FlashInfer the target needs when its pin is too old (0.25.x)."""
    res = _apply_to_checkout(series, alias, repo, **kw)
    target = series.targets.get(alias)
    if isinstance(res, ApplyResult) and target is not None:
        res.requirement = requirement(target)
    return res


def _apply_to_checkout(
    series: Series,
    alias: str,
    repo: Path,
    *,
    base: str | None = None,
    into: str | None = None,
    checkout: bool = False,
    dry_run: bool = False,
    from_alias: str | None = None,
    port: bool | None = None,
    kind: str = "git",
) -> Any:
    """Apply ``alias``'s variant to the git checkout ``repo`` (see the module doc).

    Returns an :class:`ApplyResult` (or the porting engine's result object when porting ran).
    Raises :class:`UserError` / :class:`ApplyFailed`; on every error path the checkout is unchanged.
    """
    target, variant = select(series, alias, from_alias)
    parsed = load_patches(variant)
    repo = Path(repo)
    git_dir = repo / ".git" if (repo / ".git").is_dir() else ge_dirs(repo)[0]
    dirty = ge.dirty_paths(repo)
    if dirty:
        shown = ", ".join(dirty[:8]) + (f" (+{len(dirty) - 8} more)" if len(dirty) > 8 else "")
        raise UserError(
            f"working tree of {repo} has uncommitted changes: {shown}",
            hint="commit or stash them first (`git stash`), then re-run; nothing was changed",
        )
    busy = ge.operation_in_progress(git_dir)
    if busy:
        raise UserError(
            f"{repo} is in the middle of {busy}",
            hint="finish or abort it first; nothing was changed",
        )
    base_ref = base or target.base_ref or ("HEAD" if from_alias else "")
    if not base_ref:
        raise UserError(f"{alias} has no base ref", hint="pass --base REF")
    port_allowed = port if port is not None else bool(from_alias or target.port_from)
    into = into or f"{DEFAULT_BRANCH_PREFIX}{alias}"
    ids = resolve_many(repo, [f"{base_ref}^{{commit}}", "HEAD^{commit}", f"refs/heads/{into}"])
    base_commit = ids[f"{base_ref}^{{commit}}"]
    if base_ref.startswith("-"):
        base_commit = None
    if base_commit is None and port_allowed and not base:
        # e.g. a fork whose base is a remote branch: the porting engine knows how to find it
        ported = _try_port(repo, alias, base, into, from_alias, dry_run)
        if ported is not None:
            return ported
    if base_commit is None:
        raise UserError(
            f"base ref {base_ref} is not in {repo}",
            hint=fetch_hint(repo, base_ref) if not base else "check the name given to --base",
        )
    check_safe_paths(repo, base_commit, parsed)
    ge.check_branch_name(repo, into)

    common: dict[str, Any] = dict(
        alias=alias, variant=variant.name, kind=kind, repo=str(repo), base=base_ref,
        base_commit=base_commit, branch=into,
    )
    files = marker_files(variant)
    existing = ids[f"refs/heads/{into}"]
    revs = [base_commit, "HEAD"] + ([existing] if existing else [])
    head_commit = ids["HEAD^{commit}"]
    if head_commit is None:
        revs.remove("HEAD")
    contents = read_revisions(repo, revs, files)
    states = {r: variant_marker_states(variant, contents[r]) for r in revs}

    def outcomes(st: list[MarkerState], default: str) -> list[PatchOutcome]:
        return [
            PatchOutcome(
                s.patch.file, s.patch.subject,
                "already-applied" if s.applied else ("upstream" if s.upstream else default),
            )
            for s in st
        ]

    if existing:
        if all_in(states[existing]):
            msg = f"already applied: branch {into} carries the series"
            done = False
            if checkout and not dry_run:
                current = run_git(["symbolic-ref", "--quiet", "HEAD"], repo, check=False)
                if current.stdout.strip() == f"refs/heads/{into}":
                    done = True
                else:
                    ge.ensure_writable(repo, [p for pp in parsed for p in pp.paths()])
                    done, note = _checkout(repo, into)
                    msg += note
            return ApplyResult(
                status="already-applied", commit=existing, patches=outcomes(states[existing], "?"),
                checked_out=done, message=msg, **common,
            )
        raise UserError(
            f"branch {into} exists and does not carry the {variant.name} series",
            hint=f"pass --into NEW_BRANCH, or delete it (`git branch -D {into}`)",
        )
    if head_commit and all_in(states["HEAD"]) and any(s.applied for s in states["HEAD"]):
        return ApplyResult(
            status="already-applied", commit=head_commit, patches=outcomes(states["HEAD"], "?"),
            message="already applied: HEAD carries the series", **common,
        )
    base_states = states[base_commit]
    if all(s.upstream for s in base_states) or (
        all_in(base_states) and not any(s.applied for s in base_states)
    ):
        return ApplyResult(
            status="not-needed", commit=base_commit, patches=outcomes(base_states, "?"),
            message=f"not needed: {base_ref} already has DCP support upstream", **common,
        )
    if all_in(base_states):
        return ApplyResult(
            status="already-applied", commit=base_commit, patches=outcomes(base_states, "?"),
            message=f"already applied: {base_ref} carries the series", **common,
        )
    todo = [pp for pp, s in zip(parsed, base_states, strict=True) if not (s.applied or s.upstream)]
    if checkout:
        ge.ensure_writable(repo, [p for pp in todo for p in pp.paths()])

    wa = ge.apply_patches_in_worktree(repo, base_commit, todo)
    if not wa.ok:
        assert wa.failure is not None
        if port_allowed:
            ported = _try_port(repo, alias, base, into, from_alias, dry_run)
            if ported is not None:
                return ported
        f = wa.failure
        raise ApplyFailed(
            f"{f.message()}; nothing was changed",
            _failure_hint(target, f),
            {"status": "failed", "failure": f.to_dict(), **common},
        )
    assert wa.commit is not None
    after = variant_marker_states(variant, read_revisions(repo, [wa.commit], files)[wa.commit])
    if not all_in(after):
        missing = [m for s in after for m in s.missing]
        raise UserError(
            f"the series applied but its applied-markers are missing ({missing[0].file}: "
            f"{missing[0].text!r}); the manifest does not match the patches; nothing was changed",
            hint="regenerate patches/manifest.json",
        )
    applied_names = {pp.name for pp in todo}
    result_patches = [
        PatchOutcome(
            s.patch.file, s.patch.subject,
            ("would-apply" if dry_run else "applied") if s.patch.file in applied_names
            else ("upstream" if s.upstream else "already-applied"),
        )
        for s in base_states
    ]
    if dry_run:
        return ApplyResult(
            status="would-apply", commit=None, patches=result_patches,
            message=f"dry run: {len(todo)} patch(es) apply cleanly on {base_ref}; "
            f"would create branch {into}",
            **common,
        )
    ge.create_branch(repo, into, wa.commit, f"sm120kit apply {alias} ({variant.name})")
    checked_out = False
    msg = f"applied {len(todo)} patch(es) on {base_ref}: branch {into}"
    if checkout:
        checked_out, note = _checkout(repo, into)
        msg += note
    return ApplyResult(
        status="applied", commit=wa.commit, checked_out=checked_out, patches=result_patches,
        message=msg, **common,
    )


def _checkout(repo: Path, branch: str) -> tuple[bool, str]:
    """Check ``branch`` out when the tree is (still) clean: ``(done, note for the message)``."""
    if ge.dirty_paths(repo):
        return False, " (not checked out: the working tree has uncommitted changes)"
    proc = run_git(["checkout", "-q", branch], repo, check=False)
    if proc.returncode == 0:
        return True, " (checked out)"
    return False, f" (checkout failed: {proc.stderr.strip()[:120]})"


def ge_dirs(repo: Path) -> tuple[Path, Path]:
    from sm120kit.patchset.snapshot import git_dirs

    return git_dirs(repo)
