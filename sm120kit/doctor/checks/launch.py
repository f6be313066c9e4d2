"""The planned launch (``-- vllm serve ...`` / ``--config``) against the SM120 backend's limits.

Facts per vLLM/FlashInfer source: doctor-checks.md §4. Model-dependent checks skip with a reason
when no ``config.json`` was found (pass ``--config path/to/config.json``).
"""

from __future__ import annotations

from typing import Any

from sm120kit.doctor.context import DoctorContext
from sm120kit.doctor.model import Outcome, fail, ok, skip, warn
from sm120kit.doctor.registry import check
from sm120kit.facts.packages import version_ge
from sm120kit.models.dcp import plan_for
from sm120kit.models.fp8ds import row_bytes
from sm120kit.models.serve_args import ServeArgs

SM120 = "FLASHINFER_MLA_SPARSE_SM120"
DSV4 = "FLASHINFER_MLA_SPARSE_DSV4"
DECODE_HEAD_SET = (8, 16, 32, 64, 128)
MAX_HEADS = 128
REQUIRED_TOPK = 2048
PAGE = 64
DECODE_MAX_TOKENS = 64
NO_CONFIG = "model config.json not found locally; pass --config path/to/config.json"


def _plan(ctx: DoctorContext) -> ServeArgs:
    """The launch line (``--dcp``/``--tp`` of doctor already applied)."""
    assert ctx.launch is not None
    return ctx.launch.serve


def _cfg(ctx: DoctorContext) -> dict[str, Any] | None:
    assert ctx.launch is not None
    return ctx.launch.hf_config


def is_dsv4(cfg: dict[str, Any] | None) -> bool:
    mt = str((cfg or {}).get("model_type", ""))
    return mt.startswith("deepseek_v4")


def uses_sm120_backend(plan: ServeArgs) -> bool:
    """The launch names the SM120 backend, or leaves the choice to vLLM (which picks it on SM12
    for sparse-MLA DSV3.2/GLM models with fp8 KV)."""
    return plan.effective_attention_backend in (None, SM120)


@check("launch.config", tier=0, title="Planned launch parsed")
def config(ctx: DoctorContext) -> Outcome:
    if ctx.launch is None:
        return skip("no launch config given (pass `-- vllm serve MODEL ...` or --config FILE)")
    plan, hf_config, source = ctx.launch.serve, ctx.launch.hf_config, ctx.launch.hf_config_source
    ev = {"model": plan.model, "tp": plan.tp, "pp": plan.pp, "dp": plan.dp, "dcp": plan.dcp,
          "pcp": plan.pcp, "interleave": plan.interleave, "block_size": plan.block_size,
          "kv_cache_dtype": plan.kv_cache_dtype,
          "attention_backend": plan.effective_attention_backend,
          "max_num_seqs": plan.max_num_seqs, "speculative": plan.speculative_method,
          "num_speculative_tokens": plan.num_speculative_tokens,
          "config_source": source, "unknown_options": plan.unknown,
          "notes": plan.notes}
    head = f"TP{plan.tp} DCP{plan.dcp} PP{plan.pp} model {plan.model or '?'}"
    if plan.notes:
        head += f" ({'; '.join(plan.notes)})"
    if hf_config is None:
        return warn(f"{head}; {NO_CONFIG} (model checks skip)", None, **ev)
    return ok(f"{head}; model config from {source}", **ev)


@check("launch.tp_dcp", tier=0, title="tp % dcp == 0 (PCP rules)", kind="launch")
def tp_dcp(ctx: DoctorContext) -> Outcome:
    p = _plan(ctx)
    ev = {"tp": p.tp, "dcp": p.dcp, "pcp": p.pcp}
    if p.dcp < 1 or p.tp < 1:
        return fail("sizes must be >= 1", None, **ev)
    if p.pcp > 1:
        allowed = {1, p.pcp, p.tp * p.pcp}
        if p.dcp not in allowed:
            return fail(f"with PCP {p.pcp}, DCP must be one of {sorted(allowed)}; got {p.dcp}",
                        "pick --decode-context-parallel-size from that set", **ev)
        return ok(f"DCP {p.dcp} fits PCP {p.pcp} x TP {p.tp}", **ev)
    if p.tp % p.dcp:
        return fail(f"tp_size={p.tp} must be divisible by dcp_size={p.dcp}",
                    "choose a DCP size that divides the tensor-parallel size", **ev)
    return ok(f"TP {p.tp} divisible by DCP {p.dcp}", **ev)


