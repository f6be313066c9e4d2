"""``sm120kit verify``: the patched tree compiles, pyflakes finds nothing new, markers are there.

For every file the variant touches: ``compile()`` the working-tree file; run pyflakes on it and on
the base ref's blob of the same path, and fail on undefined names or unused imports that the base
does not have (messages compared without line numbers, as a multiset); and every applied-marker of
every patch not already upstream must be present.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sm120kit.errors import ExitCode, UserError
from sm120kit.gitrun import read_blobs, rev_parse
from sm120kit.models.series import Series
from sm120kit.patchset.markers import marker_files, read_worktree, variant_marker_states
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
class VerifyResult:
    alias: str
    variant: str
    repo: str
    base: str
    files: list[FileCheck]
    markers: list[MarkerCheck]

    @property
    def ok(self) -> bool:
        return all(f.status != "fail" for f in self.files) and all(
            m.status != "fail" for m in self.markers
        )

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
            f"verify {self.alias} · {self.repo} against {self.base}",
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


def verify_tree(series: Series, alias: str, repo: Path, base: str | None = None) -> VerifyResult:
    target, variant = select(series, alias)
    repo = Path(repo)
    base_ref = base or target.base_ref
    touched = variant.touched_files()
    mfiles = marker_files(variant)
    base_src = _base_blobs(repo, base_ref, list(dict.fromkeys([*touched, *mfiles])))
    checks: list[FileCheck] = []
    for rel in touched:
        path = repo / rel
        try:
            src = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            checks.append(FileCheck(rel, "fail", False, error="file is missing"))
            continue
        except (OSError, UnicodeDecodeError) as exc:
            checks.append(FileCheck(rel, "fail", False, error=str(exc)))
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
    states = variant_marker_states(variant, read_worktree(repo, mfiles))
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
    return VerifyResult(alias, variant.name, str(repo), base_ref, checks, markers)
