"""torch watchdog records grouped: by rank (the combined view of one rank's lines) and by run
(a paste may quote several launches, whose sequence numbers are unrelated). Structure for the
``watchdog-desync`` rule and the engine's per-rank table."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from sm120kit.evidence.logs.analyze import Evidence
from sm120kit.evidence.logs.parsers import WatchdogRecord

MAX_LAG = 64  # SeqNums further apart than this are not one group's lagging rank
SAME_RUN_S = 1800.0  # watchdog lines of one run fire within the timeout of each other


def watchdog_by_rank(recs: Sequence[tuple[WatchdogRecord, Evidence, str]]) -> dict[int, dict[str, object]]:
    """rank → the combined view of that rank's watchdog lines (first PG named wins)."""
    out: dict[int, dict[str, object]] = {}
    for r, ev, _k in recs:
        if r.rank is None:
            continue
        d = out.setdefault(r.rank, {"ev": [], "pg": r.pg})
        for f in ("seq", "op", "numel_in", "numel_out", "timeout_ms", "ran_ms", "last_enqueued",
                  "last_completed"):
            v = getattr(r, f)
            if v is not None and d.get(f) is None:
                d[f] = v
        evs = d["ev"]
        assert isinstance(evs, list)
        if len(evs) < 2:
            evs.append(ev)
    return out


def same_run(recs: Sequence[tuple[WatchdogRecord, Evidence, str]]
              ) -> list[list[tuple[WatchdogRecord, Evidence, str]]]:
    """Watchdog records grouped by launch: a paste may quote lines of several runs, whose
    sequence numbers are unrelated. Within a launch, records with another timeout or a rank that
    already reported another SeqNum start a new group."""
    groups: dict[tuple[int, int | None, int], list[tuple[WatchdogRecord, Evidence, str]]] = {}
    # a new time cluster when two timed records are further apart than a run's timeouts
    cluster, prev_t = 0, None
    for r, ev, k in sorted(recs, key=lambda x: (x[0].run, x[0].t if x[0].t is not None else 0.0)):
        if r.t is not None:
            if prev_t is not None and r.t - prev_t > SAME_RUN_S:
                cluster += 1
            prev_t = r.t
        groups.setdefault((r.run, r.timeout_ms, cluster), []).append((r, ev, k))
    out = []
    for g in groups.values():
        seqs: dict[int, set[int]] = defaultdict(set)
        for r, _e, _k in g:
            if r.rank is not None and r.seq is not None and r.op is not None:
                seqs[r.rank].add(r.seq)
        if any(len(v) > 1 for v in seqs.values()):
            continue  # one rank at two SeqNums: records of different runs, not comparable
        out.append(g)
    return out


def ranks_by_seq(view: dict[int, dict[str, object]]) -> dict[int, list[tuple[int, dict[str, object]]]]:
    """SeqNum → the ranks that timed out on it. Some PG labels are per-rank ("PG 3 Rank 3"), so
    the ranks of the same SeqNum/op are grouped when PGs do not line up."""
    by_seq: dict[int, list[tuple[int, dict[str, object]]]] = defaultdict(list)
    for rank, d in view.items():
        seq = d.get("seq")
        if isinstance(seq, int):
            by_seq[seq].append((rank, d))
    return by_seq