@check("launch.heads", tier=0, title="heads_per_rank x dcp <= 128 (FlashInfer dispatch)",
       kind="launch")
def heads(ctx: DoctorContext) -> Outcome:
    p, cfg = _plan(ctx), _cfg(ctx)
    if cfg is None:
        return skip(NO_CONFIG)
    h = cfg.get("num_attention_heads")
    if not isinstance(h, int):
        return skip("config.json has no num_attention_heads")
    ev: dict[str, Any] = {"num_attention_heads": h, "tp": p.tp, "dcp": p.dcp}
    if h % p.tp:
        return fail(f"{h} attention heads are not divisible by TP {p.tp}", None, **ev)
    per_rank = h // p.tp
    gathered = per_rank * p.dcp
    ev.update(heads_per_rank=per_rank, kernel_heads=gathered)
    if gathered > MAX_HEADS:
        return fail(f"{per_rank} heads/rank x DCP {p.dcp} = {gathered} query heads per kernel "
                    f"call > {MAX_HEADS} (the DCP all-gather multiplies heads)",
                    "lower DCP or raise TP so heads_per_rank x dcp <= 128", **ev)
    fi = ctx.flashinfer()
    if fi.installed and fi.version and not version_ge(fi.version, "0.7.0") \
            and gathered not in DECODE_HEAD_SET:
        return fail(f"{gathered} heads per kernel call is not in FlashInfer {fi.version}'s SM120 "
                    f"decode dispatch set {DECODE_HEAD_SET}",
                    "pick TP/DCP so heads_per_rank x dcp is 8, 16, 32, 64 or 128, or use "
                    "flashinfer-python >= 0.7", **ev)
    return ok(f"{per_rank} heads/rank x DCP {p.dcp} = {gathered} <= {MAX_HEADS}", **ev)


@check("flashinfer.dispatch", tier=0, title="Planned (heads, topk) in FlashInfer's decode dispatch",
       kind="launch")
