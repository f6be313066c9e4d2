"""A failure or stall inside CUDA-graph capture.

Capture runs every batch size through the model once more, with the collectives recorded into
graphs; a rank that diverges there (a different kernel choice, an allocation that fails on one
rank, a custom all-reduce that cannot register its buffers) hangs or aborts the capture of all.
"""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext


def check(ctx: RuleContext) -> list[Finding]:
    lg = ctx.facts
    cap = ctx.hits("cudagraph-capture")
    in_capture = lg.phases.stage == "cuda-graph-capture" or any(
        p.tracker.stage == "cuda-graph-capture" for p in ctx.workers())
    failed = bool(lg.failures)
    hang = ctx.stalled() or bool(lg.described.symptoms)
    if not (in_capture or cap) or not (failed or hang):
        return []
    if lg.progress.progressing is not None and not lg.described.symptoms:
        return []
    ev = cap[:2]
    if lg.failures:
        ev += lg.failures[:1]
    if lg.described.symptoms:
        ev.append(ctx.described_ev(0))
    if lg.progress.bar is not None and lg.progress.bar[0] == "cuda-graph-capture":
        ev.append(lg.progress.bar[3])
    what = "failed" if failed else "stopped making progress"
    return [RULE.finding(
        0.7 if in_capture else 0.5, f"the run {what} during CUDA-graph capture", ev[:5],
        phase="capture", role="position")]


RULE = Rule(
    id="capture-stall",
    category="cudagraph-capture",
    needs="the phase each rank reached (cuda-graph-capture), capture lines, failures or stall "
          "evidence after them",
    tier="disagreement",
    check=check,
    fix="A/B: --enforce-eager (no graphs) or a smaller capture set (--max-cudagraph-capture-size, "
        "cudagraph_mode=PIECEWISE); with custom all-reduce, try --disable-custom-all-reduce.",
    link=None,
)
