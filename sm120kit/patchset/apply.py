"""``sm120kit apply`` on a git checkout: checks, already-applied detection, atomic apply.

Order of work (nothing is written before the last step succeeds):

1. the variant's patch files match their manifest sha256 and are parsed (unidiff);
2. the files the series changes have no uncommitted changes (with ``--checkout``: no file has),
   and the checkout is not in the middle of an am/rebase/merge;
3. the base ref resolves (else: how to fetch it); no patch path leaves the tree or crosses a
   symlink of the base tree;
4. markers at the result branch, HEAD and the base decide "already applied" / "not needed";
5. the series as commits on a temporary index (:mod:`sm120kit.patchset.fastapply`: the commits
   ``git am`` would make, no worktree); when a patch does not apply as-is, ``git am -3`` in a
   sparse throwaway worktree; markers are re-checked on the result commit;
6. only then the result branch is created (and checked out with ``--checkout``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from sm120kit.errors import ExitCode, UserError
from sm120kit.gitrun import prefetch, read_ahead, resolve_many, run_git, tree_modes
from sm120kit.models.series import Series, Target, Variant
from sm120kit.patchset import gitengine as ge
from sm120kit.patchset.fastapply import apply_fast
from sm120kit.patchset.forkdcp import ForkDcp, detect, detect_paths, render_fork_dcp
from sm120kit.patchset.markers import (
    MarkerState,
    all_in,
    marker_files,
    read_revisions,
    variant_marker_states,
)
from sm120kit.patchset.patchfile import ParsedPatch, check_patch_paths, parse_patch, prefixes
from sm120kit.patchset.render import new_table
from sm120kit.patchset.requirements import FlashInferRequirement, requirement
from sm120kit.patchset.snapshot import git_dirs
from sm120kit.patchset.targets import DEFAULT_BRANCH_PREFIX, fetch_hint, select
from sm120kit.report import styled, to_jsonable

if TYPE_CHECKING:  # the porting engine is handed in (Porter) and imported only when it runs
    from sm120kit.patchset.port import PortResult


class ApplyFailed(UserError):
    """A patch did not apply; ``details`` is the machine-readable failure (for ``--json``)."""

    def __init__(self, message: str, hint: str | None, details: dict[str, Any]):
        super().__init__(message, hint=hint)
        self.details = details


PatchState = Literal[
    "applied", "already-applied", "upstream", "would-apply", "failed", "not-attempted", "in-fork"
]
ApplyStatus = Literal["applied", "already-applied", "not-needed", "would-apply",
                      "already-supports-dcp", "base-moved"]
ApplyKind = Literal["git", "embedded"]


@dataclass
class PatchOutcome:
    file: str
    subject: str
    state: PatchState


@dataclass
class ApplyResult:
    status: ApplyStatus
    alias: str
    variant: str
    kind: ApplyKind
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
    #: the base already runs DCP in the SM120 backend: its evidence and what it lacks
    fork_dcp: ForkDcp | None = None
    note: str = ""

    @property
    def exit_code(self) -> int:
        return ExitCode.FINDINGS if self.status in ("would-apply", "base-moved") else ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = to_jsonable(self)
        d["exit_code"] = int(self.exit_code)
        d["fork_dcp"] = self.fork_dcp.to_dict() if self.fork_dcp is not None else None
        return d

    def render(self, console: Any) -> None:
        table = new_table(
            f"sm120kit apply {self.alias} (variant {self.variant})", "#", "patch", "subject", "result"
        )
        for i, p in enumerate(self.patches, 1):
            st = {"already-applied": "applied", "would-apply": "not-applied"}.get(p.state, p.state)
            table.add_row(str(i), p.file, p.subject, styled(st))
        console.print(table)
        console.print(self.message, markup=False, soft_wrap=True)
        if self.fork_dcp is not None:
            render_fork_dcp(console, self.fork_dcp, self.alias, self.repo, self.base)
        if self.requirement is not None:
            console.print(self.requirement.line(), markup=False)
        if self.note:
            console.print(self.note, markup=False, soft_wrap=True)


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


if TYPE_CHECKING:
    #: what ``apply`` on a checkout returns: the ``git am`` engine's result or the 3-way port's
    CheckoutResult: TypeAlias = ApplyResult | PortResult

#: the 3-way porting engine, :func:`sm120kit.patchset.port.port_series` (its signature): the
#: caller hands it in, so that an apply that needs no port never imports it
Porter = Callable[..., "PortResult"]


def _port(
    porter: Porter | None, series: Series, repo: Path, alias: str, base: str | None, into: str,
    from_alias: str | None, dry_run: bool, replace: bool = False,
    only: list[int] | None = None,
) -> PortResult:
    """Hand over to the 3-way porting engine (``porter``); ``only``: just those patches."""
    if porter is None:
        raise UserError(
            f"the {alias} series does not apply as-is to {repo}, and this path has no 3-way "
            "porting; nothing was changed",
            hint=f"run `sm120kit apply --branch {alias} --repo {repo} --port`")
    return porter(repo, alias, base, into, from_alias, series=series, dry_run=dry_run,
                  replace=replace, only=only)


@dataclass
class _Plan:
    """What the checks established before anything is applied."""

    target: Target
    variant: Variant
    parsed: list[ParsedPatch]
    base_ref: str
    base_commit: str
    head_commit: str | None
    existing: str | None  # the result branch's commit when it already exists
    into: str
    port_allowed: bool
    kind: ApplyKind
    repo: Path
    alias: str
    porter: Porter | None = None

    def result(self, status: ApplyStatus, commit: str | None, patches: list[PatchOutcome],
               message: str, checked_out: bool = False) -> ApplyResult:
        return ApplyResult(
            status=status, alias=self.alias, variant=self.variant.name, kind=self.kind,
            repo=str(self.repo), base=self.base_ref, base_commit=self.base_commit,
            branch=self.into, commit=commit, checked_out=checked_out, message=message,
            patches=patches,
        )


def _check_clean(repo: Path, paths: list[str] | None) -> None:
    """No uncommitted changes (among ``paths`` when given, else anywhere) and no
    am/rebase/merge in progress (else: UserError)."""
    git_dir = repo / ".git" if (repo / ".git").is_dir() else git_dirs(repo)[0]
    dirty = ge.dirty_paths(repo, paths)
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


def _outcomes(states: list[MarkerState]) -> list[PatchOutcome]:
    return [
        PatchOutcome(
            s.patch.file, s.patch.subject,
            "already-applied" if s.applied else ("upstream" if s.upstream else "not-attempted"),
        )
        for s in states
    ]


def is_ancestor(repo: Path, older: str, newer: str) -> bool:
    return run_git(["merge-base", "--is-ancestor", older, newer], repo,
                   check=False).returncode == 0


def _existing_branch(
    plan: _Plan, states: list[MarkerState], checkout: bool, dry_run: bool, reapply: bool = False
) -> ApplyResult | None:
    """The result branch exists: it carries the series on the current base (check it out if
    asked), or the base moved (say so; None with ``reapply``: apply again), or it is an error."""
    assert plan.existing is not None
    if not is_ancestor(plan.repo, plan.base_commit, plan.existing):
        if reapply:
            return None
        res = plan.result(
            "base-moved", plan.existing, _outcomes(states),
            f"base moved: branch {plan.into} ({plan.existing[:12]}) does not contain "
            f"{plan.base_ref} ({plan.base_commit[:12]}); the series there is on an older base")
        extra = f" --base {plan.base_ref}" if plan.base_ref != plan.target.base_ref else ""
        res.note = (f"re-apply on the new base (replaces {plan.into}): sm120kit apply --branch "
                    f"{plan.alias} --repo {plan.repo}{extra} --reapply; or keep it and pass "
                    "--into NEW")
        return res
    if not all_in(states):
        raise UserError(
            f"branch {plan.into} exists and does not carry the {plan.variant.name} series",
            hint=f"pass --into NEW_BRANCH, or delete it (`git branch -D {plan.into}`)",
        )
    msg = f"already applied: branch {plan.into} carries the series"
    current = run_git(["symbolic-ref", "--quiet", "HEAD"], plan.repo, check=False)
    done = current.stdout.strip() == f"refs/heads/{plan.into}"  # checked out, asked or not
    if checkout and not dry_run and not done:
        ge.ensure_writable(plan.repo, [p for pp in plan.parsed for p in pp.paths()])
        done, note = _checkout(plan.repo, plan.into)
        msg += note
    return plan.result("already-applied", plan.existing, _outcomes(states), msg, done)


def _already_done(
    plan: _Plan, states: dict[str, list[MarkerState]], checkout: bool, dry_run: bool,
    reapply: bool = False,
) -> ApplyResult | None:
    """``already-applied`` / ``not-needed`` from the markers at the branch, HEAD and the base;
    ``base-moved`` when the result branch does not contain the base."""
    if plan.existing:
        done = _existing_branch(plan, states[plan.existing], checkout, dry_run, reapply)
        if done is not None or reapply:
            return done
    head = states.get("HEAD")
    if (plan.head_commit and head and all_in(head) and any(s.applied for s in head)
            and is_ancestor(plan.repo, plan.base_commit, plan.head_commit)):
        return plan.result("already-applied", plan.head_commit, _outcomes(head),
                           "already applied: HEAD carries the series")
    base_states = states[plan.base_commit]
    if all(s.upstream for s in base_states) or (
        all_in(base_states) and not any(s.applied for s in base_states)
    ):
        return plan.result("not-needed", plan.base_commit, _outcomes(base_states),
                           f"not needed: {plan.base_ref} already has DCP support upstream")
    if all_in(base_states):
        return plan.result("already-applied", plan.base_commit, _outcomes(base_states),
                           f"already applied: {plan.base_ref} carries the series")
    return None


def _touched(parsed: list[ParsedPatch]) -> list[str]:
    """Every path the series names that stays inside the tree (the others are refused later)."""
    return sorted({p for pp in parsed for p in (*pp.raw_paths, *pp.paths())
                   if p and not p.startswith("/") and ".." not in p.split("/")})


def _plan(
    series: Series, alias: str, repo: Path, base: str | None, into: str | None,
    from_alias: str | None, port: bool | None, kind: ApplyKind, checkout: bool = False,
) -> _Plan | str:
    """Steps 1-3 of the module doc. A str: the base ref is missing and porting may find it.

    The dirty check looks at the files the series changes (their staged or unstaged edits are
    what the result branch would collide with); with ``checkout`` at the whole tree, which is
    switched to the result."""
    target, variant = select(series, alias, from_alias)
    parsed = load_patches(variant)
    _check_clean(repo, None if checkout else _touched(parsed))
    base_ref = base or target.base_ref or ("HEAD" if from_alias else "")
    if not base_ref:
        raise UserError(f"{alias} has no base ref", hint="pass --base REF")
    port_allowed = port if port is not None else bool(from_alias or target.port_from)
    into = into or f"{DEFAULT_BRANCH_PREFIX}{alias}"
    ids = resolve_many(repo, [f"{base_ref}^{{commit}}", "HEAD^{commit}", f"refs/heads/{into}"])
    base_commit = None if base_ref.startswith("-") else ids[f"{base_ref}^{{commit}}"]
    if base_commit is None:
        if port_allowed and not base:
            return into  # e.g. a fork whose base is a remote branch: the port engine finds it
        raise UserError(
            f"base ref {base_ref} is not in {repo}",
            hint=fetch_hint(repo, base_ref) if not base else "check the name given to --base",
        )
    prefetch(repo, _read_first(variant, parsed, base_commit, ids[f"refs/heads/{into}"]))
    check_safe_paths(repo, base_commit, parsed)
    ge.check_branch_name(repo, into)
    return _Plan(target, variant, parsed, base_ref, base_commit, ids["HEAD^{commit}"],
                 ids[f"refs/heads/{into}"], into, port_allowed, kind, repo, alias)


def _marker_states(plan: _Plan) -> dict[str, list[MarkerState]]:
    revs = [plan.base_commit]
    head_is_base = plan.head_commit == plan.base_commit  # e.g. a fresh clone at the release tag
    if plan.head_commit is not None and not head_is_base:
        revs.append("HEAD")
    if plan.existing:
        revs.append(plan.existing)
    contents = read_revisions(plan.repo, revs, marker_files(plan.variant))
    states = {r: variant_marker_states(plan.variant, contents[r]) for r in revs}
    if head_is_base:  # the same tree: judged once
        states["HEAD"] = states[plan.base_commit]
    return states


def _check_result_markers(plan: _Plan, commit: str, only: list[int] | None = None) -> None:
    """Step 5's re-check: the result commit carries every applied-marker (else: UserError)."""
    files = marker_files(plan.variant)
    after = variant_marker_states(plan.variant, read_revisions(plan.repo, [commit], files)[commit])
    if only:
        after = [s for i, s in enumerate(after, 1) if i in only]
    if not all_in(after):
        missing = [m for s in after for m in s.missing]
        raise UserError(
            f"the series applied but its applied-markers are missing ({missing[0].file}: "
            f"{missing[0].text!r}); the manifest does not match the patches; nothing was changed",
            hint="regenerate patches/manifest.json",
        )


