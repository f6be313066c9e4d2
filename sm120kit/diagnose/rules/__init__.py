"""The diagnosis knowledge base: one rule per module, registered in ``RULES``.

``run_rules(ctx)`` runs every rule (a failing rule is reported, never raised) and returns the
findings sorted by confidence, highest first.
"""

from __future__ import annotations

from sm120kit.diagnose.rules import (
    autotune_deadlock,
    bundle_stall,
    capture_stall,
    catalogue_match,
    cold_start_timeout,
    collective_not_started,
    cross_node,
    cuda_sync_hang,
    dcp_cudagraph,
    dcp_not_engaged,
    dcp_warmup,
    device_fault,
    doctor_checks,
    elastic_failure,
    error_evidence,
    first_dead_rank,
    flight_recorder,
    gpu_sharing,
    index_match,
    kernel_hang,
    kv_cache_insufficient,
    library_version,
    nccl_counters,
    nccl_diag,
    node_lost,
    p2p_transport,
    pasted_stack,
    ras_state,
    serving_stall,
    stack_asymmetry,
    stall_unexplained,
    stated_failure,
    stopped_excerpt,
    timeout_too_short,
    traceback_frames,
    watchdog_desync,
)
from sm120kit.diagnose.rules.base import CATEGORIES, Finding, Rule, RuleContext
from sm120kit.diagnose.rules.fold import fold
from sm120kit.evidence.logs.analyze import Evidence

RULES: tuple[Rule, ...] = (
    bundle_stall.RULE,
    first_dead_rank.RULE,
    elastic_failure.RULE,
    catalogue_match.RULE,
    index_match.RULE,
    kv_cache_insufficient.RULE,
    cold_start_timeout.RULE,
    serving_stall.RULE,
    autotune_deadlock.RULE,
    capture_stall.RULE,
    pasted_stack.RULE,
    library_version.RULE,
    device_fault.RULE,
    watchdog_desync.RULE,
    nccl_counters.RULE,
    nccl_diag.RULE,
    flight_recorder.RULE,
    ras_state.RULE,
    dcp_warmup.RULE,
    timeout_too_short.RULE,
    cross_node.RULE,
    node_lost.LOST,
    stack_asymmetry.RULE,
    collective_not_started.RULE,
    kernel_hang.RULE,
    cuda_sync_hang.RULE,
    p2p_transport.RULE,
    gpu_sharing.RULE,
    dcp_cudagraph.RULE,
    dcp_not_engaged.RULE,
    doctor_checks.RULE,
    traceback_frames.RULE,
    stall_unexplained.RULE,
    error_evidence.RULE,
    stopped_excerpt.RULE,
    stated_failure.RULE,
)
# catch-alls: reported only when no more specific finding exists
_FALLBACK = ("stall-unexplained", "recorded-failure", "stated-failure", "stopped-excerpt")
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
    out = fold(out, ctx.catalogue)
    specific = [f for f in out if f.rule not in _FALLBACK and f.confidence >= 0.4]
    if specific:
        out = [f for f in out if f.rule not in _FALLBACK]
    elif any(f.rule == "stall-unexplained" for f in out):
        out = [f for f in out if f.rule not in ("recorded-failure", "stated-failure",
                                               "stopped-excerpt")]
    # cause before effect: the mechanism that failed first, then where the run diverged, then
    # what it led to (watchdog aborts, SIGABRT, EngineDeadError); confidence within a tier
    out.sort(key=lambda f: (-f.rank_key, f.rule))
    return out


__all__ = ["CATEGORIES", "RULES", "RuleContext", "Finding", "Rule", "run_rules"]
