"""Something between vLLM and the driver/NCCL: LD_PRELOAD shims, a custom libnccl through
VLLM_NCCL_SO_PATH, GPU-virtualisation hooks (HAMi/libvgpu), NCCL net/tuner plugins. Only
reported when the run failed or stalled: on a healthy run they are just configuration."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext


def check(ctx: RuleContext) -> list[Finding]:
    if not ctx.stalled() and not any(p.exception for p in ctx.workers()):
        return []
    ev = ctx.hits("ld-preload") + ctx.hits("hami") + ctx.hits("nccl-plugin")
    so = ctx.hits("nccl-so-path")
    custom = [e for e in so if "libnccl.so.2" not in e.text.split("=")[-1]] or so
    ev += custom[:1]
    if not ev:
        return []
    return [RULE.finding(0.35, "a library interposer or replaced libnccl is in use: "
                         + "; ".join(sorted({e.text.split("] ")[-1][:80] for e in ev[:3]})),
                         ev[:4])]


RULE = Rule(
    id="interposer",
    category="interposer",
    needs="LD_PRELOAD / VLLM_NCCL_SO_PATH / HAMi / NCCL plugin lines",
    tier="config",
    check=check,
    fix="A/B test without the preload/custom libnccl (unset LD_PRELOAD and VLLM_NCCL_SO_PATH) "
        "to rule the interposer in or out.",
    link="https://docs.vllm.ai/en/latest/usage/troubleshooting.html",
)
