"""Safe, read-only access to a ``collect`` bundle: a ``.tar.gz`` (or any tar) or a directory.

Nothing is ever extracted to disk. Tar members are read through ``TarFile.extractfile`` streams
with size caps; only regular files with clean relative names are visible:

* absolute names, ``..`` components, NUL/control characters → skipped (path traversal);
* symlinks, hard links, devices, FIFOs, directories → skipped (never followed);
* members whose header size exceeds ``max_member`` and anything beyond ``max_members`` /
  ``max_total`` → skipped (tar bombs); a truncated or corrupt archive keeps the members read so
  far and records a note.

Directories are walked without following symlinks, with the same caps. Every skip is recorded in
``notes`` so the report can say what was ignored. The names follow ``sm120kit/services/bundles.py``
(``manifest.json``, ``logs/``, ``stacks/<pid>.json``, ``processes.json``, ``nvml.json``,
``ras/``, ``flight/``, ``doctor.json``, ``timeline.json``, ``nccl/``, ``vllm-watchdog/``).
"""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from sm120kit.errors import UserError

MAX_MEMBERS = 20000
MAX_MEMBER = 1 << 30  # 1 GiB: logs are streamed, never loaded
MAX_TOTAL = 4 << 30
JSON_CAP = 32 << 20
TEXT_CAP = 8 << 20
READ_ERRORS = (OSError, EOFError, tarfile.TarError, zlib.error, ValueError)
BUNDLE_MARKERS = ("manifest.json", "summary.md", "processes.json", "stacks", "timeline.json")


class _Reader(io.RawIOBase):
    """A readable raw stream whose ``readinto`` is served by the subclass's ``read``."""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


class _Capped(_Reader):
    """A read-only stream that stops after ``cap`` bytes (defence against lying headers)."""

    def __init__(self, raw: IO[bytes], cap: int) -> None:
        self._raw = raw
        self._left = cap
        self._err: BaseException | None = None

    def read(self, n: int = -1) -> bytes:
        if self._err is not None:
            err, self._err = self._err, None
            raise err
        if self._left <= 0:
            return b""
        if n is None or n < 0 or n > self._left:
            n = self._left
        # small pieces: a truncated archive then still yields everything before the cut
        parts: list[bytes] = []
        got = 0
        while got < n:
            try:
                piece = self._raw.read(min(n - got, 64 * 1024))
            except READ_ERRORS as exc:
                if not parts:
                    raise
                self._err = exc
                break
            if not piece:
                break
            parts.append(piece)
            got += len(piece)
        data = b"".join(parts)
        self._left -= len(data)
        return data

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()


class _Owned(_Reader):
    """A member's data stream that closes its own TarFile."""

    def __init__(self, raw: Any, owner: tarfile.TarFile) -> None:
        self._raw = raw
        self._owner = owner

    def read(self, n: int = -1) -> bytes:
        return bytes(self._raw.read(n))

    def close(self) -> None:
        try:
            self._owner.close()
        finally:
            super().close()


def clean_name(name: str) -> str | None:
    """A safe relative posix name, or None for anything that could escape or confuse."""
    if not name or "\x00" in name or any(ord(c) < 32 for c in name):
        return None
    name = name.replace("\\", "/")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts):
        return None
    return "/".join(parts)


@dataclass
class Member:
    name: str  # relative to the bundle root
    size: int
    _open: Any = field(repr=False, default=None)

    def open(self) -> IO[bytes]:
        raw = self._open()
        # unbuffered on purpose: a read that hits a truncated archive still returns its bytes
        return cast(IO[bytes], _Capped(raw, self.size if self.size >= 0 else MAX_MEMBER))


