"""DCP > 1 with FULL CUDA graphs: a hang at the prefill→first-decode boundary with every rank in
a host sync (vLLM PR #45426 / #46145)."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext


def check(ctx: RuleContext) -> list[Finding]:
    if ctx.dcp() <= 1 or not ctx.stalled():
        return []
    full = ctx.hits("cudagraph-full")
    ws = ctx.workers()
    serving = any(p.tracker.stage in ("serving", "api-server-ready") for p in ws) or (
        ctx.facts.phases.stage == "serving")
    if not full or not serving:
        return []
    return [RULE.finding(
        0.45, "DCP > 1 with FULL CUDA graphs stalled once requests arrived (known hang at the "
        "first decode after a long prefill)", full[:2])]


RULE = Rule(
    id="dcp-full-cudagraph",
    category="kernel-hang",
    needs="DCP size, cudagraph_mode FULL in the config, a stall after serving started",
    tier="config",
    check=check,
    fix="Use -cc.cudagraph_mode=PIECEWISE (or --enforce-eager) with DCP > 1.",
    link="https://github.com/vllm-project/vllm/pull/45426",
)
