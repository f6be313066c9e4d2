"""Definition-level 3-way merge of Python sources, for ports where the line merge conflicts.

``git merge-file`` conflicts whenever the fork's change and the patch's change touch the same or
adjacent lines, even when they sit in different definitions (a helper appended right after the
method a patch edits, an import added next to the one a patch extends). This module merges by
definition instead:

* each file (base = the release file, ours = the fork's, theirs = the patched release file) is
  cut into lossless slices, one per module-level statement (its leading blank lines and comments
  included), plus a header (text before the first statement) and a trailer; a class is cut again
  into its header line(s) and one slice per class-level statement. Joining the slices gives the
  file back byte for byte (checked), so comments and formatting are kept exactly: this is the
  concrete syntax tree the merge needs, built from the stdlib ``ast`` positions;
* slices are matched by qualified name (``Class.method``; imports by module, assignments by
  target, other statements by their first line; repeats numbered);
* changed only by the patch → the patched slice; only by the fork → the fork's; by both → a class
  is merged member by member, an import as a set of names, anything else by a line 3-way merge of
  that slice alone; additions of either side keep their relative order (the fork's order is the
  backbone, a patch addition goes right after the slice that precedes it in the patched file);
* the result is verified, not assumed: it compiles, carries every marker the patched side
  carries, and keeps every definition the fork added.

When a slice still conflicts, the outcome names the definition and gives it three ways.
"""

from __future__ import annotations

import ast
import difflib
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sm120kit.gitrun import run_git

#: what a merge did: clean line merge, definition-level merge, or a conflict
Method = Literal["line", "definition", "conflict"]


@dataclass
class Item:
    """One lossless slice of a scope: a statement with its leading blank lines and comments."""

    key: str
    kind: str  # header | trailer | def | class | import | assign | docstring | stmt
    text: str
    line: int  # 1-based first line of the slice in its file
    node: ast.stmt | None = None
    head: str | None = None  # a class: its decorators and ``class X(...):`` line(s)
    body: list[Item] | None = None  # a class: its members
    lead: str = ""  # the blank and comment lines before the statement (part of ``text``)

    @property
    def code(self) -> str:
        return self.text[len(self.lead):]


@dataclass
class DefConflict:
    """A definition changed by both sides whose own line merge still conflicts."""

    definition: str  # qualified name, e.g. FlashInferMLASparseSM120Impl.forward_mqa
    line: int  # its first line in the fork's file
    ours: str
    base: str
    theirs: str
    reason: str

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