def _read_first(variant: Variant, parsed: list[ParsedPatch], base_commit: str,
                existing: str | None) -> list[str]:
    """The objects the checks read (each a ``<commit>:<path>``), read ahead in one ``git
    cat-file --batch``: the base's trees on the way to every touched path (path safety, the
    temporary index) and the touched files (applied in process), the marker files at the base
    and the result branch, the files fork detection reads first."""
    paths = {p for pp in parsed for p in (*pp.raw_paths, *pp.paths()) if p}
    dirs = {""} | {pre.rsplit("/", 1)[0] if "/" in pre else "" for p in paths for pre in prefixes(p)}
    markers = marker_files(variant)
    return ([f"{base_commit}:{d}" for d in sorted(dirs)]
            + [f"{base_commit}:{p}" for p in sorted(paths)]
            + [f"{rev}:{f}" for rev in (base_commit, existing) if rev for f in markers]
            + [f"{base_commit}:{f}" for f in detect_paths(variant)])


def apply_to_checkout(series: Series, alias: str, repo: Path, **kw: Any) -> CheckoutResult:
    """Apply ``alias``'s variant to the git checkout ``repo`` (see :func:`_apply_to_checkout`);
    the result names the FlashInfer the target needs when its pin is too old (0.25.x). The
    checks' reads of the base share one ``git cat-file --batch`` (:func:`_read_first`)."""
    with read_ahead():
        res = _apply_to_checkout(series, alias, repo, **kw)
    target = series.targets.get(alias)
    if isinstance(res, ApplyResult) and target is not None:
        res.requirement = requirement(target, series)
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
    kind: ApplyKind = "git",
    only: list[int] | None = None,
    reapply: bool = False,
    porter: Porter | None = None,
) -> CheckoutResult:
    """Apply ``alias``'s variant to the git checkout ``repo`` (see the module doc).

    ``only``: apply just these patches (1-based), e.g. the gaps of a fork that already runs DCP.
    ``reapply``: the result branch exists on an older base: apply again and replace it.
    ``porter``: the 3-way porting engine, for when the series does not apply as-is (None: such
    a target is an error). Returns an :class:`ApplyResult`, or the porting engine's :class:`PortResult` when porting
    ran. Raises :class:`UserError` / :class:`ApplyFailed`; on every error path the checkout is
    unchanged.
    """
    repo = Path(repo)
    plan = _plan(series, alias, repo, base, into, from_alias, port, kind, checkout)
    if isinstance(plan, str):
        return _port(porter, series, repo, alias, base, plan, from_alias, dry_run)
    plan.porter = porter
    _check_only(plan, only)
    full = _marker_states(plan)
    states = full if not only else {  # "already applied" judged on the chosen patches alone
        r: [s for i, s in enumerate(st, 1) if i in only] for r, st in full.items()}
    done = _already_done(plan, states, checkout, dry_run, reapply)
    if done is not None:
        return done
    if reapply and plan.existing:
        _check_not_checked_out(plan)
    base_states = full[plan.base_commit]
    if not only:
        fd = detect(repo, plan.base_commit, plan.variant)
        if fd is not None:
            return _fork_has_dcp(plan, base_states, fd)
    todo = [pp for i, (pp, s) in enumerate(zip(plan.parsed, base_states, strict=True), 1)
            if not (s.applied or s.upstream) and (not only or i in only)]
    if checkout:
        ge.ensure_writable(repo, [p for pp in todo for p in pp.paths()])
    fast = apply_fast(repo, plan.base_commit, todo)
    wa = (ge.WorktreeApply(True, plan.base_commit, fast, [pp.name for pp in todo]) if fast
          else ge.apply_patches_in_worktree(repo, plan.base_commit, todo))
    if wa.failure is not None or wa.commit is None:
        # --only: a port of the chosen patches alone, never of the whole series
        return _not_applied(series, plan, wa, base, from_alias, port, dry_run, only=only,
                            replace=reapply)
    _check_result_markers(plan, wa.commit, only)
    applied_names = {pp.name for pp in todo}
    patches = [
        PatchOutcome(
            s.patch.file, s.patch.subject,
            ("would-apply" if dry_run else "applied") if s.patch.file in applied_names
            else ("upstream" if s.upstream else "already-applied" if s.applied
                  else "not-attempted"),
        )
        for s in base_states
    ]
    if dry_run:
        return plan.result("would-apply", None, patches,
                           f"dry run: {len(todo)} patch(es) apply cleanly on {plan.base_ref}; "
                           f"would create branch {plan.into}")
    ge.create_branch(repo, plan.into, wa.commit, f"sm120kit apply {alias} ({plan.variant.name})",
                     old=plan.existing if reapply else None)
    msg = f"applied {len(todo)} patch(es) on {plan.base_ref}: branch {plan.into}"
    if reapply and plan.existing:
        msg += f" (replaced {plan.existing[:12]}, which was on an older base)"
    checked_out = False
    if checkout:
        checked_out, note = _checkout(repo, plan.into)
        msg += note
    return plan.result("applied", wa.commit, patches, msg, checked_out)


