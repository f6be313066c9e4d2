"""The fast path of ``apply``: the series as commits without a worktree, ``git am`` or 3-way.

Every patch is applied with ``git apply --cached`` to a *temporary* index file (``GIT_INDEX_FILE``
in a temp dir, primed from the base tree); the trees after each patch and the commits of the
whole series are computed here and written as one pack by one ``git index-pack --stdin`` (which
checks every object: loose objects would cost a directory per object on a fresh clone).
Each commit is byte-for-byte the one ``git am -3 --keep-non-patch
--committer-date-is-author-date`` makes with sm120kit's committer identity (message: subject and
body as ``git mailinfo -b`` reads them, cleaned up as ``git am`` does), so the result is the same
commit whichever path made it; tests compare the two.

The user's index, refs, HEAD and files are never touched: the only writes are objects (blobs,
trees, commits), unreachable until the caller creates a branch. Anything this reader does not
handle exactly as ``git mailinfo`` does (an encoded header, a transfer encoding, in-body headers)
or a patch that does not apply as-is returns ``None``: the caller then takes the slow path
(worktree + ``git am -3``, with its 3-way fallback and failure diagnosis).
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import shutil
import struct
import tempfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sm120kit.gitrun import COMMITTER, read_blobs, run_git, run_git_bytes, tree_entries
from sm120kit.patchset import hunkapply
from sm120kit.patchset.indexfile import read_index, read_trees, write_index
from sm120kit.patchset.patchfile import ParsedPatch

_HEADER_RE = re.compile(r"^([A-Za-z-]+):[ \t]?(.*)$")
_FROM_RE = re.compile(r"^([^<>\"=?]*?)\s*<([^<>\s]+)>$")
_PATCH_BRACKET_RE = re.compile(r"^\[[^\]]*PATCH[^\]]*\]\s*")
_IN_BODY_HEADER_RE = re.compile(r"^(From|Subject|Date|Content-[A-Za-z-]+|\[PATCH)", re.I)
_PLAIN_ENCODINGS = {"", "7bit", "8bit"}


@dataclass(frozen=True)
class _Mail:
    author: str  # "Name <email>"
    date: str  # "<unix seconds> <+hhmm>"
    message: str


def _stripspace(text: str) -> str:
    """``git stripspace``: no trailing blanks, one blank line at most, none at the ends."""
    out: list[str] = []
    blank = 0
    for line in text.split("\n"):
        line = line.rstrip()
        if not line:
            blank += 1
            continue
        if out and blank:
            out.append("")
        blank = 0
        out.append(line)
    return "\n".join(out) + "\n" if out else ""


_DATE_RE = re.compile(
    r"^(?:[A-Z][a-z]{2}, )?(\d{1,2}) ([A-Z][a-z]{2}) (\d{4}) (\d\d):(\d\d):(\d\d) ([+-])(\d\d)(\d\d)$"
)
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _days(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


def _git_date(value: str) -> str | None:
    """``Wed, 2 Dec 2026 12:00:00 +0100`` (format-patch's Date) as git's ``<seconds> <zone>``;
    any other form: None (``email.utils`` costs 30 ms of imports, socket included)."""
    m = _DATE_RE.match(value.strip())
    if m is None or m.group(2) not in _MONTHS:
        return None
    day, year = int(m.group(1)), int(m.group(3))
    hh, mi, ss = int(m.group(4)), int(m.group(5)), int(m.group(6))
    zone = (int(m.group(8)) * 60 + int(m.group(9))) * (-1 if m.group(7) == "-" else 1)
    local = _days(year, _MONTHS.index(m.group(2)) + 1, day) * 86400 + hh * 3600 + mi * 60 + ss
    if not (1 <= day <= 31 and hh < 24 and mi < 60 and ss < 60):
        return None
    return f"{local - zone * 60} {m.group(7)}{m.group(8)}{m.group(9)}"


def _headers(lines: list[str]) -> tuple[dict[str, str], int] | None:
    """Unfolded headers (lower-case names) and the index of the first body line."""
    heads: dict[str, str] = {}
    last: str | None = None
    start = 1 if lines and lines[0].startswith("From ") else 0
    for i in range(start, len(lines)):
        line = lines[i]
        if not line:
            return heads, i + 1
        if line[:1] in (" ", "\t") and last is not None:
            heads[last] += " " + line.strip()
            continue
        m = _HEADER_RE.match(line)
        if m is None:
            return None
        last = m.group(1).lower()
        heads[last] = m.group(2).strip()
    return None


def _log_lines(lines: list[str]) -> list[str] | None:
    """The log message lines: up to the ``---`` line (None: a line mailinfo might read otherwise)."""
    body: list[str] = []
    for line in lines:
        if line.startswith("---"):
            return body if not line[3:].strip() else None
        if line.startswith(("diff -", "Index: ", "-- >8 --", "From ")):
            return None
        body.append(line)
    return None


def read_mail(path: Path) -> _Mail | None:
    """Author, date and commit message of a format-patch file, or None when it needs git."""
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if "\r" in text:
        return None
    lines = text.split("\n")
    parsed = _headers(lines)
    if parsed is None:
        return None
    heads, body_at = parsed
    subject, frm = heads.get("subject", ""), heads.get("from", "")
    if "=?" in subject or "=?" in frm or not subject.isascii() or not frm.isascii():
        return None
    if heads.get("content-transfer-encoding", "").lower() not in _PLAIN_ENCODINGS:
        return None
    if "multipart" in heads.get("content-type", "").lower():
        return None
    who = _FROM_RE.match(frm)
    date = _git_date(heads.get("date", ""))
    if who is None or date is None or not who.group(1).strip():
        return None
    body = _log_lines(lines[body_at:])
    if body is None or _IN_BODY_HEADER_RE.match(next((b for b in body if b.strip()), "")):
        return None
    while _PATCH_BRACKET_RE.match(subject):
        subject = _PATCH_BRACKET_RE.sub("", subject, count=1)
    subject = re.sub(r"\s+", " ", subject).strip()
    if not subject or subject[0] == ":" or "PATCH" in subject or subject.lower().startswith("re:"):
        return None  # mailinfo's own subject clean-up applies: leave it to git am
    message = _stripspace(subject + "\n\n" + "\n".join(body))
    return _Mail(f"{who.group(1).strip()} <{who.group(2)}>", date, message)


def _commit_body(tree: str, parent: str, mail: _Mail) -> bytes:
    committer = f"{COMMITTER[0]} <{COMMITTER[1]}> {mail.date}"
    return (
        f"tree {tree}\nparent {parent}\nauthor {mail.author} {mail.date}\n"
        f"committer {committer}\n\n{mail.message}"
    ).encode()


_TREE = "40000"


def _tree_object(entries: dict[str, tuple[str, bytes]]) -> bytes:
    """A tree object's bytes (git's order: a directory sorts as ``name/``)."""
    def key(name: str) -> bytes:
        b = name.encode("utf-8", "surrogateescape")
        return b + b"/" if entries[name][0] == _TREE else b
    return b"".join(f"{entries[n][0]} {n}".encode("utf-8", "surrogateescape") + b"\0" + entries[n][1]
                    for n in sorted(entries, key=key))


def _hash(kind: bytes, body: bytes, hexlen: int) -> str:
    algo = hashlib.sha1 if hexlen == 40 else hashlib.sha256
    return algo(kind + b" %d\0" % len(body) + body).hexdigest()


@dataclass
class _Base:
    """The base tree's directories on the way to every path the series touches."""

    dirs: dict[str, dict[str, tuple[str, bytes]]]  # "" is the root; absent: a new directory
    files: dict[str, tuple[str, bytes]]  # touched paths that exist at the base
    oid_len: int


