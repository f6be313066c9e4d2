"""The KV-capacity planner (doctor, launch tier, pure Python): from a planned launch and the
model's config.json, estimate per-GPU weights and KV memory, the KV tokens at DCP 1 and at the
requested DCP, and the concurrency at ``--max-model-len``.

It is an estimate, and says how it was made:

* KV bytes per token: ``sm120kit.models.kv`` (first principles from vLLM's KV specs; within
  0.2 % of the published GLM-5.2 token counts for a given available memory);
* weights per GPU: the local checkpoint's safetensors bytes (else a parameter-count estimate)
  divided by TP x PP (expert parallelism splits the experts over the same ranks);
* memory left for KV: ``total x gpu_memory_utilization - weights - reserve``. The reserve
  (activations, CUDA graphs, non-torch memory) and the DCP workspaces are not derivable from a
  config: they are calibrated on the one published SM120 run (GLM-5.2 NVFP4, 4x RTX PRO 6000,
  vLLM 0.25.1, util 0.92: 94.97 GiB x 0.92 - 79.1 GB weights - 8.25 GiB KV = 5.45 GiB reserve;
  DCP 4 took 1.28 GiB more). MTP: the draft layer's weights plus 2.01 GiB per speculative token
  (the published MTP 3 + DCP 4 run left 0.01 GiB of 6.97); other shapes may differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from sm120kit.facts.modelsize import WeightSize
from sm120kit.models.kv import GIB, KvDensity, UnsupportedModel, density_from_config

RESERVE_GIB = 5.45            # activations + graphs + non-torch, calibrated (module docstring)
DCP_WORKSPACE_GIB = 1.28      # DCP workspaces at DCP 4 on the published run
MTP_PER_TOKEN_GIB = 2.01      # runtime cost per speculative token beyond the draft weights
DEFAULT_UTIL = 0.9             # vLLM's --gpu-memory-utilization default
ASSUMED_GPU_GIB = 94.97        # RTX PRO 6000 Blackwell 96 GB as the published run saw it
ALMOST_NOTHING_GIB = 0.5


@dataclass
class CapacityPlan:
    status: Literal["ok", "warn", "fail", "skip"]
    summary: str
    fix: str | None = None
    gpu_total_gib: float | None = None
    gpu_total_source: str = ""
    utilization: float | None = None
    weights_gib_per_gpu: float | None = None
    weights_how: str = ""
    reserve_gib: float = RESERVE_GIB
    dcp_workspace_gib: float = 0.0
    mtp_reserve_gib: float = 0.0
    kv_gib_dcp1: float | None = None
    kv_gib: float | None = None
    requested_dcp: int = 1
    max_model_len: int | None = None
    tokens_dcp1: int | None = None
    tokens: int | None = None
    concurrency_dcp1: float | None = None
    max_concurrency: float | None = None
    dcp_that_fits: int | None = None
    density: dict[str, Any] | None = None
    how: list[str] = field(default_factory=list)

    def evidence(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k not in ("status", "summary", "fix")}
        d["estimate"] = True
        return d


@dataclass(frozen=True)
class PlanInput:
    cfg: dict[str, Any]
    weights: WeightSize | None
    gpu_total_bytes: int | None
    gpu_total_source: str
    tp: int = 1
    pp: int = 1
    dcp: int = 1
    max_model_len: int | None = None
    utilization: float | None = None
    kv_cache_dtype: str | None = None
    block_size: int | None = None
    mtp_tokens: int = 0


def _kv_bytes(inp: PlanInput, dcp: int, weights_gpu: float, draft_gpu: float) -> float:
    util = inp.utilization or DEFAULT_UTIL
    assert inp.gpu_total_bytes is not None
    left = inp.gpu_total_bytes * util - weights_gpu - RESERVE_GIB * GIB
    if dcp > 1:
        left -= DCP_WORKSPACE_GIB * GIB
    if inp.mtp_tokens:
        left -= draft_gpu + MTP_PER_TOKEN_GIB * GIB * inp.mtp_tokens
    return max(0.0, left)


def plan_capacity(inp: PlanInput) -> CapacityPlan:
    try:
        dens = density_from_config(inp.cfg, kv_cache_dtype=inp.kv_cache_dtype,
                                   block_size=inp.block_size, mtp_tokens=inp.mtp_tokens)
    except UnsupportedModel as exc:
        return CapacityPlan("skip", f"capacity not planned: {exc}")
    if inp.weights is None:
        return CapacityPlan("skip", "capacity not planned: the checkpoint size is unknown "
                            "(no local safetensors and config.json cannot be sized)")
    if inp.gpu_total_bytes is None:
        return CapacityPlan("skip", "capacity not planned: GPU memory unknown (no NVML; pass "
                            "--gpu-mem-gib)")
    mml = inp.max_model_len or int(inp.cfg.get("max_position_embeddings") or 0) or None
    if mml is None:
        return CapacityPlan("skip", "capacity not planned: no --max-model-len and no "
                            "max_position_embeddings in config.json")
    shards = max(1, inp.tp * inp.pp)
    w_gpu = inp.weights.total_bytes / shards
    d_gpu = inp.weights.draft_bytes / shards
    kv1 = _kv_bytes(inp, 1, w_gpu, d_gpu)
    kvd = _kv_bytes(inp, inp.dcp, w_gpu, d_gpu)
    t1, c1 = dens.capacity(kv1, 1, mml)
    td, cd = dens.capacity(kvd, inp.dcp, mml)
    plan = CapacityPlan(
        "ok", "", gpu_total_gib=round(inp.gpu_total_bytes / GIB, 2),
        gpu_total_source=inp.gpu_total_source, utilization=inp.utilization or DEFAULT_UTIL,
        weights_gib_per_gpu=round(w_gpu / GIB, 2), weights_how=inp.weights.how,
        dcp_workspace_gib=DCP_WORKSPACE_GIB if inp.dcp > 1 else 0.0,
        mtp_reserve_gib=round((d_gpu / GIB + MTP_PER_TOKEN_GIB * inp.mtp_tokens)
                              if inp.mtp_tokens else 0.0, 2),
        kv_gib_dcp1=round(kv1 / GIB, 2), kv_gib=round(kvd / GIB, 2), requested_dcp=inp.dcp,
        max_model_len=mml, tokens_dcp1=t1, tokens=td, concurrency_dcp1=round(c1, 2),
        max_concurrency=round(cd, 2), density=dens.to_dict(), how=_how(dens, inp, shards))
    plan.dcp_that_fits = _dcp_that_fits(inp, dens, w_gpu, d_gpu, mml)
    _judge(plan, inp, dens)
    return plan


def _how(dens: KvDensity, inp: PlanInput, shards: int) -> list[str]:
    return [
        "ESTIMATE, not a measurement: vLLM prints the real figures at start "
        "('Available KV cache memory', 'GPU KV cache size')",
        f"KV bytes/token/rank = {dens.bytes_per_token} ({dens.how}); block {dens.block_size}",
        f"weights/GPU = checkpoint / (TP {inp.tp} x PP {inp.pp} = {shards})",
        f"KV memory = GPU total x util - weights - {RESERVE_GIB} GiB reserve"
        + (f" - {DCP_WORKSPACE_GIB} GiB DCP workspaces" if inp.dcp > 1 else "")
        + (f" - MTP (draft weights + {MTP_PER_TOKEN_GIB} GiB x {inp.mtp_tokens})"
           if inp.mtp_tokens else "")
        + "; reserve/workspace/MTP calibrated on the published GLM-5.2 4x RTX PRO 6000 run",
        "tokens = blocks x max_model_len / cdiv(cdiv(max_model_len, DCP), block) (vLLM's formula)",
    ]


def _dcp_that_fits(inp: PlanInput, dens: KvDensity, w_gpu: float, d_gpu: float,
                   mml: int) -> int | None:
    for d in range(1, max(1, inp.tp) + 1):
        if inp.tp % d:
            continue
        _, c = dens.capacity(_kv_bytes(inp, d, w_gpu, d_gpu), d, mml)
        if c >= 1.0:
            return d
    return None


def _judge(plan: CapacityPlan, inp: PlanInput, dens: KvDensity) -> None:
    conc, mml = plan.max_concurrency or 0.0, plan.max_model_len or 0
    head = (f"estimate: {plan.tokens or 0:,} KV tokens at DCP {inp.dcp} ({plan.kv_gib} GiB/GPU),"
            f" {conc:.2f}x at {mml:,} tokens")
    if inp.dcp > 1:
        head += (f"; DCP 1 would give {plan.tokens_dcp1 or 0:,} "
                 f"({plan.concurrency_dcp1 or 0:.2f}x)")
    if inp.mtp_tokens and (plan.kv_gib or 0) < ALMOST_NOTHING_GIB:
        plan.status = "fail" if conc < 1 else "warn"
        plan.summary = (f"MTP ({inp.mtp_tokens} speculative tokens) would leave "
                        f"~{plan.kv_gib} GiB for KV per GPU: {head}")
        plan.fix = ("drop --speculative-config, or lower --max-model-len / raise "
                    "--gpu-memory-utilization (the published MTP 3 + DCP 4 run at 250K had "
                    "0.01 GiB left)")
        return
    if conc < 1.0:
        plan.status = "fail"
        plan.summary = f"not one {mml:,}-token request fits: {head}"
        if plan.dcp_that_fits is not None and plan.dcp_that_fits != inp.dcp:
            plan.fix = (f"use --decode-context-parallel-size {plan.dcp_that_fits} (it divides TP "
                        f"{inp.tp} and fits at least one request), or lower --max-model-len")
        elif (plan.kv_gib or 0) <= 0:
            plan.summary = (f"the weights alone ({plan.weights_gib_per_gpu} GiB per GPU) do not "
                            f"fit in the {plan.gpu_total_gib} GiB x {plan.utilization} per GPU "
                            f"vLLM may use: {head}")
            plan.fix = ("no --max-model-len helps: spread the weights over more GPUs (raise TP "
                        "or PP), use a smaller quantization, or raise --gpu-memory-utilization")
        else:
            fit = int(mml * conc)
            plan.fix = (f"no DCP size dividing TP {inp.tp} fits one request; lower "
                        f"--max-model-len to about {fit:,} or add GPUs")
        return
    plan.summary = head