def _check_only(plan: _Plan, only: list[int] | None) -> None:
    n = len(plan.variant.patches)
    bad = [i for i in only or [] if not 1 <= i <= n]
    if bad:
        raise UserError(f"--only {bad[0]}: the {plan.variant.name} series has patches 1-{n}",
                        hint="`sm120kit series --branch ALIAS` lists them")


def _check_not_checked_out(plan: _Plan) -> None:
    cur = run_git(["symbolic-ref", "--quiet", "HEAD"], plan.repo, check=False).stdout.strip()
    if cur == f"refs/heads/{plan.into}":
        raise UserError(
            f"--reapply would move {plan.into}, which is checked out in {plan.repo}",
            hint="check out another branch first (e.g. the new base), then re-run; "
            "nothing was changed")


def _fork_has_dcp(plan: _Plan, base_states: list[MarkerState], fd: ForkDcp) -> ApplyResult:
    """The base already runs DCP in this backend its own way: say so (exit 0) and list gaps."""
    gap_files = {g.patch for g in fd.gaps}
    patches = [PatchOutcome(s.patch.file, s.patch.subject,
                            "already-applied" if s.applied else "upstream" if s.upstream
                            else "not-attempted" if s.patch.file in gap_files else "in-fork")
               for s in base_states]
    n = len(fd.gaps)
    msg = (f"already supports DCP: {plan.base_ref} runs DCP in the SM120 sparse-MLA backend "
           f"its own way (nothing applied); " + (f"it lacks {n} thing(s) the series adds"
                                                  if n else "it lacks nothing the series adds"))
    res = plan.result("already-supports-dcp", plan.base_commit, patches, msg)
    res.fork_dcp = fd
    return res


