"""A bundle written because the run stalled (or died) says so: never an all-clear.

The supervisor's record (``BundleFacts.stall_record``: stall.json, timeline.json, read by
``sm120kit.evidence.stall_record``) names the stalled rank and phase, even when no stack could
be taken (py-spy missing or refused): one rank outside any collective while the others wait is
a desync, every rank waiting in one a kernel that never returns. A command that exited by itself
is an exit, not a stall.
"""

from __future__ import annotations

from sm120kit.diagnose.facts import StallRecord
from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext, field_phase
from sm120kit.evidence.logs.analyze import Evidence


def check(ctx: RuleContext) -> list[Finding]:
    b = ctx.bundle
    rec = b.stall_record if b is not None else None
    if b is None or rec is None:
        return []
    if rec.exited:
        return [_exited(rec)]
    pos = rec.position()
    cat = pos.category
    phase = pos.phase
    fp = field_phase(phase) or (phase if phase not in ("error", "shutdown") else None) or None
    return [RULE.finding(
        0.8 if cat != "unknown" else 0.6,
        f"the bundle was written because the run stalled: {pos.what}", rec.evidence(b.collectors),
        ranks=pos.ranks, category=cat, phase=fp, role="position",
        tier="disagreement" if cat != "unknown" else "config",
        fix=None if pos.ranks else NO_RANK_FIX)]


#: the fix when no rank is named (one process, or a stall the ranks do not tell apart)
NO_RANK_FIX = ("No rank stands out: read the last lines of the log (logs/child.log, logs/by-source/) "
               "and each rank's stack (stacks/<pid>.txt, the --native samples for CUDA waits) side "
               "by side. If no stack was taken, install py-spy (and allow ptrace) so the next bundle "
               "has one.")


def _exited(rec: StallRecord) -> Finding:
    """The command exited by itself (a non-zero code): an exit, not a stall; no stack advice."""
    return RULE.finding(
        0.6, f"the bundle was written because the command exited with code {rec.exit_code}, not "
        "because it stalled", [Evidence("timeline.json", 0, f"reason: {rec.reason} (stall kind exit)")],
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
