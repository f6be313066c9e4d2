"""``launch.kv_capacity``: the KV-capacity planner over the planned launch (estimate; see
``sm120kit.doctor.capacity`` for how it is computed and calibrated)."""

from __future__ import annotations

from sm120kit.doctor.capacity import ASSUMED_GPU_GIB, PlanInput, plan_capacity
from sm120kit.doctor.context import DoctorContext
from sm120kit.doctor.model import Outcome, fail, ok, skip, warn
from sm120kit.doctor.plan import model_dir_of
from sm120kit.doctor.registry import check
from sm120kit.facts.modelsize import weight_size
from sm120kit.models.kv import GIB


def gpu_total(ctx: DoctorContext) -> tuple[int, str]:
    """Per-GPU memory: --gpu-mem-gib, else the smallest visible GPU (NVML), else an assumption."""
    given = ctx.peek("gpu_mem_gib")
    if given:
        return int(float(given) * GIB), "--gpu-mem-gib"
    snap = ctx.peek("nvml")
    if snap is not None and getattr(snap, "available", False):
        totals = [g.memory_total for g in snap.gpus if g.memory_total]
        if totals:
            return min(totals), "NVML (smallest visible GPU)"
    return int(ASSUMED_GPU_GIB * GIB), (f"assumed {ASSUMED_GPU_GIB} GiB (RTX PRO 6000 Blackwell); "
                                        "pass --gpu-mem-gib")


@check("launch.kv_capacity", tier=0, title="KV capacity plan (estimate): tokens and concurrency "
       "at the planned DCP", kind="launch")
def kv_capacity(ctx: DoctorContext) -> Outcome:
    p = ctx.launch
    assert p is not None
    if p.hf_config is None:
        return skip("model config.json not found locally; pass --config path/to/config.json")
    sa = p.serve
    model_dir = model_dir_of(p.hf_config_source)
    total, total_src = gpu_total(ctx)
    mtp = sa.num_speculative_tokens if (sa.speculative_method or "mtp") in (
        "mtp", "deepseek_mtp", "glm4_moe_mtp") else 0
    plan = plan_capacity(PlanInput(
        cfg=p.hf_config, weights=weight_size(p.hf_config, model_dir), gpu_total_bytes=total,
        gpu_total_source=total_src, tp=sa.tp, pp=sa.pp, dcp=ctx.dcp or sa.dcp,
        max_model_len=sa.max_model_len, utilization=sa.gpu_memory_utilization,
        kv_cache_dtype=sa.kv_cache_dtype, block_size=sa.block_size, mtp_tokens=mtp))
    return Outcome(plan.status, plan.summary, plan.evidence(), plan.fix)


@check("log.dcp_engaged", tier=0, title="DCP engaged (KV density in the vLLM log vs the model)",
       kind="log")
def dcp_engaged(ctx: DoctorContext) -> Outcome:
    cap = ctx.peek("log_kv_capacity")
    if cap is None:
        return skip("the log has no KV cache lines ('Available KV cache memory', 'GPU KV cache "
                    "size') yet")
    ev = cap.to_dict()
    if cap.engaged == "no":
        return fail(f"dcp-not-engaged: {cap.note}", "apply the DCP series (sm120kit apply) in "
                    "the venv that serves, keep --decode-context-parallel-size on the command "
                    "line, and check the log for a DCP fallback", finding="dcp-not-engaged", **ev)
    if cap.engaged == "yes":
        return ok(f"DCP engaged: {cap.note}; {cap.tokens:,} tokens", **ev)
    if cap.tokens is None and cap.available_gib is not None and cap.max_model_len:
        return fail(cap.note, "lower --max-model-len, raise DCP or drop MTP", **ev)
    return warn(f"DCP engagement unknown: {cap.note}", None, **ev)
