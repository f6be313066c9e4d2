"""A small git index file written and read directly (format version 2, stage 0 only).

:mod:`sm120kit.patchset.fastapply` gives ``git apply --cached`` an index that holds only the files
a series touches (stat data zero: nothing compares it with a working tree) and reads the
resulting blob ids back without another git process. Anything other than a plain version-2/3
index of stage-0 entries reads as ``None`` (the caller then lets git do the work).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path

from sm120kit.gitrun import read_objects

_STAT = struct.Struct(">10I")


def _checksum(data: bytes, oid_len: int) -> bytes:
    return (hashlib.sha1 if oid_len == 20 else hashlib.sha256)(data).digest()


def write_index(path: Path, files: Mapping[str, tuple[str, bytes]]) -> None:
    """Write ``{path: (octal mode, binary oid)}`` as a version-2 index at ``path``."""
    oid_len = len(next(iter(files.values()))[1]) if files else 20
    out = [b"DIRC", struct.pack(">II", 2, len(files))]
    for name in sorted(files, key=lambda n: n.encode("utf-8", "surrogateescape")):
        mode, oid = files[name]
        raw = name.encode("utf-8", "surrogateescape")
        fixed = 40 + oid_len + 2
        size = (fixed + len(raw) + 8) & ~7
        out.append(_STAT.pack(0, 0, 0, 0, 0, 0, int(mode, 8), 0, 0, 0) + oid
                   + struct.pack(">H", min(len(raw), 0xFFF)) + raw + b"\0" * (size - fixed - len(raw)))
    data = b"".join(out)
    path.write_bytes(data + _checksum(data, oid_len))


def read_index(path: Path, oid_len: int) -> dict[str, tuple[str, bytes]] | None:
    """``{path: (octal mode, binary oid)}`` of a version-2/3 stage-0 index, else None."""
    data = path.read_bytes()
    if data[:4] != b"DIRC" or len(data) < 12 + oid_len:
        return None
    version, count = struct.unpack_from(">II", data, 4)
    if version not in (2, 3):
        return None
    out: dict[str, tuple[str, bytes]] = {}
    pos = 12
    for _ in range(count):
        mode = struct.unpack_from(">I", data, pos + 24)[0]
        oid = data[pos + 40: pos + 40 + oid_len]
        flags = struct.unpack_from(">H", data, pos + 40 + oid_len)[0]
        fixed = 40 + oid_len + 2 + (2 if flags & 0x4000 else 0)
        if flags & 0x3000 or (flags & 0x4000 and version < 3):
            return None
        end = data.index(b"\0", pos + fixed)
        out[data[pos + fixed: end].decode("utf-8", "surrogateescape")] = (f"{mode:o}", oid)
        pos += (fixed + end - pos - fixed + 8) & ~7
    return out


def read_trees(repo: Path, specs: Sequence[str]) -> dict[str, bytes | None]:
    """Raw tree objects named by ``<rev>:<dir>`` in one ``git cat-file --batch`` (None: absent
    or not a tree; prefetched ones from memory, :func:`sm120kit.gitrun.read_ahead`)."""
    return {s: o[1] if o is not None and o[0] == "tree" else None
            for s, o in read_objects(repo, specs).items()}