def _not_applied(series: Series, plan: _Plan, wa: ge.WorktreeApply, base: str | None,
                 from_alias: str | None, port: bool | None, dry_run: bool,
                 only: list[int] | None = None, replace: bool = False) -> CheckoutResult:
    """``git am`` failed: port when allowed (``only``: just those patches), else the failure
    (nothing was changed)."""
    if plan.port_allowed:
        return _port(plan.porter, series, plan.repo, plan.alias, base, plan.into, from_alias,
                     dry_run, replace and plan.existing is not None, only)
    assert wa.failure is not None
    if port is not False and wa.failure.reason == "missing-preimage" and plan.target.release:
        # the alias names the release the preimages come from: port from it, no --from needed
        ported = _port(plan.porter, series, plan.repo, plan.alias, plan.base_commit, plan.into,
                       plan.alias, dry_run, replace and plan.existing is not None, only)
        ported.note = (f"git am -3 lacks the preimage blobs of vllm {plan.target.release}: "
                       f"ported from that release (as with --from {plan.alias})")
        return ported
    raise ApplyFailed(
        f"{wa.failure.message()}; nothing was changed",
        _failure_hint(plan.target, wa.failure),
        {"status": "failed", "failure": wa.failure.to_dict(), "alias": plan.alias,
         "variant": plan.variant.name, "kind": plan.kind, "repo": str(plan.repo),
         "base": plan.base_ref, "base_commit": plan.base_commit, "branch": plan.into},
    )


def _checkout(repo: Path, branch: str) -> tuple[bool, str]:
    """Check ``branch`` out when the tree is (still) clean: ``(done, note for the message)``."""
    if ge.dirty_paths(repo):
        return False, " (not checked out: the working tree has uncommitted changes)"
    proc = run_git(["checkout", "-q", branch], repo, check=False)
    if proc.returncode == 0:
        return True, " (checked out)"
    return False, f" (checkout failed: {proc.stderr.strip()[:120]})"

