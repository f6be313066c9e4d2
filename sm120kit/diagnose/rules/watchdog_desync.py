"""torch watchdog records that disagree across ranks: a rank that never reached collective N, or
the same collective with different sizes/types (a mismatch)."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.diagnose.rules.watchdog_runs import (
    MAX_LAG,
    ranks_by_seq,
    same_run,
    watchdog_by_rank,
)
from sm120kit.evidence.logs.analyze import Evidence
from sm120kit.evidence.logs.parsers import WatchdogRecord


def check(ctx: RuleContext) -> list[Finding]:
    out: list[Finding] = []
    for recs in same_run(ctx.facts.waits.watchdog):
        out += _check_run(recs)
    return out


def _check_run(recs: list[tuple[WatchdogRecord, Evidence, str]]) -> list[Finding]:
    view = watchdog_by_rank(recs)
    out: list[Finding] = []
    by_seq = ranks_by_seq(view)
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