def _read_base(repo: Path, base_commit: str, paths: set[str]) -> _Base | None:
    dirs = sorted({posixpath.dirname(p) for p in paths} | {
        "/".join(p.split("/")[:i]) for p in paths for i in range(1, p.count("/") + 1)} | {""})
    blobs = read_trees(repo, [f"{base_commit}:{d}" for d in dirs])
    oid_len = len(base_commit) // 2
    found: dict[str, dict[str, tuple[str, bytes]]] = {}
    for d in dirs:
        raw = blobs.get(f"{base_commit}:{d}")
        if raw is not None:
            found[d] = tree_entries(raw, oid_len)
    files: dict[str, tuple[str, bytes]] = {}
    for p in paths:
        entry = found.get(posixpath.dirname(p), {}).get(posixpath.basename(p))
        if entry is not None:
            if entry[0] == _TREE or entry[0] in ("120000", "160000"):
                return None  # a directory, symlink or submodule where a file is patched
            files[p] = entry
    for d in dirs:  # a file where a directory is needed: leave it to git am
        parent = found.get(posixpath.dirname(d), {}) if d else {}
        e = parent.get(posixpath.basename(d))
        if d and e is not None and e[0] != _TREE:
            return None
    return _Base(found, files, oid_len)


def _trees_for(base: _Base, state: dict[str, tuple[str, bytes]], hexlen: int,
               objects: dict[str, bytes]) -> str:
    """The root tree id of ``base`` with its touched files set to ``state`` (new objects kept)."""
    entries = {d: dict(e) for d, e in base.dirs.items()}
    for p in base.files.keys() | state.keys():
        entries.setdefault(posixpath.dirname(p), {}).pop(posixpath.basename(p), None)
        if p in state:
            entries[posixpath.dirname(p)][posixpath.basename(p)] = state[p]
    for d in list(entries):  # every ancestor of a directory holding a touched path
        while d:
            d = posixpath.dirname(d)
            entries.setdefault(d, {})
    for d in sorted(entries, key=lambda x: -x.count("/") - (1 if x else 0)):
        if not d:
            continue
        parent = entries[posixpath.dirname(d)]
        if not entries[d]:
            parent.pop(posixpath.basename(d), None)
            continue
        body = _tree_object(entries[d])
        oid = _hash(b"tree", body, hexlen)
        objects.setdefault(oid, body)
        parent[posixpath.basename(d)] = (_TREE, bytes.fromhex(oid))
    body = _tree_object(entries[""])
    oid = _hash(b"tree", body, hexlen)
    objects.setdefault(oid, body)
    return oid


