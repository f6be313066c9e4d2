"""torch watchdog records that disagree across ranks: a rank that never reached collective N, or
the same collective with different sizes/types (a mismatch)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence
from sm120kit.evidence.logs.parsers import WatchdogRecord

MAX_LAG = 64  # SeqNums further apart than this are not one group's lagging rank
SAME_RUN_S = 1800.0  # watchdog lines of one run fire within the timeout of each other


def watchdog_by_rank(recs: list[tuple[WatchdogRecord, Evidence, str]]) -> dict[int, dict[str, object]]:
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


def check(ctx: RuleContext) -> list[Finding]:
    out: list[Finding] = []
    for recs in _same_run(ctx.facts.waits.watchdog):
        out += _check_run(recs)
    return out


def _same_run(recs: Sequence[tuple[WatchdogRecord, Evidence, str]]
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


def _check_run(recs: list[tuple[WatchdogRecord, Evidence, str]]) -> list[Finding]:
    view = watchdog_by_rank(recs)
    out: list[Finding] = []
    # the same PG, several ranks; some PG labels are per-rank ("PG 3 Rank 3"), so group the
    # ranks that timed out on the same SeqNum/op when PGs do not line up
    by_seq: dict[int, list[tuple[int, dict[str, object]]]] = defaultdict(list)
    for rank, d in view.items():
        seq = d.get("seq")
        if isinstance(seq, int):
            by_seq[seq].append((rank, d))
    # ranks of one process group are at most a few collectives apart; SeqNums thousands apart come
    # from different runs or groups pasted together: not a lagging rank
    close = bool(by_seq) and max(by_seq) - min(by_seq) <= MAX_LAG
    if len(by_seq) > 1 and len(view) > 1 and close:
        seqs = sorted(by_seq)
        lo = seqs[0]
        behind = sorted(r for r, _d in by_seq[lo])
        ev = [e for _r, d in by_seq[lo] for e in d["ev"]][:3]  # type: ignore[attr-defined]
        ev += [e for s in seqs[1:] for _r, d in by_seq[s] for e in d["ev"]][:3]  # type: ignore[attr-defined]
        out.append(RULE.finding(
            0.85,
            f"watchdog timeouts disagree: rank(s) {behind} stopped at SeqNum {lo}, others at "
            f"{', '.join(str(s) for s in seqs[1:])}: the lagging rank(s) never reached the "
            "next collective", ev, ranks=behind))
    for seq, items in by_seq.items():
        sizes = {(d.get("op"), d.get("numel_in")) for _r, d in items if d.get("numel_in") is not None}
        if len(sizes) > 1:
            ev = [e for _r, d in items for e in d["ev"]][:4]  # type: ignore[attr-defined]
            desc = "; ".join(f"rank {r}: {d.get('op')} NumelIn={d.get('numel_in')}" for r, d in items)
            out.append(RULE.finding(
                0.88, f"collective mismatch at SeqNum {seq}: {desc}", ev,
                ranks=sorted(r for r, _d in items),
                fix="The ranks issued different collectives at the same point: look for a "
                    "rank-local decision (spec-decode/MTP acceptance, DCP shape, per-rank "
                    "warmup) that changes the sequence of collectives."))
    # last enqueued < the timed-out seq on some rank: it never enqueued it
    lag = []
    for rank, d in view.items():
        enq, sq = d.get("last_enqueued"), d.get("seq")
        if isinstance(enq, int) and isinstance(sq, int) and 0 <= enq < sq:
            lag.append((rank, d))
    if lag:
        ev = [e for _r, d in lag for e in d["ev"]][:3]  # type: ignore[attr-defined]
        out.append(RULE.finding(
            0.84, "rank(s) " + ", ".join(str(r) for r, _ in lag)
            + " never enqueued the collective the others timed out on", ev,
            ranks=sorted(r for r, _ in lag)))
    return out


RULE = Rule(
    id="watchdog-desync",
    category="collective-desync",
    needs="torch watchdog lines (WorkNCCL SeqNum/OpType/NumelIn, last enqueued/completed) "
          "from two or more ranks",
    tier="disagreement",
    check=check,
    fix="Find why the lagging rank did not reach that collective (its last log lines, its stack "
        "in a `sm120kit collect` bundle); the watchdog names the first *torch* op queued behind "
        "the stall, which can be later than the one that hung.",
    link="https://pytorch.org/tutorials/prototype/flight_recorder_tutorial.html",
)
