"""``sm120kit apply --branch FORK_ALIAS``: a fork's branch (fetched into a cached clone, or in
the user's checkout), the series applied as-is by :mod:`sm120kit.patchset.apply` and, when it
does not apply, 3-way ported by :mod:`sm120kit.patchset.port`. Its own module, so that applying
to a release checkout does not import the porting engine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sm120kit.gitrun import rev_parse, run_git
from sm120kit.models.series import Series
from sm120kit.patchset.apply import ApplyFailed, apply_to_checkout
from sm120kit.patchset.port import fork_clone, port_series, resolve_base
from sm120kit.patchset.requirements import requirement
from sm120kit.patchset.targets import DEFAULT_BRANCH_PREFIX

if TYPE_CHECKING:
    from sm120kit.patchset.apply import CheckoutResult


def apply_fork(
    series: Series,
    alias: str,
    root: Path | None,
    *,
    base: str | None = None,
    into: str | None = None,
    checkout: bool = False,
    dry_run: bool = False,
    from_alias: str | None = None,
    port: bool | None = None,
    progress: Callable[[str], None] | None = None,
    only: list[int] | None = None,
    reapply: bool = False,
) -> CheckoutResult:
    """``sm120kit apply --branch FORK_ALIAS``: on ``root`` (a checkout), else on a cached clone.

    The base is ``base``, else the alias' branch (local ref, else fetched). The variant is tried
    with the core engine first (``git am``); when it does not apply, and porting is allowed, it
    is 3-way ported from ``from_alias`` / the alias' ``port_from``.
    """
    target = series.target(alias)
    ours = root is None
    if root is None:
        root = fork_clone(target, progress)
    # our cached clone: the branch as just fetched (its local branch does not move on a fetch)
    tip = rev_parse(root, f"refs/remotes/origin/{target.branch}") if ours and not base else None
    base_sha = tip or resolve_base(root, target, base)
    into = into or f"{DEFAULT_BRANCH_PREFIX}{alias}"
    if ours and reapply:  # our cached clone has the old result checked out: let it move
        run_git(["checkout", "-q", "--detach"], root, check=False)
    res: CheckoutResult
    try:
        res = apply_to_checkout(series, alias, root, base=base_sha, into=into,
                                checkout=checkout or ours, dry_run=dry_run,
                                from_alias=from_alias, port=False, only=only, reapply=reapply,
                                porter=port_series)
    except ApplyFailed:
        if port is False or not (from_alias or target.port_from):
            raise
        res = port_series(root, alias, base_sha, into, from_alias or target.port_from,
                          series=series, dry_run=dry_run, replace=reapply, only=only)
        if res.status == "ported" and (ours or checkout):
            proc = run_git(["checkout", "-q", into], root, check=False)
            res.note = (f"checked out {into} in {root}" if proc.returncode == 0
                        else f"branch {into} created in {root} (checkout failed: "
                        f"{proc.stderr.strip()[:120]})")
        req = requirement(target, series)
        if req is not None and res.status in ("ported", "would-port"):
            res.note = (res.note + "; " if res.note else "") + req.line()
    if target.status == "unverified-here" and res.status in ("ported", "applied"):
        res.note = (res.note + "; " if res.note else "") + (
            f"{alias} is not verified by sm120kit's own tests: run `sm120kit verify --repo {root} "
            f"--branch {alias} --base {base_sha[:12]}` on the result")
    return res
