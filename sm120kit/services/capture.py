"""Capture of a supervised child's output: echoed to the terminal, written (redacted, capped) to
``logs/child.log`` and one file per source under ``logs/by-source/``, kept as per-source tails,
and handed line by line to the supervisor."""

from __future__ import annotations

import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO

from sm120kit.evidence.redact import Redactor
from sm120kit.services.bundles import LOG_CAP, Bundle

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_SRC_RX = (
    re.compile(r"^\((?P<name>[A-Za-z][\w]*?)(?: rank=(?P<rank>\d+))? pid=(?P<pid>\d+)"),
    re.compile(r"^\[rank(?P<rank>\d+)\]:"),
    re.compile(r"^[\w.-]+:(?P<pid>\d+):\d+ \[\d+\] NCCL "),
)
SOURCE_CAP = 8 * 1024 * 1024
MAX_SOURCES = 128
TAIL_KEEP = 2000


def source_of(line: str, stream: str) -> str:
    """Which process/rank a line came from: the vLLM prefix name, ``rankN``, ``nccl-<pid>``, or
    the stream name for unprefixed lines."""
    s = _ANSI.sub("", line) if "\x1b" in line else line
    s = s.lstrip("\r")
    for rx in _SRC_RX:
        m = rx.match(s)
        if m:
            g = m.groupdict()
            if g.get("name"):
                return str(g["name"]) + (f"_rank{g['rank']}" if g.get("rank") else "")
            if g.get("rank") is not None:
                return f"rank{g['rank']}"
            return f"nccl-{g['pid']}"
    return stream


class CappedFile:
    """A redacted log file that stops growing at ``cap`` bytes and ends with the last lines."""

    def __init__(self, path: Path, cap: int, redactor: Redactor) -> None:
        self.path = path
        self.cap = cap
        self.redactor = redactor
        self.f: IO[bytes] | None = open(path, "ab", buffering=0)  # readable live
        self.written = 0
        self.dropped = 0

    def write_line(self, line: str) -> None:
        if self.f is None:
            return
        data = self.redactor.text(line).encode("utf-8", "replace")
        if self.written + len(data) > self.cap:
            self.dropped += len(data)
            return
        self.f.write(data)
        self.written += len(data)

    def close(self, tail: list[str] | None = None) -> None:
        if self.f is None:
            return
        if self.dropped and tail:
            self.f.write(f"\n[... sm120kit: {self.dropped} bytes over the cap not kept; last "
                         f"{len(tail)} lines follow ...]\n".encode())
            for ln in tail:
                self.f.write(self.redactor.text(ln).encode("utf-8", "replace"))
        self.f.close()
        self.f = None


LineHandler = Callable[[str, str, str], None]  # (line, source, stream)


class LogCapture:
    """Reader threads over the child's pipes; ``on_line`` sees every complete line, ``on_partial``
    a long progress bar (``\\r`` without ``\\n``). After :meth:`close` nothing more is written:
    what the child prints while we stop it is not evidence of the bundle already packed."""

    def __init__(self, bundle: Bundle, redactor: Redactor, *, tail_lines: int,
                 on_line: LineHandler, on_partial: Callable[[], None] | None = None) -> None:
        self.bundle = bundle
        self.redactor = redactor
        self.on_line = on_line
        self.on_partial = on_partial
        self.lock = threading.Lock()
        self.tails: dict[str, deque[str]] = {}
        self.tail_len = max(TAIL_KEEP, tail_lines)
        self.child_log = CappedFile(bundle.path("logs/child.log"), LOG_CAP, redactor)
        self.source_files: dict[str, CappedFile] = {}
        self._partial: dict[str, str] = {"stdout": "", "stderr": ""}
        self.readers: list[threading.Thread] = []
        self.echo_on = True  # off once we stop the child: its dying words stay out of sight
        self.closed = False
        self.muted = False  # set before we signal the child: its answer to us is not evidence

    def start(self, pipes: list[tuple[IO[bytes], str, IO[bytes] | None]]) -> None:
        for fobj, name, sink in pipes:
            fd = os.dup(fobj.fileno())
            fobj.close()
            th = threading.Thread(target=self._reader, args=(fd, name, sink), daemon=True,
                                  name=f"collect-read-{name}")
            th.start()
            self.readers.append(th)

    def join(self, timeout: float = 3.0) -> None:
        end = time.monotonic() + timeout
        for th in self.readers:
            th.join(max(0.0, end - time.monotonic()))

    def _reader(self, fd: int, stream: str, sink: IO[bytes] | None) -> None:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            if sink is not None and self.echo_on:
                try:
                    sink.write(chunk)
                    sink.flush()
                except (OSError, ValueError):
                    pass
            self._feed(chunk.decode("utf-8", "replace"), stream)
        rest = self._partial.get(stream, "")
        if rest:
            self._partial[stream] = ""
            self._line(rest + "\n", stream)
        try:
            os.close(fd)
        except OSError:
            pass

    def _feed(self, text: str, stream: str) -> None:
        buf = self._partial.get(stream, "") + text
        parts = buf.split("\n")
        self._partial[stream] = parts.pop()
        for p in parts:
            self._line(p + "\n", stream)
        if self._partial[stream] and "\r" in self._partial[stream] and self.on_partial:
            self.on_partial()

    def _line(self, line: str, stream: str) -> None:
        src = source_of(line, stream)
        with self.lock:
            if self.closed or self.muted:
                return
            self.child_log.write_line(line)
            dq = self.tails.setdefault(src, deque(maxlen=self.tail_len))
            dq.append(line.rstrip("\n"))
            if src not in self.source_files and len(self.source_files) < MAX_SOURCES:
                safe = re.sub(r"[^\w.-]+", "_", src)[:80]
                self.source_files[src] = CappedFile(
                    self.bundle.path(f"logs/by-source/{safe}.log"), SOURCE_CAP, self.redactor)
            if src in self.source_files:
                self.source_files[src].write_line(line)
        self.on_line(line, src, stream)

    def snapshot(self) -> dict[str, list[str]]:
        with self.lock:
            return {k: list(v) for k, v in self.tails.items()}

    def text(self) -> str:
        with self.lock:
            return "\n".join(line for dq in self.tails.values() for line in dq)

    def mute(self) -> None:
        """From now on lines are dropped (we are about to stop the child ourselves)."""
        with self.lock:
            self.muted = True
            self.echo_on = False

    def close(self) -> None:
        """Close the log files (with their tails when capped); later lines are dropped."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            self.child_log.close(list(self.tails.get("stdout", []))[-TAIL_KEEP:])
            for src, f in self.source_files.items():
                f.close(list(self.tails.get(src, []))[-TAIL_KEEP:])
