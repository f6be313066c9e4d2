"""Per-rank autotune that diverges across ranks and deadlocks the next collective.

FlashInfer / TRT-LLM autotuners pick kernels (tactics) independently on every rank. When one rank
loads a cached tuning config and the others tune (or timing noise makes them pick different
tactics), the ranks run different kernels with different collectives or workspace sizes, and the
next collective, symmetric-memory registration or CUDA-graph capture waits forever. vLLM's
SM120 sparse-MLA warmup autotunes on the leader only. Evidence: autotune lines (or frames) and a
stall that starts in autotune / warmup / capture, per-rank "autotune cache loaded" lines on some
ranks only, or a report that names the autotuner and a hang.
"""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext, field_phase

_NEAR = ("autotune", "kernel-warmup", "cuda-graph-capture")


def check(ctx: RuleContext) -> list[Finding]:
    lg = ctx.facts
    tune = ctx.hits("autotuner-start") + ctx.hits("sm120-autotune-leader") + [
        e for e in ctx.hits("autotune-mention") if not ctx.says("autotune-ruled-out", e.text)]
    loaded = ctx.hits("sm120-autotune-loaded")
    stack_tune = []
    if ctx.bundle is not None:
        stack_tune = [s for s in ctx.bundle.stacks
                      if any("autotun" in f or "choose_one" in f for f in s.frames)]
    if not (tune or loaded or stack_tune):
        return []
    if ctx.dcp() > 1 and (ctx.hits("sm120-autotune-leader") or ctx.hits("sparse-mla-warmup")):
        return []  # the SM120 sparse-MLA DCP warmup: dcp-warmup-stall names it
    stage = lg.phases.stage
    stuck = [p for p in ctx.workers() if p.tracker.stage in _NEAR]
    in_phase = stage in _NEAR or bool(stuck)
    hang = ctx.stalled() or bool(lg.described.symptoms)
    dead = any(p.death is not None for p in lg.procs.values())
    if not hang or dead or not (in_phase or stack_tune or lg.described.symptoms):
        return []
    if lg.progress.progressing is not None and not lg.described.symptoms:
        return []
    parts = ["the ranks stalled around a per-rank autotune"]
    n = ctx.config.get("tp") or len(ctx.workers()) or 0
    got = {int(v) for v in ctx.values("sm120-autotune-loaded") if v.isdigit()}
    missing = sorted(set(range(int(n))) - got) if got and isinstance(n, int) and n > 1 else []
    if missing:
        parts.append(f"ranks {missing} never logged 'autotune cache loaded' (the others did): "
                     "one side loaded a cached config while the other tuned")
    if stack_tune:
        parts.append(f"{len(stack_tune)} stack(s) are inside the autotuner")
    if ctx.dcp() > 1:
        parts.append(f"DCP={ctx.dcp()}")
    ev = tune[:2] + loaded[:1] + [p.last for p in stuck[:2] if p.last is not None]
    ev += [ctx.described_ev(0)] if lg.described.symptoms else []
    if lg.waits.shm_waits:
        ev.append(lg.waits.shm_waits[-1][1])
    conf = 0.75 + (0.1 if missing or stack_tune else 0.0)
    return [RULE.finding(conf, "; ".join(parts), ev, ranks=missing,
                         phase=field_phase(stage) or "autotune", role="cause",
                         tier="disagreement" if missing else "stacks")]


RULE = Rule(
    id="autotune-deadlock",
    category="autotune-deadlock",
    needs="autotune lines ('Autotuning process starts', '[Autotuner]', 'Autotuning FlashInfer', "
          "'autotune cache loaded on rank N'), the phase where the ranks stopped, stall evidence; "
          "stacks in autotuner frames",
    tier="disagreement",
    check=check,
    fix="Make every rank tune the same way: disable the autotune for the launch (vLLM "
        "--kernel-config '{\"enable_flashinfer_autotune\": false}'), or give every rank the same "
        "tuned cache (warm it once with `sm120kit warmup`, then launch); with DCP use the patched "
        "warmup from `sm120kit apply`.",
    link=None,
)