def _trees(repo: Path, tmp: Path, base_commit: str, patches: Sequence[ParsedPatch],
           objects: dict[str, bytes], blobs: dict[str, bytes]) -> list[str] | None:
    """The tree after each patch (None: one did not apply, or the tree is beyond this path);
    the new tree objects go to ``objects`` and blobs to ``blobs`` (``{id: body}``), unwritten.

    The patches are applied here (:mod:`sm120kit.patchset.hunkapply`) and git applies the whole
    series once on a small temporary index to confirm the final files; where that module leaves
    a patch to git, or the two disagree, each patch is applied in turn by ``git apply
    --cached`` to the temporary index holding only the touched files."""
    paths = {p for pp in patches for p in (*pp.raw_paths, *pp.paths())}
    base = _read_base(repo, base_commit, paths)
    if base is None:
        return None
    mine = _trees_here(repo, tmp, base_commit, base, patches, blobs)
    if mine is not None:
        return [_trees_for(base, state, len(base_commit), objects) for state in mine]
    blobs.clear()
    index = tmp / "index"
    write_index(index, base.files)
    env = {"GIT_INDEX_FILE": str(index)}
    hexlen = len(base_commit)
    trees: list[str] = []
    for pp in patches:
        proc = run_git(["apply", "--cached", str(pp.path)], repo, env=env, check=False,
                       config=("-c", "index.version=2"))
        state = read_index(index, base.oid_len) if proc.returncode == 0 else None
        if state is None:
            return None
        trees.append(_trees_for(base, state, hexlen, objects))
    return trees


