"""``sm120kit verify``: the patched tree compiles, pyflakes finds nothing new, markers are there,
and the rest of the tree holds up its end.

What is checked is the result branch (``sm120kit/dcp-ALIAS``) when it exists and is not checked
out, else the working tree. For every file the variant touches: ``compile()``; pyflakes on it and
on the base ref's blob of the same path, failing on undefined names or unused imports that the
base does not have (messages compared without line numbers, as a multiset); every name the file
newly imports from the tree resolves in the tree (static, ``ast``; vLLM is never imported); every
applied-marker of every patch not already upstream is present; and where the series sets
``lse_base_on_e``, the layer that merges the DCP ranks consults it (a hard-coded
``is_lse_base_on_e=True`` there fails by file and line).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sm120kit.errors import ExitCode, UserError
from sm120kit.gitrun import read_blobs, rev_parse, run_git
from sm120kit.models.series import Series, Variant
from sm120kit.models.treecheck import (
    MERGE_FUNCS,
    imported_names,
    lse_base_overrides,
    module_defines,
    module_paths,
)
from sm120kit.patchset.forkdcp import ForkDcp, detect
from sm120kit.patchset.markers import marker_files, variant_marker_states
from sm120kit.patchset.render import new_table
from sm120kit.patchset.targets import fetch_hint, select
from sm120kit.report import styled, to_jsonable

#: pyflakes message classes that mean "broken": names that do not resolve, imports left behind
CHECKED = ("UndefinedName", "UndefinedLocal", "UndefinedExport", "UnusedImport")


CheckStatus = Literal["ok", "fail", "skip"]


@dataclass
class FileCheck:
    file: str
    status: CheckStatus
    compiles: bool
    new_messages: list[str] = field(default_factory=list)
    error: str = ""


@dataclass
class MarkerCheck:
    patch: str
    status: CheckStatus  # skip: upstream has it
    missing: list[str] = field(default_factory=list)


@dataclass
class TreeCheck:
    """A whole-tree finding: an import that does not resolve, an attribute that is not read."""

    check: Literal["import", "lse-base"]
    file: str
    line: int
    name: str
    problem: str
    fix: str


@dataclass
class VerifyResult:
    alias: str
    variant: str
    repo: str
    base: str
    files: list[FileCheck]
    markers: list[MarkerCheck]
    tree: list[TreeCheck] = field(default_factory=list)
    checked: str = "working tree"  # or "branch NAME (commit)"
    #: the tree runs DCP in the SM120 backend its own way (markers judged by its gaps)
    fork_dcp: bool = False

    @property
    def ok(self) -> bool:
        return all(f.status != "fail" for f in self.files) and all(
            m.status != "fail" for m in self.markers
        ) and not self.tree

    @property
    def exit_code(self) -> int:
        return ExitCode.OK if self.ok else ExitCode.FAILURE

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = to_jsonable(self)
        d["status"] = "ok" if self.ok else "fail"
        d["exit_code"] = int(self.exit_code)
        return d

    def render(self, console: Any) -> None:
        t = new_table(
            f"verify {self.alias} · {self.repo} ({self.checked}) against {self.base}",
            "file", "status", "compiles", "new pyflakes findings",
        )
        for f in self.files:
            t.add_row(f.file, styled(f.status), "yes" if f.compiles else "[red]no[/red]",
                      f.error or "\n".join(f.new_messages) or "-")
        console.print(t)
        m = new_table("applied markers", "patch", "status", "missing")
        for mc in self.markers:
            m.add_row(mc.patch, styled(mc.status), "\n".join(mc.missing) or "-")
        console.print(m)
        for tc in self.tree:
            console.print(f"fail: {tc.file}:{tc.line}: {tc.problem}\n  fix: {tc.fix}",
                          markup=False, soft_wrap=True)
        console.print(f"verify: {styled('ok' if self.ok else 'fail')}")


def pyflakes_messages(source: str, filename: str) -> Counter[str]:
    """pyflakes findings of the checked kinds, without line numbers (a multiset)."""
    import ast

    from pyflakes import checker

    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError:
        return Counter()
    w = checker.Checker(tree, filename=filename)
    found: Counter[str] = Counter()
    for msg in w.messages:
        kind = type(msg).__name__
        if kind in CHECKED:
            found[f"{kind}: {msg.message % msg.message_args}"] += 1
    return found


def _base_blobs(repo: Path, base: str, files: list[str]) -> dict[str, str | None]:
    """Base-ref contents of ``files`` (one ``git cat-file --batch``; None: not in the base)."""
    commit = rev_parse(repo, base)
    if commit is None:
        raise UserError(f"base ref {base} is not in {repo}", hint=fetch_hint(repo, base))
    blobs = read_blobs(repo, [f"{commit}:{f}" for f in files])
    return {
        f: (None if (b := blobs.get(f"{commit}:{f}")) is None else b.decode("utf-8", "replace"))
        for f in files
    }


def _checked_rev(repo: Path, alias: str) -> tuple[str | None, str]:
    """The result branch's commit when it exists and is not checked out (None: the working
    tree), and how to name what is checked."""
    branch = f"sm120kit/dcp-{alias}"
    commit = rev_parse(repo, f"refs/heads/{branch}")
    if commit is None:
        return None, "working tree"
    cur = run_git(["symbolic-ref", "--quiet", "HEAD"], repo, check=False).stdout.strip()
    if cur == f"refs/heads/{branch}":
        return None, f"working tree of {branch}"
    return commit, f"branch {branch} ({commit[:12]})"


def _reader(repo: Path, rev: str | None) -> Callable[[list[str]], dict[str, str | None]]:
    def read(paths: list[str]) -> dict[str, str | None]:
        if rev is not None:
            blobs = read_blobs(repo, [f"{rev}:{p}" for p in paths])
            return {p: (None if (b := blobs.get(f"{rev}:{p}")) is None
                        else b.decode("utf-8", "replace")) for p in paths}
        out: dict[str, str | None] = {}
        for p in paths:
            try:
                out[p] = (repo / p).read_text(encoding="utf-8", errors="replace")
            except OSError:
                out[p] = None
        return out
    return read


def verify_tree(series: Series, alias: str, repo: Path, base: str | None = None) -> VerifyResult:
    target, variant = select(series, alias)
    repo = Path(repo)
    base_ref = base or target.base_ref
    touched = variant.touched_files()
    mfiles = marker_files(variant)
    base_src = _base_blobs(repo, base_ref, list(dict.fromkeys([*touched, *mfiles])))
    rev, checked = _checked_rev(repo, alias)
    read = _reader(repo, rev)
    current = read(list(dict.fromkeys([*touched, *mfiles])))
    checks: list[FileCheck] = []
    for rel in touched:
        path = repo / rel
        src = current.get(rel)
        if src is None:
            checks.append(FileCheck(rel, "fail", False, error="file is missing"))
            continue
        if not rel.endswith(".py"):
            checks.append(FileCheck(rel, "skip", True, error="not Python"))
            continue
        try:
            compile(src, str(path), "exec", dont_inherit=True)
        except SyntaxError as exc:
            checks.append(FileCheck(rel, "fail", False, error=f"line {exc.lineno}: {exc.msg}"))
            continue
        new = pyflakes_messages(src, rel) - pyflakes_messages(base_src.get(rel) or "", rel)
        msgs = sorted(new.elements())
        checks.append(FileCheck(rel, "fail" if msgs else "ok", True, msgs))
    states = variant_marker_states(variant, {f: current.get(f) for f in mfiles})
    # "upstream" is judged on the base: the patched code itself may contain upstream's markers
    upstream = {s.patch.file for s in variant_marker_states(variant, base_src) if s.upstream}
    markers = [
        MarkerCheck(
            s.patch.file,
            "skip" if s.patch.file in upstream and not s.applied else ("ok" if s.applied else "fail"),
            [f"{m.file}: {m.describe()}" for m in s.missing] if s.patch.file not in upstream else [],
        )
        for s in states
    ]
    fork = detect(repo, rev, variant)
    if fork is not None:
        markers = _fork_markers(markers, fork)
    tree = _import_checks(current, base_src, touched, read, target.release)
    tree += _lse_base_checks(repo, rev, current, touched, read)
    tree += _lse_value_checks(variant, current)
    return VerifyResult(alias, variant.name, str(repo), base_ref, checks, markers, tree, checked,
                        fork is not None)


def _fork_markers(markers: list[MarkerCheck], fork: ForkDcp) -> list[MarkerCheck]:
    """A tree that runs DCP its own way: a missing marker fails only where the tree still lacks
    a contract of that patch (named, with its fix); the rest the fork does its own way."""
    gaps: dict[str, list[str]] = {}
    for g in fork.gaps:
        gaps.setdefault(g.patch, []).append(f"{g.name} (fix: {g.fix})")
    out = []
    for m in markers:
        if m.status == "ok":
            out.append(m)
        elif m.patch in gaps:
            out.append(MarkerCheck(m.patch, "fail", gaps[m.patch]))
        else:
            out.append(MarkerCheck(m.patch, "skip", ["the tree does this its own way"]))
    return out


def _import_checks(current: dict[str, str | None], base_src: dict[str, str | None],
                   touched: list[str], read: Callable[[list[str]], dict[str, str | None]],
                   release: str | None) -> list[TreeCheck]:
    """Names the patched files import from the tree, beyond what their base versions import,
    that the tree does not define."""
    refs = []
    for rel in touched:
        src = current.get(rel)
        if not rel.endswith(".py") or src is None:
            continue
        before = {(r.module, r.name) for r in imported_names(rel, base_src.get(rel) or "")}
        refs += [(rel, r) for r in imported_names(rel, src) if (r.module, r.name) not in before]
    if not refs:
        return []
    paths = sorted({p for _, r in refs for p in (*module_paths(r.module),
                                                   *module_paths(f"{r.module}.{r.name}"))})
    texts = read(paths)
    out: list[TreeCheck] = []
    for rel, r in refs:
        mod_py, mod_init = module_paths(r.module)
        mod_text = texts.get(mod_py) or texts.get(mod_init)
        if any(texts.get(p) is not None for p in module_paths(f"{r.module}.{r.name}")):
            continue  # a submodule
        where = mod_py if texts.get(mod_py) is not None else mod_init
        if mod_text is None:
            out.append(TreeCheck("import", rel, r.line, r.name,
                                 f"imports {r.name} from {r.module}, which is not in the tree",
                                 f"add {mod_py} (as in vLLM {release or 'the release'}) or "
                                 "change the import"))
            continue
        names = module_defines(mod_text)
        if names is not None and r.name not in names:
            out.append(TreeCheck(
                "import", rel, r.line, r.name,
                f"imports {r.name} from {r.module}, but {where} does not define it",
                f"bring {r.name} into {where} (vLLM {release or 'the release'} has it; the "
                "series calls it), or keep the fork's own helper and port the patch to it"))
    return out


def _lse_base_checks(repo: Path, rev: str | None, current: dict[str, str | None],
                     touched: list[str], read: Callable[[list[str]], dict[str, str | None]],
                     ) -> list[TreeCheck]:
    """Where the patched files set ``lse_base_on_e``, the merging layer must read it."""
    setter = next((f for f in touched if f.endswith(".py") and current.get(f)
                   and "lse_base_on_e =" in (current.get(f) or "")), None)
    if setter is None:
        return []
    args = ["grep", "-l", "-E", "|".join(("is_lse_base_on_e", *MERGE_FUNCS))]
    args += [rev, "--", "vllm"] if rev else ["--", "vllm"]
    proc = run_git(args, repo, check=False)
    files = [ln.split(":", 1)[1] if rev else ln for ln in proc.stdout.splitlines() if ln]
    texts = read(files)
    out: list[TreeCheck] = []
    for f in files:
        text = texts.get(f) or ""
        if "forward_mqa" not in text:
            continue  # not the layer that runs the impl and merges its output
        for o in lse_base_overrides(text):
            out.append(TreeCheck(
                "lse-base", f, o.line, "lse_base_on_e",
                f"{o.call}({o.detail}) ignores the impl's lse_base_on_e = False that the series "
                f"sets in {setter}: the DCP merge treats FlashInfer's base-2 LSE as base e",
                "pass is_lse_base_on_e=self.impl.lse_base_on_e there (as vLLM 0.25+ does)"))
    return out


def _lse_value_checks(variant: Variant, current: dict[str, str | None]) -> list[TreeCheck]:
    """The LSE base the series declares (the manifest's ``lse_base_on_e`` class attribute) is
    still what the impl says: flipped back or dropped, the DCP merge reads the kernels' base-2
    LSE as base e and decodes fluent, wrong text with no error."""
    out: list[TreeCheck] = []
    for patch in variant.patches:
        for m in patch.upstream_markers:
            spec = dict(m.spec)
            if m.kind != "class_attr" or spec.get("name") != "lse_base_on_e":
                continue
            text = current.get(m.file)
            if text is None or m.holds(text):
                continue
            line = next((i for i, ln in enumerate(text.splitlines(), 1)
                         if "lse_base_on_e" in ln and "=" in ln), 0)
            out.append(TreeCheck(
                "lse-base", m.file, line, "lse_base_on_e",
                f"{spec.get('cls')} does not set lse_base_on_e = {spec.get('value')!r}: the "
                "SM120 kernels return a base-2 LSE, and the DCP merge would read it as base e",
                f"set `lse_base_on_e = {spec.get('value')!r}` in {spec.get('cls')} (patch "
                f"{patch.file.split('-', 1)[0]})"))
    return out
