"""A strict in-process ``git apply`` for the fast path: the text hunks of a format-patch file
applied to file contents, only where git's own first try would put them.

git applies a hunk by trying one position first (the start of the file when the hunk begins at
line 1, the end when it has no trailing context, else the line its header names in the image as
patched so far) and, for a hunk bound to neither end, searching outwards from there (one line
after, one before, two after, ...) for the hunk's old lines, byte for byte. This module does the
same, so its result is the one git computes; anything else returns None and git does the work:
a hunk bound to an end whose lines are not there, a rename, copy, mode change or binary patch,
quoted or spaced names, whitespace that git might be configured to fix. :mod:`sm120kit.patchset.fastapply` also has git apply the whole series once
and compares the final contents.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_PLAIN_NAME = re.compile(rb"^[A-Za-z0-9_./+@=,-]+$")
_MODES = (b"100644", b"100755")
_WS_ERROR = re.compile(rb"[ \t]\n?$| \t")  # trailing blank, space before tab (git's defaults)

#: one file of a patch: ``(path, "modify" | "new" | "delete", new mode or None, hunks)``; a hunk
#: is ``(old start, new start, [(tag, line with its newline or without at end of file)])``
Hunk = tuple[int, int, list[tuple[bytes, bytes]]]
FilePatch = tuple[str, str, str | None, list[Hunk]]


def parse(data: bytes) -> list[FilePatch] | None:
    """The file changes of a ``git format-patch`` file, or None when one is beyond this module."""
    lines = data.split(b"\n")
    i = next((n for n, ln in enumerate(lines) if ln.startswith(b"diff --git ")), None)
    if i is None:
        return None
    out: list[FilePatch] = []
    while i < len(lines) and lines[i].startswith(b"diff --git "):
        got = _file(lines, i + 1)
        if got is None:
            return None
        fp, i = got
        out.append(fp)
        while i < len(lines) and not lines[i].startswith(b"diff --git "):
            if lines[i].startswith((b"@@", b"+", b"-", b" ")) and lines[i] != b"-- ":
                return None  # a line that may belong to a patch after a signature-like line
            i += 1
    return out or None


def _name(line: bytes, prefix: bytes) -> bytes | None:
    """``a/NAME`` of a ``---``/``+++`` line (``b""`` for /dev/null; None: not plain)."""
    rest = line[4:]
    if rest == b"/dev/null":
        return b""
    if not rest.startswith(prefix) or not _PLAIN_NAME.match(rest[2:]):
        return None
    return rest[2:]


def _file(lines: list[bytes], i: int) -> tuple[FilePatch, int] | None:
    kind, mode = "modify", None
    while i < len(lines) and not lines[i].startswith(b"--- "):
        ln = lines[i]
        if ln.startswith(b"index "):
            parts = ln.split()
            mode = parts[2].decode() if len(parts) == 3 else mode
        elif ln.startswith((b"new file mode ", b"deleted file mode ")):
            m = ln.rsplit(b" ", 1)[1]
            if m not in _MODES:
                return None
            kind, mode = ("new" if ln.startswith(b"new") else "delete"), m.decode()
        else:
            return None  # rename, copy, mode change, binary, an empty new file...
        i += 1
    if i + 1 >= len(lines) or not lines[i + 1].startswith(b"+++ "):
        return None
    old, new = _name(lines[i], b"a/"), _name(lines[i + 1], b"b/")
    if old is None or new is None or (old and new and old != new) or not (old or new):
        return None
    if (kind == "new") != (old == b"") or (kind == "delete") != (new == b""):
        return None
    hunks: list[Hunk] = []
    i += 2
    while i < len(lines) and lines[i].startswith(b"@@ "):
        got = _hunk(lines, i)
        if got is None:
            return None
        hunk, i = got
        hunks.append(hunk)
    if not hunks:
        return None
    return ((old or new).decode(), kind, mode, hunks), i


def _hunk(lines: list[bytes], i: int) -> tuple[Hunk, int] | None:
    m = _HUNK.match(lines[i])
    if m is None:
        return None
    old_n = int(m.group(2)) if m.group(2) is not None else 1
    new_n = int(m.group(4)) if m.group(4) is not None else 1
    body: list[tuple[bytes, bytes]] = []
    i += 1
    while old_n > 0 or new_n > 0:
        if i >= len(lines):
            return None
        ln = lines[i]
        tag, text = (ln[:1], ln[1:]) if ln else (b" ", b"")  # an empty line: empty context
        if tag == b"\\":
            if not body:
                return None
            body[-1] = (body[-1][0], body[-1][1][:-1])
            i += 1
            continue
        if tag not in (b" ", b"-", b"+"):
            return None
        old_n -= tag != b"+"
        new_n -= tag != b"-"
        if old_n < 0 or new_n < 0:
            return None
        body.append((tag, text + b"\n"))
        i += 1
    if i < len(lines) and lines[i].startswith(b"\\") and body:
        body[-1] = (body[-1][0], body[-1][1][:-1])
        i += 1
    return (int(m.group(1)), int(m.group(3)), body), i


def _split(content: bytes) -> list[bytes]:
    parts = content.split(b"\n")
    return [p + b"\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _find(image: list[bytes], patched: list[bool], pre: list[bytes], line: int) -> int:
    """Where git's search puts ``pre`` starting from ``line``: there, then one line after, one
    before, two after, ... (-1: nowhere; -2: the lines match where an earlier hunk of this file
    wrote, which git does not match: leave it to git)."""
    n, k = len(image), len(pre)
    line = min(line, n)
    back = fwd = line
    cand, i = line, 0
    while True:
        if cand + k <= n and image[cand:cand + k] == pre:
            return -2 if any(patched[cand:cand + k]) else cand
        while True:  # the next line to try, as git steps (a side at its end is skipped)
            if back == 0 and fwd == n:
                return -1
            if i & 1 and back:
                back -= 1
                cand = back
                break
            if not i & 1 and fwd < n:
                fwd += 1
                cand = fwd
                break
            i += 1
        i += 1


def _apply_hunk(image: list[bytes], patched: list[bool], hunk: Hunk) -> bool:
    """Apply one hunk where git does (False: git would not take it as it is)."""
    old_start, new_start, body = hunk
    pre = [t for tag, t in body if tag != b"+"]
    post = [t for tag, t in body if tag != b"-"]
    trailing = 0
    for tag, _ in reversed(body):
        if tag != b" ":
            break
        trailing += 1
    at_start, at_end = old_start <= 1, trailing == 0
    if at_start or at_end:  # must match at the start / the end, and only there
        pos = 0 if at_start else len(image) - len(pre)
        if pos < 0 or image[pos:pos + len(pre)] != pre or (at_end and pos + len(pre) != len(image)):
            return False
        if any(patched[pos:pos + len(pre)]):
            return False
    else:
        pos = _find(image, patched, pre, max(new_start - 1, 0))
        if pos < 0:
            return False
    image[pos:pos + len(pre)] = post
    patched[pos:pos + len(pre)] = [True] * len(post)
    return True


def apply(patch: list[FilePatch],
          files: Mapping[str, tuple[str, bytes]]) -> dict[str, tuple[str, bytes] | None] | None:
    """The files ``patch`` changes, ``{path: (mode, content)}`` (None: deleted), given the
    current ``files`` (the touched ones; absent: no such file), or None: leave it to git."""
    out: dict[str, tuple[str, bytes] | None] = {}
    for path, kind, mode, hunks in patch:
        if path in out:
            return None  # the same file twice in one patch
        have = files.get(path)
        if (have is None) != (kind == "new"):
            return None
        if have is not None and mode is not None and have[0] != mode:
            return None
        if any(_WS_ERROR.search(t) for _, _, body in hunks for tag, t in body if tag == b"+"):
            return None  # git may be configured to fix it (apply.whitespace)
        image = _split(have[1]) if have is not None else []
        patched = [False] * len(image)
        if not all(_apply_hunk(image, patched, h) for h in hunks):
            return None
        content = b"".join(image)
        if content.endswith(b"\n\n") and any(tag == b"+" for _, _, b in hunks for tag, _ in b):
            return None  # maybe a blank line added at the end: git may be set to drop it
        if kind == "delete":
            if content:
                return None
            out[path] = None
        else:
            out[path] = (mode if kind == "new" and mode else have[0] if have else "100644", content)
    return out
