"""What a bundle's own stall record says, read once into typed facts.

``sm120kit collect`` and ``sm120kit warmup run`` write a bundle when a run stops making progress
(silence, a known hang message, a death, an exit) and record why: ``stall.json`` (the stalled
ranks with pid, phase and collective, the suspects, from the supervisor's own watchdog) and
``timeline.json`` (``reason``, ``stall_kind``, ``current_phase``, ``exit_code``). ``read_stall``
turns the two into a :class:`StallRecord`; :meth:`StallRecord.position` says where the run
stopped: the rank outside any collective while the others wait (a desync), every rank waiting
in one (a kernel that never returns), or only the supervisor's reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from sm120kit.evidence.logs.records import Evidence
from sm120kit.report import clip_words

STALL_KINDS = ("silence", "signal", "death", "exit")
_STALL_WORDS = ("stall", "no output", "no progress", "hang", "died", "exited with")
# the warmup/collect supervisors' stall sentence: "rank 2 (pid 77) stopped in phase convert
# outside any collective; ranks [0, 1, 3] wait in all_gather"
_STOPPED = re.compile(r"rank (?P<rank>\d+) \(pid (?P<pid>\d+)\) stopped in phase (?P<phase>[\w-]+)")
_WAIT = re.compile(r"ranks? \[(?P<ranks>[\d, ]+)\] wait in (?P<coll>[\w/, ]+)")
#: the collectors whose failure leaves the record without stacks, Flight Recorder or GPU state
_POSITION_COLLECTORS = ("stacks", "flight", "ras", "nvml", "vllm-watchdog")

StallCategory = Literal["collective-desync", "kernel-hang", "unknown"]


@dataclass(frozen=True)
class StallPosition:
    """Where the record says the run stopped."""

    what: str  # "rank 2 (pid 77) stopped in phase convert outside any collective while ..."
    ranks: list[int]
    phase: str | None
    category: StallCategory  # desync: one rank elsewhere; kernel-hang: every rank waits


@dataclass(frozen=True)
class StallRecord:
    kind: str  # stall_kind (silence | signal | death | exit) or ""
    reason: str
    current_phase: str | None
    exit_code: Any
    suspects: list[int] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)  # stall.json's per-rank rows

    @property
    def exited(self) -> bool:
        """The command exited by itself: an exit, not a stall."""
        return self.kind == "exit"

    @property
    def outside(self) -> list[dict[str, Any]]:
        """Suspect ranks outside any collective."""
        return [r for r in self.rows if r.get("rank") in self.suspects and not r.get("collective")]

    @property
    def waiting(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r.get("collective")]

    @property
    def all_wait(self) -> bool:
        return bool(self.rows) and len(self.waiting) == len(self.rows)

    def position(self) -> StallPosition:
        outside, waiting = self.outside, self.waiting
        if outside:
            r0 = outside[0]
            phase = str(r0.get("phase") or "")
            what = (f"rank {r0['rank']} (pid {r0.get('pid')}) stopped in phase {phase} outside "
                    "any collective")
            if waiting:
                what += (f" while rank(s) {[r['rank'] for r in waiting]} wait in "
                         f"{', '.join(sorted({str(r['collective']) for r in waiting}))}")
            return StallPosition(what, [int(r["rank"]) for r in outside], phase,
                                 "collective-desync")
        m = _STOPPED.search(self.reason)
        if m:
            what = f"rank {m.group('rank')} (pid {m.group('pid')}) stopped in phase {m['phase']}"
            w = _WAIT.search(self.reason)
            what += (f" outside any collective while ranks [{w.group('ranks')}] wait in "
                     f"{w.group('coll')}") if w else ""
            return StallPosition(what, [int(m.group("rank"))], m["phase"], "collective-desync")
        if self.all_wait:
            colls = sorted({str(r["collective"]) for r in waiting})
            return StallPosition(f"every rank waits in {', '.join(colls)}", [],
                                 str(self.rows[0].get("phase") or ""), "kernel-hang")
        cur = self.current_phase if self.current_phase not in ("error", "shutdown") else None
        what = self.reason or f"the run stopped ({self.kind or 'stall'})"
        return StallPosition(what + (f" (phase {cur})" if cur else ""), [], cur, "unknown")

    def evidence(self, collectors: list[dict[str, Any]]) -> list[Evidence]:
        """The record's own lines: the stall.json rows (when a suspect is outside any
        collective), the timeline's reason, the position collectors that failed."""
        ev: list[Evidence] = []
        if self.outside:
            ev.append(Evidence("stall.json", 0, f"suspects {self.suspects}: " + "; ".join(
                f"rank {r.get('rank')} phase {r.get('phase')} collective {r.get('collective')} "
                f"silent {r.get('silent_for_s')} s" for r in self.rows[:6])))
        ev.append(Evidence("timeline.json", 0, f"reason: {self.reason}"
                           + (f" (stall kind {self.kind})" if self.kind else "")))
        bad = [c for c in collectors if c.get("status") in ("error", "timeout", "skipped")
               and c.get("name") in _POSITION_COLLECTORS]
        if bad:
            ev.append(Evidence("manifest.json", 0, "collectors: " + "; ".join(
                f"{c.get('name')} {c.get('status')}: {clip_words(str(c.get('error') or ''), 100)}"
                for c in bad[:4])))
        return ev


def read_stall(timeline: dict[str, Any] | None, stall: dict[str, Any] | None) -> StallRecord | None:
    """The record of a bundle written because the run stalled, died or exited; None when the
    bundle says no such thing (a snapshot taken on request)."""
    tl, st = timeline or {}, stall or {}
    kind = str(tl.get("stall_kind") or st.get("kind") or "")
    reason = str(tl.get("reason") or st.get("message") or "")
    if not (st or kind in STALL_KINDS or any(w in reason for w in _STALL_WORDS)):
        return None
    rows = st.get("ranks")
    return StallRecord(
        kind=kind, reason=reason, current_phase=str(tl.get("current_phase") or "") or None,
        exit_code=tl.get("exit_code"),
        suspects=[int(r) for r in st.get("suspects") or [] if isinstance(r, int)],
        rows=[r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else [])
