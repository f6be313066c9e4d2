"""A bundle written because the run stalled (or died) says so: never an all-clear.

``sm120kit collect`` and ``sm120kit warmup run`` write a bundle when a run stops making progress
(silence, a known hang message, a death, an exit) and record why: ``stall.json`` (the stalled
ranks with pid, phase and collective, from the supervisor's own watchdog), ``timeline.json``
(``reason``, ``stall_kind``, ``current_phase``, deaths) and the collectors' statuses in
``manifest.json``. The verdict names the stalled rank and phase from those records, even when no
stack could be taken (py-spy missing or refused).
"""

from __future__ import annotations

import re
from typing import Any

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext, field_phase
from sm120kit.evidence.logs.analyze import Evidence
from sm120kit.report import clip_words

_STALL_KINDS = ("silence", "signal", "death", "exit")
# the warmup/collect supervisors' stall sentence: "rank 2 (pid 77) stopped in phase convert
# outside any collective; ranks [0, 1, 3] wait in all_gather"
_STOPPED = re.compile(r"rank (?P<rank>\d+) \(pid (?P<pid>\d+)\) stopped in phase (?P<phase>[\w-]+)")
_WAIT = re.compile(r"ranks? \[(?P<ranks>[\d, ]+)\] wait in (?P<coll>[\w/, ]+)")


def _rows(stall: dict[str, Any]) -> list[dict[str, Any]]:
    rows = stall.get("ranks")
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def check(ctx: RuleContext) -> list[Finding]:
    b = ctx.bundle
    if b is None:
        return []
    tl = b.timeline or {}
    stall = b.stall or {}
    kind = str(tl.get("stall_kind") or stall.get("kind") or "")
    reason = str(tl.get("reason") or stall.get("message") or "")
    stalled = bool(stall) or kind in _STALL_KINDS or any(
        w in reason for w in ("stall", "no output", "no progress", "hang", "died", "exited with"))
    if not stalled:
        return []
    if kind == "exit":
        return [_exited(reason, tl)]
    ev: list[Evidence] = []
    ranks: list[int] = []
    suspects = [int(r) for r in stall.get("suspects") or [] if isinstance(r, int)]
    rows = _rows(stall)
    outside = [r for r in rows if r.get("rank") in suspects and not r.get("collective")]
    waiting = [r for r in rows if r.get("collective")]
    phase = None
    if outside:
        r0 = outside[0]
        ranks = [int(r["rank"]) for r in outside]
        phase = str(r0.get("phase") or "")
        what = (f"rank {r0['rank']} (pid {r0.get('pid')}) stopped in phase {phase} outside any "
                "collective")
        if waiting:
            what += (f" while rank(s) {[r['rank'] for r in waiting]} wait in "
                     f"{', '.join(sorted({str(r['collective']) for r in waiting}))}")
        ev.append(Evidence("stall.json", 0, f"suspects {suspects}: " + "; ".join(
            f"rank {r.get('rank')} phase {r.get('phase')} collective {r.get('collective')} "
            f"silent {r.get('silent_for_s')} s" for r in rows[:6])))
    else:
        m = _STOPPED.search(reason)
        if m:
            ranks, phase = [int(m.group("rank"))], m.group("phase")
            what = f"rank {m.group('rank')} (pid {m.group('pid')}) stopped in phase {phase}"
            w = _WAIT.search(reason)
            what += f" outside any collective while ranks [{w.group('ranks')}] wait in " \
                    f"{w.group('coll')}" if w else ""
        elif rows and waiting and len(waiting) == len(rows):
            colls = sorted({str(r["collective"]) for r in waiting})
            what = f"every rank waits in {', '.join(colls)}"
            phase = str(rows[0].get("phase") or "")
        else:
            phase = str(tl.get("current_phase") or "") or None
            if phase in ("error", "shutdown"):
                phase = None
            what = (f"{reason}" if reason else f"the run stopped ({kind or 'stall'})") + (
                f" (phase {phase})" if phase else "")
    ev.append(Evidence("timeline.json", 0, f"reason: {reason}" + (f" (stall kind {kind})"
                                                                   if kind else "")))
    bad = [c for c in b.collectors if c.get("status") in ("error", "timeout", "skipped")
           and c.get("name") in ("stacks", "flight", "ras", "nvml", "vllm-watchdog")]
    if bad:
        ev.append(Evidence("manifest.json", 0, "collectors: " + "; ".join(
            f"{c.get('name')} {c.get('status')}: {clip_words(str(c.get('error') or ''), 100)}"
            for c in bad[:4])))
    cat = "unknown"
    if outside or _STOPPED.search(reason):
        cat = "collective-desync"  # one rank is not where the others wait
    elif waiting and rows and len(waiting) == len(rows):
        cat = "kernel-hang"
    fp = field_phase(phase) or (phase if phase not in ("error", "shutdown") else None) or None
    return [RULE.finding(
        0.8 if cat != "unknown" else 0.6,
        f"the bundle was written because the run stalled: {what}", ev, ranks=ranks,
        category=cat, phase=fp, role="position",
        tier="disagreement" if cat != "unknown" else "config",
        fix=None if ranks else NO_RANK_FIX)]


#: the fix when no rank is named (one process, or a stall the ranks do not tell apart)
NO_RANK_FIX = ("No rank stands out: read the last lines of the log (logs/child.log, logs/by-source/) "
               "and each rank's stack (stacks/<pid>.txt, the --native samples for CUDA waits) side "
               "by side. If no stack was taken, install py-spy (and allow ptrace) so the next bundle "
               "has one.")


def _exited(reason: str, tl: dict[str, Any]) -> Finding:
    """The command exited by itself (a non-zero code): an exit, not a stall; no stack advice."""
    code = tl.get("exit_code")
    return RULE.finding(
        0.6, f"the bundle was written because the command exited with code {code}, not because "
        "it stalled", [Evidence("timeline.json", 0, f"reason: {reason} (stall kind exit)")],
        category="unknown", role="position", tier="config",
        fix="Read the command's last output (logs/child.log and logs/by-source/): its exit "
            "code and last lines say why it stopped; nothing was hung, so no stacks are needed.")


RULE = Rule(
    id="bundle-stall",
    category="unknown",
    needs="bundle stall.json (stalled ranks, phases, collectives), timeline.json reason / "
          "stall_kind / current_phase, manifest.json collector statuses",
    tier="disagreement",
    check=check,
    fix="Look at the named rank first: its last log lines and, when taken, its stack "
        "(stacks/<pid>.json); the other ranks only wait for it. If no stack was taken, install "
        "py-spy (and allow ptrace) so the next bundle has one.",
    link=None,
)
