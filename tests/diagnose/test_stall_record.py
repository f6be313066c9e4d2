"""The supervisor's stall record (stall.json + timeline.json) read into typed facts
(``evidence.stall_record``), each branch the bundle-stall rule decides on. The records have the
shape ``sm120kit collect`` / ``warmup run`` write (services/bundle, warmup/runner)."""

from __future__ import annotations

from typing import Any

import pytest

from sm120kit.evidence.stall_record import read_stall


def _row(rank: int, phase: str, coll: str | None) -> dict[str, Any]:
    return {"rank": rank, "pid": 100 + rank, "phase": phase, "collective": coll,
            "silent_for_s": 61.0}


CASES = [
    # one suspect outside any collective while the others wait in one: a desync
    ({"reason": "stall: no output for 60 s", "stall_kind": "silence"},
     {"suspects": [2], "ranks": [_row(0, "load", "all_gather"), _row(1, "load", "all_gather"),
                                 _row(2, "convert", None)]},
     "rank 2 (pid 102) stopped in phase convert outside any collective while rank(s) [0, 1] "
     "wait in all_gather", [2], "convert", "collective-desync", ["stall.json", "timeline.json"]),
    # no stall.json: the supervisor's sentence alone names the rank
    ({"reason": "rank 2 (pid 77) stopped in phase convert outside any collective; ranks "
               "[0, 1, 3] wait in all_gather", "stall_kind": "silence"}, None,
     "rank 2 (pid 77) stopped in phase convert outside any collective while ranks [0, 1, 3] "
     "wait in all_gather", [2], "convert", "collective-desync", ["timeline.json"]),
    # every rank waits in a collective: nobody is elsewhere, a kernel never returned
    ({"reason": "stall", "stall_kind": "silence"},
     {"suspects": [], "ranks": [_row(0, "capture", "all_reduce"), _row(1, "capture", "all_reduce")]},
     "every rank waits in all_reduce", [], "capture", "kernel-hang", ["timeline.json"]),
    # only the reason; a terminal phase ("error") is no phase
    ({"reason": "no progress for 300 s", "current_phase": "error"}, None,
     "no progress for 300 s", [], None, "unknown", ["timeline.json"]),
    ({"stall_kind": "death", "current_phase": "load"}, None,
     "the run stopped (death) (phase load)", [], "load", "unknown", ["timeline.json"]),
]


@pytest.mark.parametrize(("tl", "stall", "what", "ranks", "phase", "cat", "refs"), CASES)
def test_position_of_each_kind_of_record(tl: dict[str, Any], stall: dict[str, Any] | None,
                                         what: str, ranks: list[int], phase: str | None, cat: str,
                                         refs: list[str]) -> None:
    rec = read_stall(tl, stall)
    assert rec is not None and not rec.exited
    pos = rec.position()
    assert (pos.what, pos.ranks, pos.phase, pos.category) == (what, ranks, phase, cat)
    assert [e.source for e in rec.evidence([])] == refs


def test_no_record_exit_and_failed_collectors() -> None:
    assert read_stall({"reason": "snapshot on request"}, None) is None
    assert read_stall(None, None) is None
    rec = read_stall({"reason": "command exited with code 3", "stall_kind": "exit",
                      "exit_code": 3}, None)
    assert rec is not None and rec.exited and rec.exit_code == 3
    ev = rec.evidence([{"name": "stacks", "status": "error", "error": "py-spy: not found"},
                       {"name": "logs", "status": "error", "error": "ignored: not a position"}])
    assert [e.source for e in ev] == ["timeline.json", "manifest.json"]
    assert ev[-1].text == "collectors: stacks error: py-spy: not found"
    # malformed rows and suspects are dropped, not raised on
    rec = read_stall({}, {"suspects": ["2", 1], "ranks": ["x", _row(1, "load", None)]})
    assert rec is not None and rec.suspects == [1] and rec.position().ranks == [1]
