"""CUDA/host out-of-memory on a rank, or a KV cache that cannot fit one request."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext


def check(ctx: RuleContext) -> list[Finding]:
    oom = ctx.hits("cuda-oom")
    kv = ctx.hits("kv-cache-too-small")
    killed = ctx.hits("killed")
    out: list[Finding] = []
    if oom:
        out.append(RULE.finding(
            0.9, f"CUDA out of memory ({ctx.count('cuda-oom')} line(s))", oom))
    if kv:
        out.append(RULE.finding(
            0.88, "the KV cache cannot hold one request at max_model_len", kv,
            fix="Raise --gpu-memory-utilization or lower --max-model-len; with DCP the KV cache "
                "is split over the DCP ranks, so a larger --decode-context-parallel-size also helps."))
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