def dispatch(ctx: DoctorContext) -> Outcome:
    p, cfg = _plan(ctx), _cfg(ctx)
    fi = ctx.flashinfer()
    if not fi.installed or not fi.has_sm120_api:
        return skip("FlashInfer with the SM120 sparse module is not installed")
    if cfg is None:
        return skip(NO_CONFIG)
    h, topk = cfg.get("num_attention_heads"), cfg.get("index_topk")
    if not isinstance(h, int) or not isinstance(topk, int) or h % p.tp:
        return skip("config.json lacks num_attention_heads/index_topk (or heads % tp != 0)")
    shape = (h // p.tp * p.dcp, topk)
    table = fi.dsv4_dispatch if is_dsv4(cfg) else fi.dsv32_dispatch
    ev = {"shape": list(shape), "dispatch_kind": fi.dispatch_kind, "max_heads": fi.max_heads,
          "version": fi.version}
    if fi.dispatch_kind == "set" and table is not None:
        if tuple(shape) in {tuple(x) for x in table}:
            return ok(f"(heads {shape[0]}, topk {shape[1]}) is in FlashInfer {fi.version}'s "
                      "decode dispatch set", **ev)
        return fail(f"(heads {shape[0]}, topk {shape[1]}) is not in FlashInfer {fi.version}'s "
                    "SM120 decode dispatch set", "change TP/DCP, or upgrade to "
                    "flashinfer-python >= 0.7 (dispatch envelope)", **ev)
    limit = fi.max_heads or MAX_HEADS
    if 1 <= shape[0] <= limit and shape[1] >= 1:
        return ok(f"(heads {shape[0]}, topk {shape[1]}) inside FlashInfer {fi.version}'s "
                  f"envelope (1 <= heads <= {limit})", **ev)
    return fail(f"heads {shape[0]} outside FlashInfer {fi.version}'s envelope "
                f"(1..{limit})", "lower DCP or raise TP", **ev)


@check("launch.index_topk", tier=0, title="index_topk == 2048", kind="launch")
def index_topk(ctx: DoctorContext) -> Outcome:
    p, cfg = _plan(ctx), _cfg(ctx)
    if cfg is None:
        return skip(NO_CONFIG)
    if is_dsv4(cfg) or not uses_sm120_backend(p):
        return skip("not the FLASHINFER_MLA_SPARSE_SM120 backend")
    topk = cfg.get("index_topk")
    if topk is None:
        return fail("config.json has no index_topk: not a sparse-MLA (DSA) model",
                    "FLASHINFER_MLA_SPARSE_SM120 serves sparse-MLA models only", model_type=cfg.get(
                        "model_type"))
    if topk != REQUIRED_TOPK:
        return fail(f"index_topk={topk}; FLASHINFER_MLA_SPARSE_SM120 requires index_topk=2048",
                    "use another attention backend for this model", index_topk=topk)
    return ok("index_topk = 2048", index_topk=topk)


@check("launch.kv_row_bytes", tier=0, title="fp8_ds_mla row size from kv_lora_rank / rope dim",
       kind="launch")
def kv_row_bytes(ctx: DoctorContext) -> Outcome:
    cfg = _cfg(ctx)
    if cfg is None:
        return skip(NO_CONFIG)
    if is_dsv4(cfg):
        return skip("DeepSeek-V4 uses its own 584-byte layout (DSV4 backend)")
    r, rope = cfg.get("kv_lora_rank"), cfg.get("qk_rope_head_dim")
    if not isinstance(r, int) or not isinstance(rope, int):
        return skip("config.json lacks kv_lora_rank / qk_rope_head_dim (not MLA)")
    try:
        rb = row_bytes(r, rope)
    except ValueError as exc:
        return fail(f"no fp8_ds_mla layout for kv_lora_rank={r}, qk_rope_head_dim={rope}: {exc}",
                    None, kv_lora_rank=r, qk_rope_head_dim=rope)
    ev = {"kv_lora_rank": r, "qk_rope_head_dim": rope, "row_bytes": rb}
    if rb == 656:
        return ok("656-byte rows (512 fp8 + 4 fp32 scales + 64 bf16 rope; DSV3.2/GLM-5)", **ev)
    if rb == 528:
        return ok("528-byte NoPE rows (512 fp8 + 4 fp32 scales; GLM-5.3 NoPE)", **ev)
    return fail(f"{rb}-byte rows: the SM120 kernels read 656 (rope 64) or 528 (no rope) bytes",
                "this model's MLA shape is not supported by FLASHINFER_MLA_SPARSE_SM120", **ev)


@check("launch.kv_cache_dtype", tier=0, title="KV-cache dtype maps to fp8_ds_mla", kind="launch")
def kv_cache_dtype(ctx: DoctorContext) -> Outcome:
    p = _plan(ctx)
    d = p.kv_cache_dtype or "auto"
    ev = {"kv_cache_dtype": d, "dcp": p.dcp, "attention_backend": p.effective_attention_backend}
    if not uses_sm120_backend(p) or is_dsv4(_cfg(ctx)):
        return skip("not the FLASHINFER_MLA_SPARSE_SM120 backend", **ev)
    if d == "nvfp4_ds_mla":
        if p.dcp > 1:
            return fail("nvfp4_ds_mla KV cache is not supported with decode context parallelism",
                        "use --kv-cache-dtype fp8_ds_mla with DCP", **ev)
        return skip("nvfp4_ds_mla is not a FLASHINFER_MLA_SPARSE_SM120 layout", **ev)
    if d == "fp8_ds_mla":
        return ok("fp8_ds_mla", **ev)
    if d in ("auto", "fp8", "fp8_e4m3"):
        return ok(f"{d} becomes fp8_ds_mla on this backend (BF16 KV is not possible here)", **ev)
    return fail(f"--kv-cache-dtype {d} is not supported by FLASHINFER_MLA_SPARSE_SM120 "
                "(auto, fp8, fp8_e4m3, fp8_ds_mla)", "use --kv-cache-dtype fp8_ds_mla", **ev)


@check("launch.block_size", tier=0, title="Block size multiple of 64 and of the interleave",
       kind="launch")
def block_size(ctx: DoctorContext) -> Outcome:
    p = _plan(ctx)
    bs = p.block_size if p.block_size is not None else PAGE
    ev = {"block_size": p.block_size, "effective": bs, "interleave": p.interleave}
    if uses_sm120_backend(p) and bs % PAGE:
        return fail(f"block size {bs} is not a multiple of 64 (the SM120 kernels use 64-row "
                    "pages)", "use --block-size 64", **ev)
    if p.interleave < 1 or p.interleave > bs or bs % p.interleave:
        return fail(f"block size {bs} must be >= and divisible by the CP interleave "
                    f"{p.interleave}", "use --cp-kv-cache-interleave-size 1 (or a divisor of "
                    "the block size)", **ev)
    src = "given" if p.block_size is not None else "vLLM's default for this backend"
    return ok(f"block size {bs} ({src}), interleave {p.interleave}", **ev)


@check("launch.mtp_interleave", tier=0, title="MTP / speculative decode with a KV interleave",
       kind="launch")
def mtp_interleave(ctx: DoctorContext) -> Outcome:
    p = _plan(ctx)
    spec = p.num_speculative_tokens > 0 or bool(p.speculative_method)
    ev = {"speculative": p.speculative_method, "k": p.num_speculative_tokens,
          "interleave": p.interleave, "dcp": p.dcp}
    if not spec:
        return ok("no speculative decoding", **ev)
    if p.dcp > 1 and p.interleave > 1:
        vi = ctx.vllm()
        ev["vllm_patched"] = bool(vi.installed and vi.series_applied)
        if not ev["vllm_patched"]:
            # stock SM120 impl: supports_mtp_with_cp_non_trivial_interleave_size is False
            return fail(f"MTP with cp_kv_cache_interleave_size {p.interleave} > 1 is refused by "
                        "the unpatched SM120 impl",
                        "`sm120kit apply --installed` (the series converts per token), or "
                        "--cp-kv-cache-interleave-size 1", **ev)
    if p.num_speculative_tokens > 3:
        return warn(f"{p.num_speculative_tokens} speculative tokens: reported unstable above 3",
                    "use num_speculative_tokens 2", **ev)
    return ok(f"speculative {p.speculative_method or '?'} k={p.num_speculative_tokens}, "
              f"interleave {p.interleave}", **ev)


@check("launch.decode_tokens", tier=0, title="Tokens per decode step vs the 64-token kernel",
       kind="launch")
def decode_tokens(ctx: DoctorContext) -> Outcome:
    p = _plan(ctx)
    q = 1 + max(0, p.num_speculative_tokens)
    fi = ctx.flashinfer()
    limit = fi.decode_max_tokens or DECODE_MAX_TOKENS
    ev = {"max_num_seqs": p.max_num_seqs, "query_len": q, "limit": limit}
    if p.max_num_seqs is None:
        return ok(f"--max-num-seqs not set; decode steps above {limit // q} sequences "
                  f"({limit} tokens) route to the prefill kernels", **ev)
    tokens = p.max_num_seqs * q
    ev["tokens_per_step"] = tokens
    if tokens > limit:
        return warn(f"a full decode step is {p.max_num_seqs} x {q} = {tokens} tokens > {limit}: "
                    "such steps run FlashInfer's prefill kernels (slower decode; in FlashInfer "
                    ">= 0.7 a calibrated crossover)",
                    f"--max-num-seqs {max(1, limit // q)} keeps every step on the decode kernel",
                    **ev)
    return ok(f"{tokens} tokens per full decode step <= {limit}", **ev)


@check("launch.dsv4_backend", tier=0, title="DeepSeek-V4 uses the DSV4 backend", kind="launch")
def dsv4_backend(ctx: DoctorContext) -> Outcome:
    p, cfg = _plan(ctx), _cfg(ctx)
    if cfg is None:
        return skip(NO_CONFIG)
    if not is_dsv4(cfg):
        return ok(f"model_type {cfg.get('model_type')!r} is not DeepSeek-V4", model_type=cfg.get(
            "model_type"))
    backend = p.effective_attention_backend
    if backend == SM120:
        return fail(f"{SM120} is not a DeepSeek V4 attention backend",
                    f"use --attention-backend {DSV4} (or leave it unset)", backend=backend)
    return ok(f"DeepSeek-V4 with backend {backend or 'auto (DSV4 on SM12)'}", backend=backend)


@check("launch.gpus_visible", tier=1, title="Visible GPUs >= TP x PP x DP", kind="launch")
def gpus_visible(ctx: DoctorContext) -> Outcome:
    p = _plan(ctx)
    snap = ctx.nvml()
    need = p.world
    if snap.available:
        have, src = len(snap.gpus), "NVML (after CUDA_VISIBLE_DEVICES)"
    else:
        cvd = ctx.environ.get("CUDA_VISIBLE_DEVICES")
        if cvd is not None:
            have, src = len([t for t in cvd.split(",") if t.strip()]), "CUDA_VISIBLE_DEVICES"
        else:
            return skip(f"NVML unavailable ({snap.error}); cannot count GPUs", need=need)
    ev = {"need": need, "have": have, "source": src}
    if have < need:
        return fail(f"{have} GPU(s) visible, the launch needs TP {p.tp} x PP {p.pp} x DP {p.dp} "
                    f"= {need}", "expose more GPUs (CUDA_VISIBLE_DEVICES, docker --gpus) or "
                    "lower the sizes", **ev)
    return ok(f"{have} GPU(s) visible >= {need} needed", **ev)


@check("launch.warmup_plan", tier=0, title="Warmup decode gives every DCP rank local KV",
       kind="launch")
def warmup_plan(ctx: DoctorContext) -> Outcome:
    p = _plan(ctx)
    if p.dcp <= 1:
        return ok("DCP 1: the warmup decode is not split across ranks", dcp=p.dcp)
    vi = ctx.vllm()
    patched = bool(vi.installed and vi.series_applied)
    try:
        wp = plan_for(p)
    except ValueError as exc:
        return fail(f"warmup plan impossible: {exc}", "fix the block size / interleave", dcp=p.dcp)
    chosen = wp.fixed if patched else wp.unpatched
    ev = {"vllm_installed": vi.installed, "vllm_patched": patched, "plan": wp.to_dict()}
    zero = chosen.zero_local_kv_ranks
    if not vi.installed:
        up = wp.unpatched.zero_local_kv_ranks
        if up and not wp.fixed.zero_local_kv_ranks:
            return warn(f"vLLM is not installed here: an unpatched vLLM's 2-token warmup would "
                        f"leave DCP ranks {up} without local KV; the sm120kit series' warmup "
                        f"({wp.fixed.prompt_len} tokens) gives every rank local KV",
                        "sm120kit apply --installed in the serving environment", **ev)
    which = "fixed (sm120kit series)" if patched else "upstream 2-token"
    if zero:
        fix = ("sm120kit apply --installed (its warmup gives every rank local KV)" if not patched
               else "raise --max-model-len / --max-num-batched-tokens so the warmup prompt fits "
               "DCP x block size")
        return fail(f"{which} warmup decode prompt of {chosen.prompt_len} tokens leaves DCP "
                    f"ranks {zero} without local KV: the autotuned warmup step diverges across "
                    "ranks (the reported TP8/DCP8 hang in flashinfer_sparse_mla_warmup)", fix, **ev)
    return ok(f"{which} warmup prompt of {chosen.prompt_len} tokens gives every DCP rank local KV",
              **ev)