class BundleReader:
    """Members of a bundle by relative name; ``notes`` lists what was skipped and why."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.members: dict[str, Member] = {}
        self.notes: list[str] = []
        self._tar: tarfile.TarFile | None = None
        if path.is_dir():
            self.kind = "dir"
            self._walk_dir(path)
        else:
            self.kind = "tar"
            self._read_tar(path)
        self._strip_root()

    # -- loading ----------------------------------------------------------------------------
    def _read_tar(self, path: Path) -> None:
        try:
            tf = tarfile.open(path, mode="r:*")
        except READ_ERRORS as exc:
            raise UserError(
                f"{path}: not a readable bundle tarball ({type(exc).__name__}: {exc})",
                hint="pass the .tar.gz that `sm120kit collect` wrote, its directory, or a log file",
            ) from None
        self._tar = tf
        total = 0
        count = 0
        try:
            for ti in tf:
                count += 1
                if count > MAX_MEMBERS:
                    self.notes.append(f"more than {MAX_MEMBERS} members: the rest was ignored")
                    break
                name = clean_name(ti.name)
                if name is None:
                    self.notes.append(f"skipped unsafe member name {ti.name[:120]!r}")
                    continue
                if not ti.isreg():
                    if not ti.isdir():
                        kind = ("symlink" if ti.issym() else "hard link" if ti.islnk()
                                else "device/fifo/other")
                        self.notes.append(f"skipped {kind} member {name!r}")
                    continue
                if ti.size > MAX_MEMBER or total + ti.size > MAX_TOTAL:
                    # stop here: skipping past a huge member would decompress all of it
                    self.notes.append(f"stopped at {name!r}: {ti.size} bytes is over the size cap "
                                      "(possible tar bomb); later members were not read")
                    break
                total += ti.size
                self.members[name] = Member(name, ti.size, _open=self._tar_opener(tf, ti))
        except READ_ERRORS as exc:
            self.notes.append(f"archive is truncated or corrupt after {count} members "
                              f"({type(exc).__name__}: {exc}); used what was readable")
        if not self.members and not self.notes:
            raise UserError(f"{path}: the tarball is empty", hint="re-run `sm120kit collect`")

    def _tar_opener(self, tf: tarfile.TarFile, ti: tarfile.TarInfo) -> Any:
        path = self.path
        offset = ti.offset_data

        def opener() -> IO[bytes]:
            if ti.issparse():
                f = tf.extractfile(ti)
                if f is None:
                    raise OSError(f"cannot read member {ti.name!r}")
                return f
            # a fresh decompressing handle per member: after a truncated archive broke the
            # shared one, the members before the cut stay readable up to the cut
            fresh = tarfile.open(path, mode="r:*")
            raw = fresh.fileobj
            if raw is None:
                fresh.close()
                raise OSError(f"cannot read member {ti.name!r}")
            raw.seek(offset)
            return cast(IO[bytes], _Owned(raw, fresh))

        return opener

    def _walk_dir(self, root: Path) -> None:
        total = 0
        count = 0
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames.sort()
            for fn in sorted(filenames):
                full = os.path.join(dirpath, fn)
                rel = clean_name(os.path.relpath(full, root))
                count += 1
                if count > MAX_MEMBERS:
                    self.notes.append(f"more than {MAX_MEMBERS} files: the rest was ignored")
                    return
                if rel is None:
                    self.notes.append(f"skipped unsafe file name {fn[:120]!r}")
                    continue
                try:
                    st = os.lstat(full)
                except OSError as exc:
                    self.notes.append(f"skipped {rel!r}: {exc}")
                    continue
                if not stat.S_ISREG(st.st_mode):
                    what = "symlink" if stat.S_ISLNK(st.st_mode) else "non-regular file"
                    self.notes.append(f"skipped {what} {rel!r}")
                    continue
                if st.st_size > MAX_MEMBER or total + st.st_size > MAX_TOTAL:
                    self.notes.append(f"skipped {rel!r}: over the size cap")
                    continue
                total += st.st_size
                self.members[rel] = Member(rel, st.st_size, _open=_file_opener(full))

    def _strip_root(self) -> None:
        """Bundles are packed under one top directory (``sm120kit-bundle-.../``): drop it."""
        names = list(self.members)
        if not names:
            return
        tops = {n.split("/", 1)[0] for n in names}
        if len(tops) == 1 and all("/" in n for n in names):
            top = tops.pop()
            self.members = {
                n[len(top) + 1 :]: Member(n[len(top) + 1 :], m.size, m._open)
                for n, m in self.members.items()
            }

    # -- access -----------------------------------------------------------------------------
    def is_bundle(self) -> bool:
        return any(n == m or n.startswith(m + "/") for n in self.members for m in BUNDLE_MARKERS)

    def names(self, prefix: str = "") -> list[str]:
        return sorted(n for n in self.members if n.startswith(prefix))

    def open(self, name: str) -> IO[bytes]:
        return self.members[name].open()

    def read_bytes(self, name: str, cap: int = TEXT_CAP) -> bytes | None:
        m = self.members.get(name)
        if m is None:
            return None
        try:
            with m.open() as f:
                data = f.read(cap + 1)
        except READ_ERRORS as exc:
            self.notes.append(f"could not read {name!r}: {type(exc).__name__}: {exc}")
            return None
        if len(data) > cap:
            self.notes.append(f"{name!r} is over {cap} bytes: read the first {cap}")
            data = data[:cap]
        return data

    def read_text(self, name: str, cap: int = TEXT_CAP) -> str | None:
        b = self.read_bytes(name, cap)
        return None if b is None else b.decode("utf-8", "replace")

    def read_json(self, name: str, cap: int = JSON_CAP) -> Any:
        b = self.read_bytes(name, cap)
        if b is None:
            return None
        try:
            return json.loads(b.decode("utf-8", "replace"))
        except (ValueError, RecursionError) as exc:
            self.notes.append(f"{name!r} is not valid JSON ({type(exc).__name__})")
            return None

    def log_members(self) -> list[str]:
        """The text logs to analyse, without feeding the same lines twice.

        ``logs/child.log`` (the launch's whole output) wins over ``logs/by-source/*`` (the same
        lines split per prefix); NCCL debug files (``nccl/``) are always added. In a plain
        directory of logs every regular file is a log.
        """
        if not self.is_bundle():
            return self.names()
        out: list[str] = []
        logs = [n for n in self.names("logs/") if not n.endswith(".json")]
        if "logs/child.log" in logs:
            out.append("logs/child.log")
            out += [n for n in logs if n != "logs/child.log" and not n.startswith("logs/by-source/")]
        else:
            out += logs
        out += [n for n in self.names("nccl/")]
        # multi-node bundles (collect --ray): every node's NCCL debug files
        out += [n for n in self.names("nodes/") if n.split("/")[2:3] == ["nccl"]]
        return out

    def close(self) -> None:
        if self._tar is not None:
            try:
                self._tar.close()
            except READ_ERRORS:
                pass
            self._tar = None

    def __enter__(self) -> BundleReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _file_opener(path: str) -> Any:
    def opener() -> IO[bytes]:
        return open(path, "rb")  # noqa: SIM115 - the caller closes it
    return opener


def looks_like_tar(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError:
        return False
    if head[:2] == b"\x1f\x8b" or head[:3] == b"BZh" or head[:6] == b"\xfd7zXZ\x00":
        return True
    return len(head) >= 262 and head[257:262] == b"ustar"


def iter_text_lines(text: str) -> Iterator[str]:
    yield from text.splitlines()
