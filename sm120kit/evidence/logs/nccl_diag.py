"""NCCL's own diagnostics report (NCCL >= 2.31, ``NCCL_RUN_DIAGNOSTICS=1`` /
``NCCL_RUN_RAS_DIAGNOSTICS=1``): the ``NCCL DIAG`` lines.

Formats verified against the strings of libnccl.so.2 in the nvidia-nccl-cu13 2.32.3 wheel
(``%s:%d NCCL DIAG <text>``, i.e. ``host:pid NCCL DIAG ...``):

* ``=== NCCL Diagnostics ===`` / ``=== RAS Diagnostics ===`` (report headers);
* ``[OK]   p2p: verified P2P access in both directions between every GPU pair (N peer
  accesses)``;
* ``[INFO] p2p: only X/Y GPU-to-GPU peer accesses passed verification`` (some pair failed);
* per failing pair: ``[INFO] p2p: write mismatch|read mismatch|peer-memory import failed|
  destination buffer unavailable|local CUDA setup failed|topology check failed|launch/check
  failed <pair> ...`` where ``<pair>`` is ``srcRank=%d srcCudaDev=%d srcNvmlDev=%d dstRank=%d
  dstCudaDev=%d dstNvmlDev=%d path=%s handle=%s``;
* ``NCCL diagnostics completed in %.1f ms across %d ranks``;
* ``net bw: ...`` (multi-node communicators).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

MARK = " NCCL DIAG "
_OK = re.compile(r"p2p: verified P2P access in both directions between every GPU pair "
                 r"\((?P<n>\d+) peer accesses\)")
_ONLY = re.compile(r"p2p: only (?P<ok>\d+)/(?P<total>\d+) GPU-to-GPU peer accesses passed")
_FAIL = re.compile(r"p2p: (?P<what>write mismatch|read mismatch|peer-memory import failed|"
                   r"destination buffer unavailable|local CUDA setup failed|topology check "
                   r"failed|launch/check failed)\b(?P<rest>.*)")
_PAIR = re.compile(r"srcRank=(?P<sr>\d+) srcCudaDev=(?P<sd>\d+) srcNvmlDev=(?P<sn>\d+) "
                   r"dstRank=(?P<dr>\d+) dstCudaDev=(?P<dd>\d+) dstNvmlDev=(?P<dn>\d+) "
                   r"path=(?P<path>\S+)")
_DONE = re.compile(r"NCCL diagnostics completed in (?P<ms>[\d.]+) ms across (?P<ranks>\d+) ranks")
_REASON = re.compile(r"reason=(?P<r>[^;]+)")


@dataclass
class NcclDiag:
    """What the NCCL DIAG lines of one log said."""

    reports: int = 0
    ras_reports: int = 0
    p2p_ok: int | None = None        # peer accesses verified (all pairs passed)
    p2p_passed: int | None = None    # X of "only X/Y"
    p2p_total: int | None = None
    failures: list[dict[str, Any]] = field(default_factory=list)
    completed_ms: float | None = None
    ranks: int | None = None
    lines: list[str] = field(default_factory=list)

    @property
    def seen(self) -> bool:
        return bool(self.lines)

    @property
    def p2p_failed(self) -> bool:
        return bool(self.failures) or (self.p2p_passed is not None
                                       and self.p2p_passed < (self.p2p_total or 0))

    def feed(self, line: str) -> bool:
        i = line.find(MARK)
        if i < 0:
            return False
        text = line[i + len(MARK):].strip()
        if len(self.lines) < 200:
            self.lines.append(line.strip()[-400:])
        if "=== NCCL Diagnostics ===" in text:
            self.reports += 1
        elif "=== RAS Diagnostics ===" in text:
            self.ras_reports += 1
        elif m := _OK.search(text):
            self.p2p_ok = int(m.group("n"))
        elif m := _ONLY.search(text):
            self.p2p_passed, self.p2p_total = int(m.group("ok")), int(m.group("total"))
        elif m := _FAIL.search(text):
            rec: dict[str, Any] = {"what": m.group("what")}
            if p := _PAIR.search(m.group("rest")):
                rec.update(src_rank=int(p.group("sr")), src_dev=int(p.group("sd")),
                           dst_rank=int(p.group("dr")), dst_dev=int(p.group("dd")),
                           path=p.group("path"))
            if r := _REASON.search(m.group("rest")):
                rec["reason"] = r.group("r").strip()
            if len(self.failures) < 64:
                self.failures.append(rec)
        elif m := _DONE.search(text):
            self.completed_ms, self.ranks = float(m.group("ms")), int(m.group("ranks"))
        return True

    def summary(self) -> str:
        if self.p2p_failed:
            pairs = ", ".join(
                f"rank {f.get('src_rank')}->{f.get('dst_rank')} via {f.get('path')}: {f['what']}"
                for f in self.failures[:4] if "src_rank" in f)
            count = (f"{self.p2p_passed}/{self.p2p_total} peer accesses passed"
                     if self.p2p_total else f"{len(self.failures)} failing pair(s)")
            return f"NCCL's own P2P diagnostics failed: {count}" + (f" ({pairs})" if pairs else "")
        if self.p2p_ok is not None:
            return f"NCCL's own P2P diagnostics passed ({self.p2p_ok} peer accesses)"
        return f"{len(self.lines)} NCCL DIAG line(s)"

    def to_dict(self) -> dict[str, Any]:
        return {"reports": self.reports, "ras_reports": self.ras_reports, "p2p_ok": self.p2p_ok,
                "p2p_passed": self.p2p_passed, "p2p_total": self.p2p_total,
                "p2p_failed": self.p2p_failed, "failures": self.failures,
                "completed_ms": self.completed_ms, "ranks": self.ranks,
                "summary": self.summary()}
