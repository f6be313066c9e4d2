"""A timeout that fired on legitimately slow work: a JIT compile or autotune longer than
VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (300 s), a short NCCL timeout during startup, or the engine
READY wait (600 s) expiring while weights still load."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext, first_failing
from sm120kit.evidence.logs.serving import clock_seconds
from sm120kit.models.timeouts import VLLM_ENGINE_READY_TIMEOUT_S as READY_WAIT_S

_STARTUP = ("model-load", "torch-compile", "kv-cache-profile", "kernel-warmup", "autotune",
            "cuda-graph-capture")


def check(ctx: RuleContext) -> list[Finding]:
    out: list[Finding] = []
    lg = ctx.facts
    if lg.waits.rpc_timeouts:
        jit = ctx.hits("jit-compile")
        method, ev, _k = lg.waits.rpc_timeouts[0]
        if jit:
            out.append(RULE.finding(
                0.6, f"RPC call to {method} timed out after a JIT compile during inference: the "
                "compile on one rank took longer than the RPC timeout", [ev] + jit[-2:],
                fix="Raise VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (default 300) and warm the JIT "
                    "cache before serving (`sm120kit warmup`)."))
    for r, ev, _k in lg.waits.watchdog:
        if r.timeout_ms is not None and r.timeout_ms < 600000 and r.ran_ms is not None:
            phases = {p.tracker.stage for p in ctx.workers() if p.tracker.stage}
            if phases & set(_STARTUP) or r.timeout_ms < 60000:
                out.append(RULE.finding(
                    0.55, f"a {r.timeout_ms // 1000} s NCCL timeout fired during startup "
                    f"({', '.join(sorted(phases & set(_STARTUP))) or 'its first collectives'}), "
                    "which can legitimately take longer", [ev], role="cause",
                    fix="Raise --distributed-timeout-seconds (torch's NCCL default is 600 s) "
                        "or confirm with stacks that a rank is really stuck."))
            break
    return out + _ready_wait_during_load(ctx)


def _ready_wait_during_load(ctx: RuleContext) -> list[Finding]:
    """The API server (the process that waits for the engine's READY) failed while a startup bar
    was still counting and had been running for most of the 600 s wait, and no engine or worker
    process failed: the wait ran out under a slow load (the exception line may be cut off)."""
    lg = ctx.facts
    p = first_failing(ctx)
    if p is None or p.role != "api-server" or lg.progress.bar is None:
        return []
    what, done, tot, bar = lg.progress.bar
    clock = lg.progress.elapsed
    secs = clock_seconds(clock) if clock else None
    if done >= tot or secs is None or lg.phases.stage not in _STARTUP:
        return []
    if secs < 0.9 * READY_WAIT_S or any(q.first_error is not None for q in lg.procs.values()
                                        if q.role in ("engine-core", "worker")):
        return []
    return [RULE.finding(
        0.6, f"the API server failed while {what} was still at {done}/{tot} after "
        f"{clock} (no engine or worker failed): the engine-ready wait "
        f"(VLLM_ENGINE_READY_TIMEOUT_S, {READY_WAIT_S} s by default) ran out under a slow load",
        [bar] + ([p.first_error] if p.first_error else []), phase="startup", role="cause",
        fix="Raise VLLM_ENGINE_READY_TIMEOUT_S above the load time (or load from a faster disk / "
            "a warm page cache).")]


RULE = Rule(
    id="timeout-too-short",
    category="timeout-too-short",
    needs="'RPC call to X timed out' + JIT lines; 'Timed out waiting for engine core processes "
          "to start'; watchdog Timeout(ms) vs the phase",
    tier="disagreement",
    check=check,
    fix="Raise the timeout that fired, after confirming the work was progressing.",
    link="https://docs.vllm.ai/en/latest/configuration/env_vars.html",
)
