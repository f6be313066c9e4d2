"""CUDA/host out-of-memory on a rank, or a KV cache that cannot fit one request."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext


def check(ctx: RuleContext) -> list[Finding]:
    oom = ctx.hits("cuda-oom")
    killed = ctx.hits("killed")
    out: list[Finding] = []
    if oom:
        load = any("create_weights" in e.text or "load" in e.text for e in oom) or \
            ctx.logs.global_tracker.stage == "model-load"
        out.append(RULE.finding(
            0.9, f"CUDA out of memory ({ctx.count('cuda-oom')} line(s))"
            + (" while loading weights" if load else ""), oom,
            phase="weight-load" if load else None, role="cause"))
    if killed and not oom:
        out.append(RULE.finding(
            0.7, "a process was killed (host OOM killer or SIGKILL)", killed,
            fix="Check `journalctl -k | grep -i oom`; reduce host memory use (fewer API servers, "
                "smaller --swap-space / CPU offload) or give the container more memory."))
    return out


RULE = Rule(
    id="out-of-memory",
    category="out-of-memory",
    needs="'CUDA out of memory' / torch.OutOfMemoryError / KV-cache sizing errors / 'Killed'",
    tier="dead-rank",
    check=check,
    fix="Lower --gpu-memory-utilization headroom use: reduce --max-num-seqs, "
        "--max-cudagraph-capture-size or --max-model-len; errors after a timeout are cascades "
        "and can be ignored.",
    link="https://docs.vllm.ai/en/latest/configuration/conserving_memory.html",
)
