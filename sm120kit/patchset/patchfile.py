"""Parse ``git format-patch`` files: subject, touched paths, hunks; refuse unsafe paths.

Two readers on purpose: the raw git extended headers (``diff --git``, ``rename to``, ``copy to``,
``new file mode``...) are scanned directly so that a hostile patch cannot hide a path from the
safety check behind something a diff library skips, and ``unidiff`` gives the hunks used to name
the hunk that failed.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path

from sm120kit.errors import UserError

_SUBJECT_RE = re.compile(r"^Subject:\s*(.*)$")
_PATCH_PREFIX_RE = re.compile(r"^\[PATCH[^\]]*\]\s*")
_DIFF_GIT_RE = re.compile(r"^diff --git (\S+) (\S+)$")
_PATH_HEADERS = ("rename from ", "rename to ", "copy from ", "copy to ", "--- ", "+++ ")


@dataclass(frozen=True)
class Hunk:
    number: int  # 1-based within its file
    source_start: int
    source_length: int
    target_start: int
    target_length: int
    section: str

    def header(self) -> str:
        tail = f" {self.section}" if self.section else ""
        return (
            f"@@ -{self.source_start},{self.source_length} "
            f"+{self.target_start},{self.target_length} @@{tail}"
        )

    def describe(self) -> str:
        return f"hunk #{self.number} ({self.header()})"


@dataclass(frozen=True)
class FileChange:
    path: str  # the path after the patch (target); for deletions the source path
    source: str | None  # path before, None for a new file
    hunks: tuple[Hunk, ...] = ()

    def hunk_at(self, source_line: int) -> Hunk | None:
        for h in self.hunks:
            if h.source_start == source_line:
                return h
        for h in self.hunks:
            if h.source_start <= source_line < h.source_start + max(h.source_length, 1):
                return h
        return None


@dataclass(frozen=True)
class ParsedPatch:
    path: Path
    subject: str
    files: tuple[FileChange, ...]
    raw_paths: tuple[str, ...] = field(default=())  # every path named in a git header
    symlink_paths: tuple[str, ...] = field(default=())  # paths given mode 120000

    @property
    def name(self) -> str:
        return self.path.name

    def paths(self) -> list[str]:
        """Every repo path the patch reads or writes (sources and targets)."""
        seen: dict[str, None] = {}
        for f in self.files:
            if f.source:
                seen.setdefault(f.source, None)
            seen.setdefault(f.path, None)
        return list(seen)

    def change_for(self, path: str) -> FileChange | None:
        for f in self.files:
            if f.path == path or f.source == path:
                return f
        return None


def _unquote(p: str) -> str:
    if len(p) >= 2 and p.startswith('"') and p.endswith('"'):
        raw = p[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
        return raw.encode("latin-1", "replace").decode("utf-8", "replace")
    return p


def _strip_prefix(p: str) -> str | None:
    if p == "/dev/null":
        return None
    p = _unquote(p)
    if p[:2] in ("a/", "b/"):
        return p[2:]
    return p


def _subject(text: str) -> str:
    lines = text.splitlines()
    for i, line in enumerate(lines[:60]):
        m = _SUBJECT_RE.match(line)
        if m:
            subj = m.group(1)
            j = i + 1
            while j < len(lines) and lines[j][:1] in (" ", "\t"):  # folded header
                subj += " " + lines[j].strip()
                j += 1
            if "=?" in subj:  # an RFC 2047 encoded word (email.header: ~5 ms of imports)
                import email.header

                try:
                    subj = str(email.header.make_header(email.header.decode_header(subj)))
                except Exception:  # noqa: BLE001 - keep the raw subject
                    pass
            return _PATCH_PREFIX_RE.sub("", subj).strip()
    return ""


_HUNK_RE = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


class _HunkBody:
    """Counts the lines left in the current hunk (from its ``@@ -a,b +c,d @@`` line)."""

    def __init__(self) -> None:
        self.old_left = self.new_left = 0

    def start(self, line: str) -> bool:
        """True when ``line`` opens a hunk (and starts counting its body)."""
        h = _HUNK_RE.match(line)
        if h:
            self.old_left = int(h.group(1)) if h.group(1) is not None else 1
            self.new_left = int(h.group(2)) if h.group(2) is not None else 1
        return h is not None

    def takes(self, line: str) -> bool:
        """True when ``line`` belongs to the body of the open hunk (then it is counted)."""
        if self.old_left <= 0 and self.new_left <= 0:
            return False
        tag = line[:1]
        if tag in (" ", ""):
            self.old_left -= 1
            self.new_left -= 1
        elif tag == "-":
            self.old_left -= 1
        elif tag == "+":
            self.new_left -= 1
        elif tag != "\\":
            self.old_left = self.new_left = 0
            return False
        return True


def _path_in_header(line: str) -> tuple[bool, str | None]:
    """(is a path header, its path) for ``rename/copy from/to`` and ``---``/``+++`` lines."""
    for head in _PATH_HEADERS:
        if line.startswith(head):
            rest = line[len(head):].split("\t")[0]
            return True, _strip_prefix(rest) if head in ("--- ", "+++ ") else _unquote(rest)
    return False, None


def _header_paths(text: str) -> tuple[list[str], list[str]]:
    """All paths in git's extended headers, and those created as symlinks.

    Hunk bodies are skipped by counting their lines, so a removed line that happens to read
    ``-- x`` is not taken for a ``--- x`` header.
    """
    paths: list[str] = []
    symlinks: list[str] = []
    current: str | None = None
    hunk = _HunkBody()
    for line in text.splitlines():
        if hunk.takes(line):
            continue
        m = _DIFF_GIT_RE.match(line)
        if m:
            paths += [p for p in map(_strip_prefix, m.groups()) if p is not None]
            current = _strip_prefix(m.group(2))
            continue
        if hunk.start(line) or current is None:
            continue  # a hunk opens; or the e-mail header and commit message
        if line.startswith("diff ") and not line.startswith("diff --git"):
            raise ValueError(f"unsupported diff header: {line[:80]}")
        found, p = _path_in_header(line)
        if found and p is not None:
            paths.append(p)
        if line.startswith(("new file mode 120000", "new mode 120000")) and current:
            symlinks.append(current)
    return paths, symlinks


def parse_patch(path: Path) -> ParsedPatch:
    """Parse one patch file (format-patch output)."""
    import unidiff

    try:
        text = Path(path).read_text(encoding="utf-8", errors="surrogateescape")
    except OSError as exc:
        raise UserError(f"cannot read patch {path}: {exc}") from exc
    try:
        raw_paths, symlinks = _header_paths(text)
        ps = unidiff.PatchSet(text)
    except (ValueError, unidiff.UnidiffParseError) as exc:
        raise UserError(f"patch {Path(path).name} cannot be parsed: {exc}") from exc
    files: list[FileChange] = []
    for pf in ps:
        src = None if pf.is_added_file else _strip_prefix(pf.source_file)
        tgt = _strip_prefix(pf.target_file) if not pf.is_removed_file else src
        if tgt is None:
            tgt = _strip_prefix(pf.path) or pf.path
        hunks = tuple(
            Hunk(
                number=i + 1,
                source_start=h.source_start,
                source_length=h.source_length,
                target_start=h.target_start,
                target_length=h.target_length,
                section=(h.section_header or "").strip(),
            )
            for i, h in enumerate(pf)
        )
        files.append(FileChange(path=tgt, source=src, hunks=hunks))
    if not files and not raw_paths:
        raise UserError(f"patch {Path(path).name} contains no diff")
    return ParsedPatch(
        path=Path(path),
        subject=_subject(text),
        files=tuple(files),
        raw_paths=tuple(dict.fromkeys(raw_paths)),
        symlink_paths=tuple(symlinks),
    )


def unsafe_reason(p: str) -> str | None:
    """Why a repo-relative path from a patch is not allowed, or None when it is fine."""
    if not p:
        return "empty path"
    if "\0" in p or "\\" in p:
        return "path contains a NUL or backslash"
    if p.startswith("/") or re.match(r"^[A-Za-z]:", p):
        return "absolute path"
    parts = p.split("/")
    if ".." in parts:
        return "path leaves the tree through '..'"
    if any(part.lower() == ".git" for part in parts):
        return "path inside .git"
    if posixpath.normpath(p) != p.rstrip("/"):
        return "path is not normalised"
    return None


def prefixes(path: str) -> list[str]:
    """``a/b/c.py`` → ``["a", "a/b", "a/b/c.py"]``."""
    parts = path.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def check_patch_paths(patches: list[ParsedPatch], base_modes: dict[str, str]) -> None:
    """Refuse a patch that writes outside the tree or through a symlink.

    ``base_modes`` maps every prefix of every path (see :func:`prefixes`) that exists in the
    base tree to its git mode; a ``120000`` (symlink) anywhere on a path is refused.
    """
    for pp in patches:
        for p in pp.raw_paths:
            why = unsafe_reason(p)
            if why:
                raise UserError(
                    f"patch {pp.name} writes outside the tree: {p!r} ({why}); nothing was changed",
                    hint="the patch file is not from the sm120kit series; restore patches/",
                )
            for pre in prefixes(p):
                if base_modes.get(pre) == "120000":
                    raise UserError(
                        f"patch {pp.name} writes through a symlink in the target: {pre} "
                        f"(for {p}); nothing was changed",
                        hint="the target tree replaces a directory or file by a symlink; "
                        "apply to a plain checkout",
                    )
        if pp.symlink_paths:
            raise UserError(
                f"patch {pp.name} creates a symlink ({pp.symlink_paths[0]}); refused, nothing was changed"
            )
