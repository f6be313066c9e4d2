"""The frontend stopped waiting for the engine while it was still compiling (a cold start), told
apart from a startup that really hangs.

``Timed out waiting for engine core processes to start`` is what vLLM's frontend raises when
``VLLM_ENGINE_READY_TIMEOUT_S`` (600 s) expires (v1/engine/core_client.py). On a first launch the
engine spends minutes in FlashInfer/Triton JIT (nvcc), torch.compile or autotune with idle GPUs
while the log repeats the 60-second shm_broadcast message. With compile evidence before the
timeout this is a cold start; without it, and with the ranks silent in one phase, it is a startup
hang. ``Engine core initialization failed ... Failed core proc(s): {}`` is different: the startup
wait saw an engine process end before its exit code could be read (v1/engine/utils.py,
wait_for_engine_startup), so it says a process died, not that a wait ran out; it counts here only
beside compile evidence (a cold start that ended at the ready wait); otherwise the crash is read
by the rules that read crashes.
"""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext, field_phase

# startup steps that can outlast the 600 s wait on a cold machine (weights from a slow disk,
# JIT/nvcc, torch.compile, autotune, graph capture)
_SLOW = ("model-load", "torch-compile", "kernel-warmup", "autotune", "cuda-graph-capture")


def check(ctx: RuleContext) -> list[Finding]:
    timeout = ctx.hits("engine-ready-timeout")
    ready = timeout + ctx.hits("engine-init-failed-empty")
    if not ready:
        return []
    lg = ctx.facts
    jit = ctx.hits("jit-compile") + ctx.hits("engine-ready-env")
    stage = lg.phases.stage
    workers = [p.tracker.stage for p in ctx.workers() if p.tracker.stage in _SLOW]
    if stage not in _SLOW and workers:
        stage = workers[0]
    compiling = stage in _SLOW or bool(jit)
    died = [d for d, _e, _k in lg.waits.deaths]
    if died:
        return []  # a dead engine/worker is the cause; first-dead-rank names it
    phase = field_phase(stage) or "startup"
    crashed = any(p.exception is not None and "initialization failed" not in p.exception[1]
                  for p in lg.procs.values())
    if not timeout and (not jit or crashed):
        return []  # a process ended: a crash (read by the crash rules), unless it was compiling
    if compiling:
        where = f" while the engine was in {phase}" if stage else ""
        return [RULE.finding(
            0.8, "the frontend gave up waiting for the engine" + where + (
                " (JIT / compile evidence before the timeout)" if jit else "")
            + ": a cold start longer than VLLM_ENGINE_READY_TIMEOUT_S, not a hang", ready[:1] + jit[:2] + ([lg.waits.shm_waits[-1][1]] if lg.waits.shm_waits else []),
            phase=phase, role="cause")]
    ev = ready[:1] + ([lg.waits.shm_waits[-1][1]] if lg.waits.shm_waits else [])
    return [RULE.finding(
        0.5, "the engine never reported ready and no engine process exited: the wait for it "
        f"ran out during {phase}; without compile progress in the log this looks like a startup "
        "hang, not a slow cold start", ev, phase=phase, role="position", category="unknown",
        fix="Look at what each rank was doing when the wait ran out (`sm120kit collect -- vllm "
            "serve ...` takes every rank's stack); if it was compiling, raise "
            "VLLM_ENGINE_READY_TIMEOUT_S.")]


RULE = Rule(
    id="cold-start-timeout",
    category="cold-start-timeout",
    needs="'Timed out waiting for engine core processes to start' / 'Engine core initialization "
          "failed ... Failed core proc(s): {}', JIT/nvcc/compile lines, the phase before it",
    tier="disagreement",
    check=check,
    fix="Raise VLLM_ENGINE_READY_TIMEOUT_S (default 600 s) for the first launch, or warm the "
        "FlashInfer/Triton JIT caches beforehand (`sm120kit warmup`); later launches reuse them.",
    link="https://docs.vllm.ai/en/latest/configuration/env_vars.html",
)
