"""The diagnosis knowledge base: one rule per module, registered in ``RULES``.

``run_rules(ctx)`` runs every rule (a failing rule is reported, never raised) and returns the
findings sorted by confidence, highest first.
"""

from __future__ import annotations

from sm120kit.diagnose.rules import (
    collective_not_started,
    config_invalid,
    dcp_cudagraph,
    dcp_not_engaged,
    dcp_unsupported,
    dcp_warmup,
    device_fault,
    doctor_checks,
    first_dead_rank,
    flight_recorder,
    interposer,
    kernel_hang,
    library_version,
    nccl_counters,
    nccl_diag,
    out_of_memory,
    p2p_transport,
    ras_state,
    shared_memory,
    stack_asymmetry,
    stall_unexplained,
    timeout_too_short,
    watchdog_desync,
)
from sm120kit.diagnose.rules.base import CATEGORIES, Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence

RULES: tuple[Rule, ...] = (
    first_dead_rank.RULE,
    out_of_memory.RULE,
    dcp_unsupported.RULE,
    config_invalid.RULE,
    library_version.RULE,
    shared_memory.RULE,
    device_fault.RULE,
    watchdog_desync.RULE,
    nccl_counters.RULE,
    nccl_diag.RULE,
    flight_recorder.RULE,
    ras_state.RULE,
    dcp_warmup.RULE,
    timeout_too_short.RULE,
    stack_asymmetry.RULE,
    collective_not_started.RULE,
    kernel_hang.RULE,
    p2p_transport.RULE,
    dcp_cudagraph.RULE,
    dcp_not_engaged.RULE,
    interposer.RULE,
    doctor_checks.RULE,
    stall_unexplained.RULE,
)
assert all(r.category in CATEGORIES for r in RULES)
assert len({r.id for r in RULES}) == len(RULES)


def run_rules(ctx: RuleContext) -> list[Finding]:
    out: list[Finding] = []
    for rule in RULES:
        try:
            found = rule.check(ctx)
        except Exception as exc:  # a rule bug must not hide the other findings
            found = [Finding(rule=rule.id, category="unknown", confidence=0.0,
                             summary=f"rule {rule.id} failed: {type(exc).__name__}: {exc}",
                             evidence=[Evidence("sm120kit", 0, "internal rule error")])]
        out.extend(f for f in found if f.category in CATEGORIES)
    specific = [f for f in out if f.rule != "stall-unexplained" and f.confidence >= 0.4]
    if specific:
        out = [f for f in out if f.rule != "stall-unexplained"]
    # the first dead rank explains later cascades; when a more specific rule names the same
    # cause (OOM, DCP rejection, config), keep both but rank the specific one first
    out.sort(key=lambda f: (-f.confidence, f.rule))
    return out


__all__ = ["CATEGORIES", "RULES", "RuleContext", "Finding", "Rule", "run_rules"]
