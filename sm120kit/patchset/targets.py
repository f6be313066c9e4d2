"""Which tree a command works on, and which alias/variant fits it.

Discovery follows git: ``--repo PATH`` names a checkout (any directory inside it); without it, a
current directory inside a git checkout that contains ``vllm/`` is the target; anywhere else the
embedded default (a release repository built from the PyPI wheel) is used by ``apply``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from sm120kit.errors import UserError
from sm120kit.gitrun import read_blobs, run_git
from sm120kit.models.series import Series, Target, Variant

DEFAULT_BRANCH_PREFIX = "sm120kit/dcp-"
_VERSION_RE = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", re.M)


#: a config line that may make a repository bare, move its work tree or pull in other files
_GIT_CONFIG_ELSEWHERE = re.compile(
    r"^\s*(?:bare\b(?!\s*=\s*false\s*$)|worktree\b|\[\s*include)", re.M | re.I)


def _own_top(path: Path) -> Path | None:
    """``path`` when it is plainly the top of a checkout, as ``git rev-parse --show-toplevel``
    would say without a process: its ``.git`` is a directory with a ``HEAD``, both it and the
    directory belong to this user (git's ``safe.directory`` rule), and its config neither makes
    it bare, nor moves the work tree, nor includes other files. Anything else: None (ask git)."""
    git_dir = path / ".git"
    try:
        uid = os.geteuid()
        if (not (git_dir / "HEAD").is_file() or path.stat().st_uid != uid
                or git_dir.stat().st_uid != uid):
            return None
        config = (git_dir / "config").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return None if _GIT_CONFIG_ELSEWHERE.search(config) else path.resolve()


def checkout_root(path: Path) -> Path | None:
    """Top level of the git checkout containing ``path`` (None outside one, or for a bare repo)."""
    path = Path(path)
    if not path.exists():
        return None
    if path.is_dir() and (own := _own_top(path)) is not None:
        return own
    cwd = path if path.is_dir() else path.parent
    proc = run_git(["rev-parse", "--show-toplevel"], cwd, check=False)
    top = proc.stdout.strip()
    return Path(top) if proc.returncode == 0 and top else None


def is_vllm_checkout(root: Path) -> bool:
    return (Path(root) / "vllm").is_dir()


def resolve_repo(repo: Path | None, cwd: Path | None = None) -> Path | None:
    """The vLLM git checkout to work on, or None when the embedded default applies.

    ``repo`` given: it must be (inside) a git checkout with ``vllm/``, else a UserError.
    """
    if repo is not None:
        p = Path(repo).expanduser()
        if not p.exists():
            raise UserError(f"--repo {repo}: no such directory",
                            hint="pass the path of a vLLM git checkout (or cd into one)")
        root = checkout_root(p)
        if root is None:
            raise UserError(
                f"--repo {repo} is not a git checkout",
                hint="clone vLLM first, or leave out --repo to use the embedded release tree",
            )
        if not is_vllm_checkout(root):
            raise UserError(
                f"{root} is a git checkout without a vllm/ package directory",
                hint="point --repo at a vLLM source checkout",
            )
        return root
    root = checkout_root(Path(cwd or Path.cwd()))
    if root is not None and is_vllm_checkout(root):
        return root
    return None


def require_repo(
    repo: Path | None, command: str, series: Series | None = None, alias: str | None = None
) -> Path:
    """The checkout to inspect; outside one, the embedded default's ``./vllm-X.Y.Z-sm120kit``
    of ``alias`` when it exists."""
    root = resolve_repo(repo)
    if root is None and repo is None and series is not None and alias:
        t = series.targets.get(alias)
        cand = Path.cwd() / f"vllm-{t.release}-sm120kit" if t is not None and t.release else None
        if cand is not None and cand.is_dir():
            root = checkout_root(cand)
    if root is None:
        raise UserError(
            f"`sm120kit {command}` needs a vLLM git checkout: the current directory is not inside one",
            hint="pass --repo PATH (e.g. --repo ./vllm-0.34.0-sm120kit) or cd into the checkout",
        )
    return root


def tree_version(root: Path, rev: str | None = None) -> str | None:
    """vLLM's version from ``vllm/_version.py`` (working tree, or at ``rev``)."""
    for rel in ("vllm/_version.py", "vllm/version.py"):
        if rev is None:
            try:
                text = (root / rel).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
        else:
            blob = read_blobs(root, [f"{rev}:{rel}"]).get(f"{rev}:{rel}")
            if blob is None:
                continue
            text = blob.decode("utf-8", "replace")
        m = _VERSION_RE.search(text)
        if m:
            return m.group(1).split("+")[0]
    return None


def infer_alias(root: Path, series: Series) -> str:
    """The alias for a checkout: its ``sm120kit/dcp-*`` branch, its vLLM version, or a tag."""
    head = run_git(["symbolic-ref", "--quiet", "--short", "HEAD"], root, check=False).stdout.strip()
    if head.startswith(DEFAULT_BRANCH_PREFIX) and head[len(DEFAULT_BRANCH_PREFIX):] in series.targets:
        return head[len(DEFAULT_BRANCH_PREFIX):]
    version = tree_version(root)
    if version:
        alias = series.alias_for_release(version)
        if alias:
            return alias
    tag = run_git(["describe", "--tags", "--abbrev=0", "--match", "v[0-9]*"], root, check=False)
    t = tag.stdout.strip()
    if tag.returncode == 0 and t:
        alias = series.alias_for_release(t[1:])
        if alias:
            return alias
    raise UserError(
        f"cannot tell which vLLM release {root} is" + (f" (version {version})" if version else ""),
        hint="pass --branch ALIAS; `sm120kit targets` lists the aliases",
    )


def select(series: Series, alias: str, from_alias: str | None = None) -> tuple[Target, Variant]:
    """Target and the variant to apply.

    ``from_alias`` (an alias or a variant name) supplies the variant instead of the target's own;
    with it, ``alias`` may also be a name the manifest does not know (a fork branch), which then
    has no base ref of its own (``--base`` or HEAD).
    """
    if from_alias:
        if from_alias in series.targets:
            src = series.targets[from_alias]
            if src.status == "unsupported":
                raise UserError(f"--from {from_alias} is not supported: {src.reason}")
            variant = series.variant(src.variant)
        elif from_alias in series.variants:
            variant = series.variants[from_alias]
        else:
            raise UserError(
                f"--from {from_alias!r} is neither an alias nor a variant",
                hint="aliases: " + ", ".join(sorted(series.targets))
                + "; variants: " + ", ".join(sorted(series.variants)),
            )
        target = series.targets.get(alias) or Target(
            alias=alias, release=None, base_ref="", variant=variant.name,
            status="unverified-here", reason="not in the manifest; applied --from " + from_alias,
        )
        if target.status == "unsupported":
            raise UserError(
                f"{alias} is not supported: {target.reason or 'no reason recorded'}",
                hint="`sm120kit targets` lists the supported aliases",
            )
        return target, variant
    target = series.target(alias)
    if target.status == "unsupported":
        raise UserError(
            f"{alias} is not supported: {target.reason or 'no reason recorded'}",
            hint="`sm120kit targets` lists the supported aliases",
        )
    return target, series.variant(target.variant)


def is_fork(target: Target) -> bool:
    """A fork alias: a git URL and branch instead of a PyPI release."""
    return bool(target.repo and target.branch)


def fetch_hint(root: Path, ref: str) -> str:
    remotes = run_git(["remote"], root, check=False).stdout.split()
    remote = "origin" if "origin" in remotes else (remotes[0] if remotes else None)
    tag = ref[len("refs/tags/"):] if ref.startswith("refs/tags/") else ref
    if remote:
        return f"fetch it: `git fetch {remote} tag {tag}`, or pass --base REF"
    return (
        f"fetch it: `git fetch https://github.com/vllm-project/vllm.git tag {tag}`, "
        "or pass --base REF"
    )


@dataclass
class TargetRow:
    alias: str
    release: str | None
    base_ref: str
    variant: str
    status: str
    verified: str
    reason: str | None
    port_from: str | None
    patches: int
    requires_flashinfer: str | None = None
    requires_note: str | None = None

    @property
    def support(self) -> str:
        """``verified``, or ``verified with FlashInfer >= X`` when the pin is too old."""
        if self.requires_flashinfer and self.status != "unsupported":
            return f"{self.status} with FlashInfer >= {self.requires_flashinfer}"
        return self.status


def target_rows(series: Series) -> list[TargetRow]:
    rows = []
    for alias in sorted(series.targets, key=_alias_key):
        t = series.targets[alias]
        v = series.variants.get(t.variant)
        rows.append(
            TargetRow(
                alias, t.release, t.base_ref, t.variant, t.status, t.verified, t.reason,
                t.port_from, len(v.patches) if v else 0, t.requires_flashinfer, t.requires_note,
            )
        )
    return rows


def _alias_key(alias: str) -> tuple[int, tuple[int, ...], str]:
    m = re.search(r"(\d+(?:\.\d+)+)", alias)
    if not m:
        return (1, (), alias)
    return (0, tuple(int(x) for x in m.group(1).split(".")), alias)
