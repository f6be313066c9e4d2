"""The support-bundle directory: redacted, size-capped writes, an incremental manifest, the tarball.

Layout (names are read by ``sm120kit diagnose``; keep them stable)::

    sm120kit-bundle-<host>-<UTC time>/
      summary.md            verdict, phase timeline, per-process table, blocked frames
      manifest.json         every collector: name, started, seconds, status, error; files
      processes.json        pid -> label, cmdline (redacted), status, parent, ...
      timeline.json         startup phase timeline (launch mode) and stall reason
      env.json              environment (redacted)
      host.json             host facts (kernel, memory, /dev/shm, ptrace rights, tool versions)
      doctor.json           ``sm120kit doctor`` tiers 0-1
      nvml.json             NVML snapshot per GPU (two samples)
      logs/child.log        child output (launch mode); logs/by-source/<name>.log per prefix
      logs/tail.json        last N lines per source
      stacks/<pid>.json     first stack sample (py-spy JSON or parsed faulthandler)
      stacks/<pid>.txt      the same, as text
      stacks/<pid>.2.json   second sample (plain, a few seconds later) and .2.txt
      stacks/<pid>.native.json / .native.txt   py-spy --native (C frames), within its budget
      stacks/analysis.json  per process: blocked/busy, top frame, collective
      ras/status-1.txt      NCCL RAS VERBOSE STATUS (and .json when the server speaks JSON)
      ras/status-2.txt
      flight/               Flight Recorder dumps, pg_config-filled copies, analyzer output
      nccl/                 NCCL_DEBUG_FILE per process (launch mode)
      vllm-watchdog/        vLLM --watchdog-config stack dumps
      faulthandler/         SIGUSR1 faulthandler dumps of launched children (no-ptrace fallback)

The manifest is rewritten after every collector finishes, so a killed collect still leaves a
valid ``manifest.json`` describing what was gathered.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import tarfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sm120kit.errors import UserError
from sm120kit.evidence.redact import Redactor

DEFAULT_CAP = 4 * 1024 * 1024  # bytes per file
LOG_CAP = 32 * 1024 * 1024
TRUNC_MARK = "\n[... sm120kit: truncated {n} bytes to respect the size cap ...]\n"


def utc_stamp(t: float | None = None) -> str:
    return datetime.fromtimestamp(t if t is not None else time.time(), UTC).strftime(
        "%Y%m%dT%H%M%SZ"
    )


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")


def bundle_name(host: str | None = None, t: float | None = None) -> str:
    host = host or socket.gethostname() or "host"
    host = re.sub(r"[^A-Za-z0-9_.-]+", "_", host)[:64]
    return f"sm120kit-bundle-{host}-{utc_stamp(t)}"


@dataclass
class CollectorRecord:
    name: str
    started: str
    seconds: float = 0.0
    status: str = "running"  # ok | error | timeout | skipped | running
    error: str | None = None
    detail: str | None = None
    files: list[str] = field(default_factory=list)


class Bundle:
    """A bundle directory being written. Every text write goes through the redactor."""

    def __init__(
        self,
        root: Path,
        redactor: Redactor | None = None,
        *,
        cap: int = DEFAULT_CAP,
        meta: dict[str, Any] | None = None,
    ) -> None:
        self.root = root
        self.redactor = redactor or Redactor()
        self.cap = cap
        self.records: list[CollectorRecord] = []
        self.meta: dict[str, Any] = dict(meta or {})
        self.meta.setdefault("created", iso(time.time()))
        self._lock = threading.Lock()
        self.closed = False  # set once the tarball is made: late writes of timed-out collectors
        root.mkdir(parents=True, exist_ok=True)
        for sub in ("logs", "stacks", "ras", "flight", "nccl"):
            (root / sub).mkdir(exist_ok=True)

    @classmethod
    def create(
        cls,
        out_dir: Path,
        redactor: Redactor | None = None,
        *,
        t: float | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Bundle:
        redactor = redactor or Redactor()
        host = redactor.host_alias(socket.gethostname() or "host")
        _make_out_dir(out_dir)
        base = bundle_name(host, t)
        root = out_dir / base
        n = 1
        while root.exists() or root.with_name(root.name + ".tar.gz").exists():
            n += 1
            root = out_dir / f"{base}-{n}"
        return cls(root, redactor, meta=meta)

    @property
    def tarball(self) -> Path:
        return self.root.with_name(self.root.name + ".tar.gz")

    # --- writing -----------------------------------------------------------------------------
    def path(self, rel: str) -> Path:
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def write_text(self, rel: str, text: str, *, cap: int | None = None, keep: str = "tail") -> Path:
        """Write redacted text, capped (``keep='tail'`` keeps the end, ``'head'`` the start)."""
        if self.closed:
            return self.root / rel
        text = self.redactor.text(text)
        data = text.encode("utf-8", "replace")
        limit = cap or self.cap
        if len(data) > limit:
            cut = len(data) - limit
            mark = TRUNC_MARK.format(n=cut).encode()
            if keep == "head":
                data = data[:limit] + mark
            else:
                data = mark + data[-limit:]
        p = self.path(rel)
        tmp = p.with_name(p.name + ".part")
        tmp.write_bytes(data)
        os.replace(tmp, p)
        return p

    def write_json(self, rel: str, obj: Any, *, cap: int | None = None) -> Path:
        text = json.dumps(obj, indent=1, default=str, sort_keys=False)
        return self.write_text(rel, text + "\n", cap=cap, keep="head")

    def copy_text_file(self, src: Path, rel: str, *, cap: int | None = None) -> Path | None:
        """Copy a (log) file redacted, keeping its tail when over the cap."""
        try:
            size = src.stat().st_size
            limit = cap or self.cap
            with open(src, "rb") as f:
                if size > limit:
                    f.seek(size - limit)
                raw = f.read(limit)
        except OSError:
            return None
        text = raw.decode("utf-8", "replace")
        if size > limit:
            text = TRUNC_MARK.format(n=size - limit) + text
        return self.write_text(rel, text, cap=(cap or self.cap) + 256)

    def copy_binary_file(self, src: Path, rel: str, *, cap: int | None = None) -> Path | None:
        """Copy a binary file (Flight Recorder pickle) unmodified; skipped when over the cap."""
        if self.closed:
            return None
        try:
            if src.stat().st_size > (cap or self.cap):
                return None
            p = self.path(rel)
            shutil.copyfile(src, p)
            return p
        except OSError:
            return None

    # --- manifest ----------------------------------------------------------------------------
    def record(self, rec: CollectorRecord) -> None:
        with self._lock:
            if rec not in self.records:
                self.records.append(rec)
            self._write_manifest()

    def _write_manifest(self) -> None:
        body = {
            "tool": "sm120kit",
            "kind": "collect-bundle",
            "layout_version": 1,
            **self.meta,
            "collectors": [asdict(r) for r in self.records],
        }
        self.write_json("manifest.json", body, cap=16 * 1024 * 1024)

    def write_manifest(self) -> None:
        with self._lock:
            self._write_manifest()

    # --- finishing ---------------------------------------------------------------------------
    def make_tarball(self) -> Path:
        """Pack the directory into ``<name>.tar.gz`` next to it (atomic rename)."""
        tmp = self.tarball.with_name(self.tarball.name + ".part")
        with tarfile.open(tmp, "w:gz", compresslevel=6) as tf:
            for p in sorted(self.root.rglob("*")):
                if p.is_symlink() or p.name.endswith(".part"):
                    continue
                if p.is_file() or p.is_dir():
                    try:
                        tf.add(p, arcname=str(p.relative_to(self.root.parent)), recursive=False)
                    except OSError:
                        continue
        os.replace(tmp, self.tarball)
        return self.tarball


def _make_out_dir(out_dir: Path) -> None:
    """``-o``: create it; a regular file in the way (``-o afile/sub``) or no permission is one
    error line (exit 2), before anything is started."""
    blocker = next((p for p in [out_dir, *out_dir.parents] if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise UserError(f"-o {out_dir}: {blocker} is a file, not a directory",
                        hint="choose an output directory whose parents are directories")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"-o {out_dir}: cannot create the output directory "
                        f"({exc.strerror or exc})",
                        hint="choose a writable output directory") from None