@dataclass
class MergeOutcome:
    """``merged`` is None when ``conflicts`` or ``problems`` are not empty."""

    merged: bytes | None
    method: Method
    conflicts: list[DefConflict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    line_conflicts: int = 0  # conflict blocks of the plain line merge
    line_merged: str = ""  # the line merge's diff3 output (for reporting its conflict blocks)


# --------------------------------------------------------------------------------------------
# cutting a file into slices


def _start(node: ast.stmt) -> int:
    decos = getattr(node, "decorator_list", None) or []
    return min([node.lineno, *(d.lineno for d in decos)])


def _key(node: ast.stmt, first: str, is_first: bool) -> tuple[str, str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return node.name, "def"
    if isinstance(node, ast.ClassDef):
        return node.name, "class"
    if isinstance(node, ast.ImportFrom):
        return f"from {'.' * node.level}{node.module or ''}", "import"
    if isinstance(node, ast.Import):
        return "import " + ",".join(a.name for a in node.names), "import"
    if isinstance(node, ast.Assign):
        return "=" + ",".join(ast.unparse(t) for t in node.targets), "assign"
    if isinstance(node, ast.AnnAssign):
        return "=" + ast.unparse(node.target), "assign"
    if (is_first and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)):
        return "<docstring>", "docstring"
    return f"{type(node).__name__.lower()}:{first.strip()}", "stmt"


def _slices(lines: list[str], stmts: list[ast.stmt], pos: int) -> tuple[list[Item], int]:
    """Slices of ``stmts`` starting at line index ``pos``; returns them and the index after."""
    items: list[Item] = []
    seen: Counter[str] = Counter()
    for i, node in enumerate(stmts):
        end = node.end_lineno or node.lineno
        if end <= pos and items:  # `a = 1; b = 2`: the second shares the first one's line
            continue
        key, kind = _key(node, lines[node.lineno - 1], i == 0)
        seen[key] += 1
        if seen[key] > 1:
            key = f"{key}#{seen[key]}"
        first = max(pos, _start(node) - 1)
        item = Item(key, kind, "".join(lines[pos:end]), pos + 1, node,
                    lead="".join(lines[pos:first]))
        if isinstance(node, ast.ClassDef):
            _split_class(item, lines, pos, end)
        items.append(item)
        pos = end
    return items, pos


def _split_class(item: Item, lines: list[str], begin: int, end: int) -> None:
    node = item.node
    assert isinstance(node, ast.ClassDef)
    first = _start(node.body[0]) - 1
    if first <= node.lineno - 1:  # `class X: pass` on one line: keep it whole
        return
    body, stop = _slices(lines, node.body, first)
    if stop != end:
        return
    item.head = "".join(lines[begin:first])
    item.body = body


def cut(text: str) -> list[Item]:
    """The slices of a module (raises ``SyntaxError``); ``"".join`` of them is ``text``."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    if not tree.body:
        return [Item("<header>", "header", text, 1)]
    head_end = _start(tree.body[0]) - 1
    items, pos = _slices(lines, tree.body, head_end)
    out = [Item("<header>", "header", "".join(lines[:head_end]), 1), *items,
           Item("<trailer>", "trailer", "".join(lines[pos:]), pos + 1)]
    if "".join(i.text for i in out) != text:  # never merge what cannot be rebuilt exactly
        raise SyntaxError("slices do not rebuild the file")
    return out


def definitions(items: list[Item], scope: str = "") -> set[str]:
    """Qualified names of the module- and class-level definitions and assignments."""
    out: set[str] = set()
    for it in items:
        if it.kind in ("def", "class", "assign"):
            name = f"{scope}{it.key}"
            out.add(name)
            if it.body is not None:
                out |= definitions(it.body, f"{name}.")
    return out


def fork_only_missing(base: bytes | None, ours: bytes | None, result: bytes | None) -> list[str]:
    """Definitions the fork added (in ``ours``, not in ``base``) that ``result`` lacks."""
    if base is None or ours is None or result is None:
        return []
    try:
        b, o, r = (definitions(cut(x.decode("utf-8"))) for x in (base, ours, result))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    return sorted((o - b) - r)


# --------------------------------------------------------------------------------------------
# line merges


def line_merge(ours: str, base: str, theirs: str,
               labels: tuple[str, str, str] = ("ours", "base", "theirs")) -> tuple[str, int]:
    """``git merge-file -p --diff3``: (merged text, number of conflict blocks)."""
    with tempfile.TemporaryDirectory(prefix="sm120kit-merge-") as tmp:
        t = Path(tmp)
        for name, text in (("ours", ours), ("base", base), ("theirs", theirs)):
            (t / name).write_text(text, encoding="utf-8")
        proc = run_git(["merge-file", "-p", "--diff3", "-L", labels[0], "-L", labels[1],
                        "-L", labels[2], "ours", "base", "theirs"], t, check=False, ceiling=True)
    if proc.returncode < 0 or proc.returncode > 127:
        raise RuntimeError(f"git merge-file failed: {proc.stderr[:300]}")
    return proc.stdout, proc.returncode


def _import_names(node: ast.stmt | None) -> list[str]:
    if not isinstance(node, ast.Import | ast.ImportFrom):
        return []
    return [a.name + (f" as {a.asname}" if a.asname else "") for a in node.names]


def _set_merge_import(b: Item | None, o: Item, t: Item) -> str | None:
    """A ``from M import ...`` changed by both: the union of the names, in the fork's layout."""
    if not (isinstance(o.node, ast.ImportFrom) and isinstance(t.node, ast.ImportFrom)):
        return None
    base = set(_import_names(b.node if b else None))
    ours, theirs = _import_names(o.node), _import_names(t.node)
    removed = base - set(theirs)
    names = [n for n in ours if n not in removed]
    names += [n for n in theirs if n not in base and n not in names]
    stmt_start = o.node.lineno - o.line  # leading lines of the fork's slice stay
    lead = "".join(o.text.splitlines(keepends=True)[:stmt_start])
    mod = "." * o.node.level + (o.node.module or "")
    if "(" in o.text:
        return lead + f"from {mod} import (\n" + "".join(f"    {n},\n" for n in names) + ")\n"
    return lead + f"from {mod} import {', '.join(names)}\n"


# --------------------------------------------------------------------------------------------
# the definition-level merge


@dataclass
class _Ctx:
    conflicts: list[DefConflict] = field(default_factory=list)
    defs_merged: int = 0


def _conflict(ctx: _Ctx, qual: str, b: Item | None, o: Item | None, t: Item | None,
              reason: str) -> None:
    ctx.conflicts.append(DefConflict(
        qual, o.line if o else 0, o.text if o else "(absent)", b.text if b else "(absent)",
        t.text if t else "(absent)", reason))


def _merge_both(b: Item | None, o: Item, t: Item, qual: str, ctx: _Ctx) -> str:
    """A slice both sides changed (or both added)."""
    if b is not None and o.body is not None and t.body is not None and b.body is not None:
        assert o.head is not None and t.head is not None and b.head is not None
        head, n = line_merge(o.head, b.head, t.head)
        if n:
            _conflict(ctx, qual, b, o, t, "both sides change the class statement")
            return o.text
        return head + "".join(_merge_scope(b.body, o.body, t.body, f"{qual}.", ctx))
    merged, n = line_merge(o.text, b.text if b else "", t.text)
    if n == 0:
        ctx.defs_merged += 1
        return merged
    if o.kind == "import" and t.kind == "import":
        got = _set_merge_import(b, o, t)
        if got is not None:
            return got
    _conflict(ctx, qual, b, o, t, "both sides change the same lines of this definition"
              if b is not None else "both sides add it, differently")
    return o.text


def _pick(b: str, o: str, t: str) -> str | None:
    """The 3-way choice for one string: the side that changed it (None: both, differently)."""
    if o == b:
        return t
    return o if t in (b, o) else None


def _decide(b: Item | None, o: Item, t: Item | None, qual: str, ctx: _Ctx) -> str | None:
    """The merged text of one fork slice (None: dropped). The leading comments and the
    statement are chosen separately, so a comment the fork adds above a definition the patch
    changes (or moves away from one the patch removes) is not a conflict."""
    if b is None:
        if t is None or t.code == o.code:
            return o.text  # added by the fork (or by both, the same)
        return _merge_both(None, o, t, qual, ctx)
    if t is None:  # the patch removed it
        if o.code == b.code:
            return o.lead if o.lead != b.lead else None
        _conflict(ctx, qual, b, o, t, "the patch removes what the fork changed")
        return o.text
    whole = _pick(b.text, o.text, t.text)
    if whole is not None:
        return whole
    lead, code = _pick(b.lead, o.lead, t.lead), _pick(b.code, o.code, t.code)
    if lead is not None and code is not None:
        return lead + code
    return _merge_both(b, o, t, qual, ctx)


def _rekey(base: list[Item], side: list[Item], tag: str) -> None:
    """Repeated keys (two ``from M import`` of one module, two ``if TYPE_CHECKING:``) are
    numbered in order; a side that inserts one above the others would shift the numbers. Match
    them to the base's by identical statement first, then by similarity; the rest are additions."""
    fams: dict[str, list[Item]] = {}
    for it in base:
        fams.setdefault(it.key.split("#")[0], []).append(it)
    mine: dict[str, list[Item]] = {}
    for it in side:
        mine.setdefault(it.key.split("#")[0], []).append(it)
    for fam, items in mine.items():
        free = list(fams.get(fam, []))
        if len(items) == 1 and len(free) <= 1:
            continue
        rest = []
        for it in items:
            hit = next((b for b in free if b.code == it.code), None)
            if hit is None:
                rest.append(it)
            else:
                it.key = hit.key
                free.remove(hit)
        for hit in free:  # a changed one: the most similar statement
            if not rest:
                break
            best = max(rest, key=lambda it, h=hit: difflib.SequenceMatcher(  # type: ignore[misc]
                None, h.code, it.code, autojunk=False).ratio())
            best.key = hit.key
            rest.remove(best)
        for n, it in enumerate(rest):
            it.key = f"{fam}+{tag}{n}"


def _merge_scope(base: list[Item], ours: list[Item], theirs: list[Item], scope: str,
                 ctx: _Ctx) -> list[str]:
    _rekey(base, ours, "ours")
    _rekey(base, theirs, "theirs")
    bk = {i.key: i for i in base}
    tk = {i.key: i for i in theirs}
    ok = {i.key for i in ours}
    out: list[tuple[str, str]] = []
    for o in ours:  # the fork's order is the backbone
        text = _decide(bk.get(o.key), o, tk.get(o.key), scope + o.key, ctx)
        if text is not None:
            out.append((o.key, text))
    for k, t in tk.items():
        if k in bk and k not in ok and t.text != bk[k].text:
            _conflict(ctx, scope + k, bk[k], None, t, "the patch changes what the fork removed")
    tkeys = [i.key for i in theirs]
    for idx, t in enumerate(theirs):  # the patch's additions, after their predecessor
        if t.key in bk or t.key in ok:
            continue
        where = {k: n for n, (k, _) in enumerate(out)}
        pos = next((where[k] + 1 for k in reversed(tkeys[:idx]) if k in where), None)
        if pos is None:
            pos = next((where[k] for k in tkeys[idx + 1:] if k in where), len(out))
        out.insert(pos, (t.key, t.text))
    return [text for _, text in out]


def definition_merge(ours: str, base: str, theirs: str) -> tuple[str | None, list[DefConflict], int]:
    """(merged text or None, conflicts, slices merged line by line); raises ``SyntaxError``."""
    b, o, t = cut(base), cut(ours), cut(theirs)
    ctx = _Ctx()
    merged = "".join(_merge_scope(b, o, t, "", ctx))
    return (None if ctx.conflicts else merged), ctx.conflicts, ctx.defs_merged


# --------------------------------------------------------------------------------------------
# verification and the entry point


def check_result(path: str, base: str, ours: str, theirs: str, merged: str,
                 markers: list[str]) -> list[str]:
    """Problems of a merged file: syntax, markers the patched side has, fork-only definitions."""
    problems: list[str] = []
    if path.endswith(".py"):
        try:
            compile(merged, path, "exec", dont_inherit=True)
        except SyntaxError as exc:
            return [f"{path}:{exc.lineno}: merged file does not compile: {exc.msg}"]
    for m in markers:
        if m in theirs and m not in merged:
            problems.append(f"{path}: marker {m!r} lost by the merge")
    if path.endswith(".py"):
        for name in fork_only_missing(base.encode(), ours.encode(), merged.encode()):
            problems.append(f"{path}: the fork's definition {name} lost by the merge")
    return problems


def merge_file(ours: bytes, base: bytes, theirs: bytes, *, path: str,
               labels: tuple[str, str, str] = ("ours", "base", "theirs"),
               markers: list[str] | None = None) -> MergeOutcome:
    """Line 3-way merge; where it conflicts (or its result fails the checks) and ``path`` is
    Python, the definition-level merge. Every returned ``merged`` passed :func:`check_result`."""
    o, b, t = (x.decode("utf-8", "surrogateescape") for x in (ours, base, theirs))
    markers = markers or []
    text, n = line_merge(o, b, t, labels)
    if n == 0:
        problems = check_result(path, b, o, t, text, markers)
        if not problems:
            return MergeOutcome(text.encode("utf-8", "surrogateescape"), "line")
    if not path.endswith(".py"):
        return MergeOutcome(None, "conflict", line_conflicts=n, line_merged=text,
                            problems=[] if n else check_result(path, b, o, t, text, markers))
    try:
        merged, conflicts, _ = definition_merge(o, b, t)
    except (SyntaxError, ValueError):
        return MergeOutcome(None, "conflict", line_conflicts=n, line_merged=text)
    if merged is None:
        return MergeOutcome(None, "conflict", conflicts, line_conflicts=n, line_merged=text)
    problems = check_result(path, b, o, t, merged, markers)
    if problems:
        return MergeOutcome(None, "conflict", problems=problems, line_conflicts=n,
                            line_merged=text)
    return MergeOutcome(merged.encode("utf-8", "surrogateescape"), "definition", line_conflicts=n)