def _trees_here(repo: Path, tmp: Path, base_commit: str, base: _Base,
                patches: Sequence[ParsedPatch],
                blobs: dict[str, bytes]) -> list[dict[str, tuple[str, bytes]]] | None:
    """The touched files after each patch, ``{path: (mode, binary blob id)}``, applied in this
    process (new contents into ``blobs``), confirmed by one ``git apply --cached`` of the whole
    series (None: git does it patch by patch)."""
    diffs = [hunkapply.parse(pp.path.read_bytes()) for pp in patches]
    if any(d is None for d in diffs):
        return None
    hexlen = len(base_commit)
    have = read_blobs(repo, [f"{base_commit}:{p}" for p in base.files])
    files: dict[str, tuple[str, bytes]] = {}
    for p, (mode, _) in base.files.items():
        content = have.get(f"{base_commit}:{p}")
        if content is None:
            return None
        files[p] = (mode, content)
    ids = {p: oid for p, (_, oid) in base.files.items()}
    states: list[dict[str, tuple[str, bytes]]] = []
    for diff in diffs:
        changed = hunkapply.apply(diff or [], files)
        if changed is None:
            return None
        for p, now in changed.items():
            if now is None:
                files.pop(p, None)
                ids.pop(p, None)
                continue
            files[p] = now
            oid = _hash(b"blob", now[1], hexlen)
            blobs.setdefault(oid, now[1])
            ids[p] = bytes.fromhex(oid)
        states.append({p: (files[p][0], ids[p]) for p in files})
    index = tmp / "check-index"
    write_index(index, base.files)
    proc = run_git(["apply", "--cached", *(str(pp.path) for pp in patches)], repo,
                   env={"GIT_INDEX_FILE": str(index)}, check=False,
                   config=("-c", "index.version=2"))
    final = read_index(index, base.oid_len) if proc.returncode == 0 else None
    return states if states and final == states[-1] else None


_PACK_TYPES = {"commit": 1, "tree": 2, "blob": 3}


def pack_bytes(objects: Sequence[tuple[str, bytes]], hexlen: int = 40) -> bytes:
    """A version-2 pack of whole (not deltified) objects ``(type, body)``, its trailer the
    SHA-1 (``hexlen`` 64: SHA-256) of what precedes it."""
    out = [b"PACK", struct.pack(">II", 2, len(objects))]
    for kind, body in objects:
        size = len(body)
        head = bytearray()
        byte = (_PACK_TYPES[kind] << 4) | (size & 0x0F)
        size >>= 4
        while size:
            head.append(byte | 0x80)
            byte = size & 0x7F
            size >>= 7
        head.append(byte)
        out.append(bytes(head) + zlib.compress(body))
    data = b"".join(out)
    return data + (hashlib.sha1 if hexlen == 40 else hashlib.sha256)(data).digest()


def write_pack(repo: Path, objects: Sequence[tuple[str, bytes]], hexlen: int = 40) -> bool:
    """Store ``objects`` in ``repo`` with one ``git index-pack --stdin`` (git checks the pack
    and indexes it; nothing is written when it refuses). True when it took them."""
    if not objects:
        return True
    proc = run_git_bytes(["index-pack", "--stdin"], repo, input=pack_bytes(objects, hexlen),
                         check=False)
    return proc.returncode == 0


def write_commits(repo: Path, base_commit: str, mails: Sequence[_Mail], trees: Sequence[str],
                  tree_objects: dict[str, bytes],
                  blob_objects: dict[str, bytes] | None = None) -> str | None:
    """Write the new blobs and trees and one commit per (mail, tree), chained on
    ``base_commit``, as one pack; the last commit's id (None: git refused the pack)."""
    parent = base_commit
    commits: list[tuple[str, bytes]] = []
    for mail, tree in zip(mails, trees, strict=True):
        body = _commit_body(tree, parent, mail)
        parent = _hash(b"commit", body, len(base_commit))
        commits.append(("commit", body))
    objects = ([("blob", body) for body in (blob_objects or {}).values()]
               + [("tree", body) for body in tree_objects.values()] + commits)
    return parent if write_pack(repo, objects, len(base_commit)) else None


def apply_fast(repo: Path, base_commit: str, patches: Sequence[ParsedPatch]) -> str | None:
    """The result commit of ``patches`` on ``base_commit``, or None: take the slow path."""
    mails = [read_mail(p.path) for p in patches]
    if not patches or any(m is None for m in mails):
        return None
    tmp = Path(tempfile.mkdtemp(prefix="sm120kit-idx-"))
    try:
        tree_objects: dict[str, bytes] = {}
        blob_objects: dict[str, bytes] = {}
        trees = _trees(repo, tmp, base_commit, patches, tree_objects, blob_objects)
        if trees is None:
            return None
        return write_commits(repo, base_commit, [m for m in mails if m is not None], trees,
                             tree_objects, blob_objects)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
