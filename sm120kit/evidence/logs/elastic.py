"""torchrun's (torch.distributed.elastic) own account of a failed job, read as typed facts.

Two shapes, both printed by ``torch/distributed/elastic``: the agent's line
``failed (exitcode: -9) local_rank: 5 (pid: 2630) of binary: ...`` and the ``ChildFailedError``
summary: ``Root Cause (first observed failure):`` then ``[0]:`` and ``key : value`` lines
(``rank : 0 (local_rank: 0)``, ``exitcode : 1 (pid: 78970)``, ``error_file``, ``traceback``),
after ``Failures:`` the other ranks the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sm120kit.evidence.logs.records import Evidence

_AGENT = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<lr>\d+) \(pid: (?P<pid>\d+)\)")
_FIELD = re.compile(r"^\s*(?P<k>time|host|rank|exitcode|error_file|traceback)\s*: (?P<v>.*)$")
_HEAD = re.compile(r"^\s*(?:Root Cause \(first observed failure\)|Failures):\s*$")
_INT = re.compile(r"-?\d+")
MAX = 16


@dataclass
class ElasticFailure:
    root: bool  # the "Root Cause (first observed failure)" entry
    ev: Evidence
    rank: int | None = None
    local_rank: int | None = None
    exitcode: int | None = None
    pid: int | None = None
    host: str | None = None
    error_file: str | None = None
    traceback: str | None = None

    @property
    def signal(self) -> int | None:
        """A negative exit code is the signal that ended the process (-9: SIGKILL)."""
        return -self.exitcode if self.exitcode is not None and self.exitcode < 0 else None


class ElasticSummary:
    def __init__(self) -> None:
        self.failures: list[ElasticFailure] = []
        self._section: str | None = None  # "root" | "other" while inside the summary
        self._cur: ElasticFailure | None = None

    @property
    def root(self) -> ElasticFailure | None:
        return next((f for f in self.failures if f.root), None) or (
            self.failures[0] if self.failures else None)

    def feed(self, msg: str, ev: Evidence) -> None:
        if "exitcode" in msg and "local_rank" in msg and (m := _AGENT.search(msg)):
            self._add(ElasticFailure(False, ev, None, int(m["lr"]), int(m["code"]), int(m["pid"])))
            return
        if ("Root Cause" in msg or "Failures:" in msg) and _HEAD.match(msg):
            self._section = "root" if msg.strip().startswith("Root") else "other"
            return
        if self._section is None:  # every line outside the summary stops here
            return
        if re.match(r"^\s*\[\d+\]:\s*$", msg):
            self._cur = self._add(ElasticFailure(self._section == "root", ev))
            return
        f = _FIELD.match(msg)
        if f is None:
            if msg.strip().startswith("="):
                self._section = self._cur = None
            return
        if self._cur is not None:
            self._set(self._cur, f["k"], f["v"].strip())

    def _add(self, f: ElasticFailure) -> ElasticFailure:
        if len(self.failures) < MAX:
            self.failures.append(f)
        return f

    @staticmethod
    def _set(cur: ElasticFailure, key: str, val: str) -> None:
        nums = [int(x) for x in _INT.findall(val)]
        if key == "rank" and nums:
            cur.rank, cur.local_rank = nums[0], (nums[1] if len(nums) > 1 else None)
        elif key == "exitcode" and nums:
            cur.exitcode, cur.pid = nums[0], (nums[1] if len(nums) > 1 else None)
        elif key in ("host", "error_file", "traceback"):
            setattr(cur, key, None if val in ("<N/A>", "") else val)
            if key == "traceback" and val.startswith("Signal ") and nums and cur.exitcode is None:
                cur.exitcode = -nums[0]  # "Signal 9 (SIGKILL) received by PID 2630"
