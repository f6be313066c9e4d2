"""What vLLM and FlashInfer print about decode context parallelism, sparse-MLA models, the SM120
sparse-MLA backend, CUDA graphs and FlashInfer's autotuner (catalogue file known-dcp-mla.toml).

An SM120 GPU (RTX PRO 6000 Blackwell, RTX 5090) cannot exist on the machines that run this
suite, so these logs are real-shaped text, not captured runs: each message is worded as the
source named in the comment prints it (vLLM / FlashInfer release trees), inside the lines a vLLM
V1 start prints around it (EngineCore / Worker_TP<n>_DCP<n> prefixes, the traceback, the API
server's "Engine core initialization failed"). The top finding must come from an entry of
known-dcp-mla.toml: without the file these logs were answered by config.toml's generic
"vLLM rejected the configuration" (no flag named), the message index's bare module mapping at
0.55 (no fix), `rank-crashed`, or dcp.toml's "no softmax LSE" reading of a line that names
another reason; so each case fails without it. Healthy DCP starts, with the warnings they
survive, stay exit 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose import catalogue as C
from sm120kit.diagnose.engine import diagnose
from tests.diagnose import lines as L
from tests.diagnose.known_checks import assert_healthy, assert_named

KNOWN = Path(C.__file__).resolve().parent / "known-dcp-mla.toml"
FIELD = Path(__file__).resolve().parents[1] / "data" / "field-logs"
SP = "/usr/local/lib/python3.12/dist-packages"
CORE = "(EngineCore_DP0 pid=300) ERROR 05-15 05:02:10 [core.py:1010] "
W0 = "(Worker_TP0_DCP0 pid=400) ERROR 05-15 05:02:09 [multiproc_executor.py:772] "


def _head(tp: int = 4, dcp: int = 4) -> str:
    api = ("(APIServer pid=1) INFO 05-15 05:00:00 [utils.py:240] non-default args: {'model': "
           f"'zai-org/GLM-5.1-FP8', 'tensor_parallel_size': {tp}, "
           f"'decode_context_parallel_size': {dcp}, 'kv_cache_dtype': 'fp8'}}\n")
    return api + "\n".join(L.startup(tp, dcp)) + "\n"


def _crash(frames: list[tuple[str, int, str, str]], last: str, prefix: str = W0) -> str:
    """A worker's traceback as vLLM's multiproc executor logs it, then the engine's failure."""
    out = [prefix + "WorkerProc failed to start.", prefix + "Traceback (most recent call last):"]
    for path, line, fn, code in frames:
        out += [prefix + f'  File "{path}", line {line}, in {fn}', prefix + f"    {code}"]
    out.append(prefix + last)
    out += [CORE + "EngineCore failed to start.",
            "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause "
            "above. Failed core proc(s): {'EngineCore_DP0': 1}"]
    return _head() + "\n".join(out) + "\n"


def _at(mod: str, line: int, fn: str, code: str = "raise") -> tuple[str, int, str, str]:
    return (f"{SP}/vllm/{mod}", line, fn, code)


_LOAD = [_at("v1/worker/gpu_worker.py", 301, "load_model", "self.model_runner.load_model()"),
         _at("v1/worker/gpu_model_runner.py", 4410, "load_model", "self.model = model_loader.load_model(")]
_WARM = [_at("v1/worker/gpu_worker.py", 512, "compile_or_warm_up_model", "kernel_warmup(self)")]
_CAPTURE = [_at("v1/worker/gpu_model_runner.py", 6120, "initialize_cudagraph_capture",
                "cudagraph_mode = self.compilation_config.resolve_cudagraph_mode_and_sizes(")]

# the selector config as vLLM 0.34 prints it (vllm/v1/attention/selector.py __repr__)
_SELECTOR = (
    "AttentionSelectorConfig(head_size=576, dtype=torch.bfloat16, kv_cache_dtype={kv}, "
    "block_size={bs}, use_mla=True, has_sink=False, use_sparse=True, use_mm_prefix=False, "
    "use_per_head_quant_scales=False, attn_type=decoder, has_sliding_window=False, "
    "use_non_causal=False, use_batch_invariant=False, use_kv_connector=False, "
    "use_adaptive_verification=False, use_pcp=False, use_dcp=True, use_rswa=False).")
# a FlashInfer JIT build as ninja prints it under the SM120 warmup (a pasted excerpt)
_JIT = (
    "(Worker_TP0_DCP0 pid=400) INFO 05-15 05:01:00 [kernel_warmup.py:109] Warming up FlashInfer "
    "SM120 sparse MLA decode kernels.\n"
    "FAILED: [code={code}] /root/.cache/flashinfer/0.7.4/120a/cached_ops/sparse_mla_sm120/"
    "sparse_mla_sm120.cuda.o\n"
    "{err}\n"
    "ninja: build stopped: subcommand failed.\n")

# name -> (log text, expected category); the source that prints the message in the comment
FIXED: dict[str, tuple[str, str]] = {
    # vllm/config/parallel.py (v0.34.0); before: config-rejected
    "dcp-size-not-dividing-tp": (
        "(APIServer pid=1) INFO 05-15 05:00:00 [utils.py:240] non-default args: {'model': "
        "'zai-org/GLM-5.1-FP8', 'tensor_parallel_size': 6, 'decode_context_parallel_size': 4}\n"
        "(APIServer pid=1) Traceback (most recent call last):\n"
        f'(APIServer pid=1)   File "{SP}/vllm/engine/arg_utils.py", line 1890, in create_engine_config\n'
        "(APIServer pid=1)     parallel_config = ParallelConfig(\n"
        "(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation error for ParallelConfig\n"
        "(APIServer pid=1)   Value error, tp_size=6 must be divisible by dcp_size=4. "
        "[type=value_error, input_value=ArgsKwargs((), {...}), input_type=ArgsKwargs]\n",
        "config-invalid"),
    # vllm/config/model.py verify_with_parallel_config (v0.34.0); before: config-rejected
    "dcp-gqa-kv-heads": (
        "(APIServer pid=1) INFO 05-15 05:00:00 [utils.py:240] non-default args: {'model': "
        "'Qwen/Qwen3-32B', 'tensor_parallel_size': 4, 'decode_context_parallel_size': 2}\n"
        "(APIServer pid=1) ValueError: Decode context parallelism for GQA/MQA requires "
        "`--tensor-parallel-size` (4) to be greater than the model's total number of KV heads "
        "(8). Increase `--tensor-parallel-size` or set `--decode-context-parallel-size 1`.\n",
        "config-invalid"),
    # the same check as an assert (vllm/config/model.py, v0.20.0); before: index-match 0.55
    "dcp-gqa-kv-heads-assert": (_crash(
        _LOAD, "AssertionError: tensor parallel size 4 must be greater than total num kv heads 8 "
               "when enable decode context parallel for GQA/MQA"), "config-invalid"),
    # vllm/v1/attention/backends/mla/flashinfer_mla_sparse_sm120.py (v0.34.0); before: config-rejected
    "sparse-mla-needs-fp8-ds-mla": (_crash(
        _LOAD + [_at("v1/attention/backends/mla/flashinfer_mla_sparse_sm120.py", 71, "__init__")],
        "NotImplementedError: FLASHINFER_MLA_SPARSE_SM120 requires the packed fp8_ds_mla KV "
        "cache layout; got kv_cache_dtype='bfloat16'."), "config-invalid"),
    # vllm/platforms/cuda.py get_attn_backend_cls (v0.34.0); before: config-rejected
    "attention-backend-forced-invalid": (_crash(
        _LOAD + [_at("platforms/cuda.py", 484, "get_attn_backend_cls")],
        "ValueError: Selected backend AttentionBackendEnum.FLASHMLA_SPARSE is not valid for this "
        "configuration. Reason: ['compute capability not supported']"), "config-invalid"),
    # vllm/platforms/cuda.py (v0.20.0: no SM120 sparse-MLA backend yet); before: config-rejected
    "no-sparse-mla-backend-for-gpu": (_crash(
        _LOAD + [_at("platforms/cuda.py", 299, "get_attn_backend_cls")],
        "ValueError: No valid attention backend found for cuda with AttentionSelectorConfig("
        "head_size=576, dtype=torch.bfloat16, kv_cache_dtype=fp8_ds_mla, block_size=64, "
        "use_mla=True, has_sink=False, use_sparse=True, use_mm_prefix=False, "
        "attn_type=AttentionType.DECODER). Reasons: {FLASHMLA_SPARSE: [compute capability not "
        "supported], FLASHINFER_MLA_SPARSE: [compute capability not supported]}."),
        "library-version"),
    # vllm/v1/attention/ops/flashmla.py (v0.34.0), asserted by backends/mla/flashmla.py;
    # deepseek-ai/FlashMLA#124; before: rank-crashed
    "flashmla-not-for-this-gpu": (_crash(
        _LOAD + [_at("v1/attention/backends/mla/flashmla.py", 242, "__init__",
                     "assert is_supported, reason")],
        "AssertionError: FlashMLA Dense is only supported on Hopper devices."), "library-version"),
    # flashinfer/mla/_core.py (v0.7.4) under a cu126 torch; before: config-rejected
    "flashinfer-sm120-sparse-mla-needs-cuda": (_crash(
        _WARM + [(f"{SP}/flashinfer/mla/_core.py", 375, "_trtllm_batch_decode_sparse_mla_sm120",
                  "raise ValueError(")],
        "ValueError: SM120 sparse MLA requires SM120a (CUDA >= 12.8) or SM121a (CUDA >= 13.0)"),
        "library-version"),
    # vllm/v1/attention/backends/mla/common.py (v0.14.1); vllm#34795; before: index-match 0.55
    "dcp-mla-quantized-kv-old-release": (_crash(
        _WARM + [_at("v1/attention/backends/mla/common.py", 2134, "forward",
                     'assert not fp8_attention, "DCP not support fp8 kvcache now."')],
        "AssertionError: DCP not support fp8 kvcache now."), "dcp-unsupported"),
    # vllm/v1/core/single_type_kv_cache_manager.py (v0.34.0); before: index-match 0.55
    "dcp-model-layers-unsupported": (_crash(
        [_at("v1/core/single_type_kv_cache_manager.py", 480, "__init__",
             'assert self.dcp_world_size == 1, "DCP not support sliding window attn now."')],
        "AssertionError: DCP not support sliding window attn now.", CORE), "dcp-unsupported"),
    # vllm/distributed/kv_transfer/.../nixl/base_worker.py (v0.29.0); before: dcp.toml's
    # "no softmax LSE" reading
    "dcp-model-layers-hybrid-mamba": (_crash(
        _LOAD, "ValueError: DCP is not supported for hybrid MLA+Mamba models."), "dcp-unsupported"),
    # vllm/v1/worker/gpu_model_runner.py (v0.11.0); vllm#28100; before: index-match 0.55
    "dcp-spec-decode-old-release": (_crash(
        _WARM + [_at("v1/worker/gpu_model_runner.py", 509, "_may_reorder_batch", "assert (")],
        "AssertionError: DCP not support reorder_batch_threshold > 1 now."), "dcp-unsupported"),
    # vllm/v1/attention/backends/mla/indexer.py (v0.25.1); before: index-match 0.55
    "dcp-interleave-must-be-one": (_crash(
        _WARM + [_at("v1/attention/backends/mla/indexer.py", 263, "build")],
        "NotImplementedError: DCP sparse indexer currently supports only "
        "cp_kv_cache_interleave_size=1 (got 64)."), "config-invalid"),
    # vllm/v1/attention/backends/mla/indexer.py (v0.34.0), DeepSeek-V4; before: config-rejected
    "dcp-indexer-kv-compression": (_crash(
        _WARM + [_at("v1/attention/backends/mla/indexer.py", 371, "build")],
        "NotImplementedError: DCP with sparse indexer KV compression (compress_ratio=4) requires "
        "--cp-kv-cache-interleave-size to be a multiple of it; DeepSeek-V4 is not supported."),
        "dcp-unsupported"),
    # vllm/model_executor/layers/sparse_attn_indexer.py (v0.34.0); before: index-match 0.55
    # as dcp-unsupported (the cause is a missing package)
    "dcp-indexer-merge-needs-cutedsl": (_crash(
        _WARM + [_at("model_executor/layers/sparse_attn_indexer.py", 99,
                     "_assert_cutedsl_dcp_merge_supported")],
        "RuntimeError: DCP sparse-indexer merge requires CuteDSL; install it or disable DCP."),
        "library-version"),
    # vllm/v1/attention/backends/mla/flashinfer_mla.py (v0.34.0); before: index-match 0.55 as
    # config-invalid
    "dcp-adaptive-verification-no-lse": (_crash(
        _LOAD, "AssertionError: FlashInferMLA ragged decode cannot return LSE; DCP and adaptive "
               "variable-length decode are mutually exclusive."), "dcp-unsupported"),
    # vllm/utils/deep_gemm.py (v0.34.0); before: index-match 0.55
    "deepgemm-apis-unavailable": (_crash(
        _WARM, "RuntimeError: DeepGEMM backend is unavailable in the current vLLM environment, or "
               "the available DeepGEMM package does not provide the required APIs for these "
               "kernels."), "library-version"),
    # vllm/config/compilation.py (v0.34.0); vllm#23200; before: config-rejected
    "cudagraph-full-unsupported-backend": (_crash(
        _CAPTURE, "ValueError: CUDAGraphMode.FULL is not supported with "
                  "FlashInferMLASparseSM120MetadataBuilder backend (support: "
                  "AttentionCGSupport.NEVER); please try cudagraph_mode=PIECEWISE, and make sure "
                  "compilation mode is VLLM_COMPILE"), "cudagraph-capture"),
    # flashinfer/autotuner/autotuner.py (v0.7.4); before: index-match 0.55
    "flashinfer-autotune-ranks-diverged": (_crash(
        _WARM + [(f"{SP}/flashinfer/autotuner/autotuner.py", 1333, "_tuning_group_agreement",
                  'raise _TuningGroupError(f"Autotune group phase mismatch at {phase!r}")')],
        "flashinfer.autotuner.autotuner._TuningGroupError: Autotune group phase mismatch at "
        "'preparation'"), "autotune-deadlock"),
    # flashinfer/autotuner/autotuner.py (v0.7.4); before: index-match 0.55
    "flashinfer-autotune-inside-capture": (_crash(
        _CAPTURE + [(f"{SP}/flashinfer/autotuner/autotuner.py", 1297, "_tuning_group_agreement",
                     "raise _TuningGroupError(")],
        "RuntimeError: Distributed autotuning cannot synchronize during an active CUDA Graph "
        "capture"), "cudagraph-capture"),
    # vllm/platforms/cuda.py (v0.34.0), the SM120 backend's block-size reason (multiples of 64,
    # flashinfer_mla_sparse.py); before: config-rejected
    "sparse-mla-block-size": (_crash(
        _LOAD + [_at("platforms/cuda.py", 513, "get_attn_backend_cls")],
        "ValueError: No valid attention backend found for cuda with " + _SELECTOR.format(
            kv="fp8_ds_mla", bs=32) + " Reasons: {FLASHMLA_SPARSE: [compute capability not "
        "supported], FLASHINFER_MLA_SPARSE: [compute capability not supported], "
        "FLASHINFER_MLA_SPARSE_SM120: [block_size not supported]}."), "config-invalid"),
    # the same, the SM120 backend's KV-dtype reason; before: config-rejected
    "sparse-mla-needs-fp8-ds-mla-selector": (_crash(
        _LOAD + [_at("platforms/cuda.py", 513, "get_attn_backend_cls")],
        "ValueError: No valid attention backend found for cuda with " + _SELECTOR.format(
            kv="fp8_e5m2", bs=64) + " Reasons: {FLASHMLA_SPARSE: [compute capability not "
        "supported], FLASHINFER_MLA_SPARSE: [compute capability not supported], "
        "FLASHINFER_MLA_SPARSE_SM120: [kv_cache_dtype not supported]}."), "config-invalid"),
    # vllm/v1/attention/ops/dcp.py (v0.34.0) with VLLM_USE_DIRECT_DCP_Q_GATHER=1 on PCIe;
    # before: index-match 0.55
    "dcp-direct-gather-needs-multicast": (_crash(
        _WARM + [_at("v1/attention/ops/dcp.py", 1315, "__init__")],
        "RuntimeError: Direct DCP q-gather requires NVLS symmetric-memory multicast."),
        "dcp-unsupported"),
    # vllm/v1/attention/backends/mla/triton_mla.py (v0.34.0), an MTP draft with sliding-window
    # layers under DCP; before: dcp.toml's "no softmax LSE" reading
    "dcp-draft-model-unsupported": (_crash(
        _WARM + [_at("v1/attention/backends/mla/triton_mla.py", 209, "__init__",
                     "assert sliding_window is None or self.dcp_world_size == 1, (")],
        "AssertionError: Sliding-window Triton MLA does not support decode context parallelism; "
        "for a draft model, set draft_decode_context_parallel_size=1."), "dcp-unsupported"),
    # vllm/config/speculative.py (v0.27.0); before: index-match
    "dcp-draft-model-dspark": (
        "(APIServer pid=1) INFO 05-15 05:00:00 [utils.py:240] non-default args: {'model': "
        "'zai-org/GLM-5.1-FP8', 'tensor_parallel_size': 4, 'decode_context_parallel_size': 4, "
        "'speculative_config': {'method': 'dspark', 'num_speculative_tokens': 3}}\n"
        "(APIServer pid=1) ValueError: MLA DSpark does not currently support decode context "
        "parallelism; set decode_context_parallel_size=1.\n", "dcp-unsupported"),
    # nvcc killed under FlashInfer's JIT (flashinfer/jit/cpp_ext.py runs ninja);
    # flashinfer-ai/flashinfer#3030, PR #3636 (RTX 5090); before: rank-crashed / cold-start
    "jit-compiler-killed-host-oom": (_head() + _JIT.format(
        code=137, err="nvcc error   : 'cicc' died due to signal 9 (Kill signal)"),
        "out-of-memory"),
    # ninja's "build stopped" (src/ninja.cc) after a compile error in a FlashInfer JIT unit;
    # before: rank-crashed
    "jit-ninja-build-stopped": (_head() + _JIT.format(
        code=1, err="/root/.cache/flashinfer/0.7.4/120a/generated/sparse_mla_sm120/"
                    "sparse_mla_sm120.cu(211): error: identifier \"__nv_fp8x4_e4m3\" is undefined"),
        "library-version"),
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_a_message_the_software_prints_names_its_cause(tmp_path: Path, name: str) -> None:
    text, category = FIXED[name]
    assert_named(KNOWN, name, category, text, tmp_path)


def _ready(tp: int, dcp: int, warnings: list[str]) -> str:
    """A patched-vLLM DCP start on FLASHINFER_MLA_SPARSE_SM120 through the API server's ready."""
    out = [_head(tp, dcp).rstrip("\n")]
    out.append(L.AUTOTUNE_LEADER.format(name=L.worker(0, dcp), pid=400, ts=L.ts(60)))
    for r in range(tp):
        out.append(L.AUTOTUNE_LOADED.format(name=L.worker(r, dcp), pid=400 + r, ts=L.ts(70), r=r))
    out += warnings
    out += [
        "(EngineCore_DP0 pid=300) INFO 05-15 05:01:30 [kv_cache_utils.py:1305] GPU KV cache size: "
        "554,759 tokens, Maximum concurrency for 250,000 tokens per request: 2.22x",
        L.GRAPH_DONE.format(name=L.worker(0, dcp), pid=400, ts=L.ts(100)),
        "(APIServer pid=1) INFO 05-15 05:02:00 [api_server.py:1977] Starting vLLM API server 0 on "
        "http://0.0.0.0:8000",
        "(APIServer pid=1) INFO:     Started server process [1]",
        "(APIServer pid=1) INFO:     Waiting for application startup.",
        "(APIServer pid=1) INFO:     Application startup complete.",
    ]
    return "\n".join(out) + "\n"


_W = "(Worker_TP0_DCP0 pid=400) WARNING 05-15 05:01:10 "
_WS = (_W + "[flashinfer_mla_sparse.py:404] VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE=402653184 is "
       "below the 805306368 bytes computed for the sparse MLA workspace with dcp_world_size=4, "
       "64 heads/rank and max_num_batched_tokens=8192. Respecting the override, but the "
       "trtllm-gen kernel may crash with a workspace overflow; set "
       "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE=805306368 or unset it to use the computed size.")
HEALTHY: dict[str, str] = {
    "dcp4-sm120-plain": _ready(4, 4, []),
    # warnings a DCP start survives: our patch 0006's clamp (warmup.py), the SM120 warmup's
    # empty-cache fallback (vllm/model_executor/warmup/flashinfer_sparse_mla_warmup.py v0.34.0),
    # vLLM's CUDA-graph downgrade for spec decode (vllm/config/compilation.py v0.34.0)
    "dcp4-sm120-with-warnings": _ready(4, 4, [
        _W + "[warmup.py:201] DCP warmup: decode prompt clamped to 128 tokens, below 256 (4 ranks "
        "x block 64): not every rank holds a full local KV block during warmup (max_model_len "
        "202752, max_num_batched_tokens 128, 0 draft slots)",
        _W + "[flashinfer_sparse_mla_warmup.py:203] No FlashInfer SM120 sparse MLA decode "
        "autotune cache entries found. Falling back to FlashInfer's default tactic heuristic.",
        "(EngineCore_DP0 pid=300) WARNING 05-15 05:00:20 [compilation.py:1622] "
        "CUDAGraphMode.FULL_AND_PIECEWISE is not supported with spec-decode for attention backend "
        "FlashInferMLASparseSM120MetadataBuilder (support: "
        "AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); setting cudagraph_mode=PIECEWISE",
        # vllm/v1/attention/backends/mla/flashinfer_mla_sparse.py (v0.34.0): advice, no crash
        _WS,
    ]),
    # vLLM's fallbacks for decode kernels without LSE (vllm/utils/flashinfer.py v0.25.1,
    # v1/attention/backends/flashinfer.py v0.34.0) and the DCP CUDA-graph override
    # (vllm/config/vllm.py v0.12.0): the start goes on. dcp.toml's "does not support DCP"
    # answered the first two dcp-unsupported at 0.95 before it excluded "reverting to".
    "dcp4-lse-fallback-warnings": _ready(4, 4, [
        _W + "[flashinfer.py:280] Trtllm does not support returning LSE and as a result does not "
        "support DCP, reverting to FlashInfer",
        _W + "[flashinfer.py:1210] FlashInfer XQA decode does not support returning LSE and "
        "therefore does not support DCP, reverting to native FlashInfer decode.",
        "(EngineCore_DP0 pid=300) WARNING 05-15 05:00:20 [vllm.py:520] Decode context parallel "
        "(DCP) is enabled, which is incompatible with full CUDA graphs. Overriding cudagraph_mode "
        "to PIECEWISE.",
    ]),
}


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_a_healthy_dcp_start_stays_exit_0(tmp_path: Path, name: str) -> None:
    assert_healthy(name, HEALTHY[name], tmp_path)


def test_the_public_dcp4_startup_log_stays_exit_0() -> None:
    """local-inference-lab/rtx6kpro glm-dcp4-mtp0/startup.log (a real TP8/DCP4 GLM-5.1 start on
    8x RTX PRO 6000; field-logs manifest): no entry of this file may fire on it."""
    res = diagnose([FIELD / "rtx6kpro-glm51-dcp4-mtp0-startup.txt"])
    assert res.exit_code == 0 and not res.findings, res.verdict


def test_the_warmup_clamp_names_the_cause_of_a_warmup_stall(tmp_path: Path) -> None:
    """The clamp warning alone is advice (above); when the ranks then stall in the warmup it is
    the cause: every rank but the ones holding the short prompt's KV autotuned a shape with no
    local keys (patch 0006's reason)."""
    head = _head().rstrip("\n").split("\n")
    lines = head + [
        L.AUTOTUNE_LEADER.format(name=L.worker(0, 4), pid=400, ts=L.ts(60)),
        _W + "[warmup.py:201] DCP warmup: decode prompt clamped to 128 tokens, below 256 (4 "
        "ranks x block 64): not every rank holds a full local KV block during warmup "
        "(max_model_len 202752, max_num_batched_tokens 128, 0 draft slots)",
    ] + [L.SHM_WAIT.format(pid=300, ts=L.ts(130 + 60 * i)) for i in range(6)]
    log = tmp_path / "stall.log"
    log.write_text("\n".join(lines) + "\n")
    res = diagnose([log])
    assert res.exit_code == 1 and res.findings, res.verdict
    cats = [(f.category, f.rule) for f in res.findings]
    assert res.findings[0].category == "dcp-warmup", cats
    # the structural warmup-stall rule places the stall; the entry names why the warmup was
    # rank-asymmetric (without it no finding says the prompt was clamped)
    assert ("dcp-warmup", "dcp-warmup-prompt-clamped") in cats, cats


def test_a_too_small_workspace_override_names_the_crash_it_warned_of(tmp_path: Path) -> None:
    """The workspace warning alone is advice (healthy case above); when a worker then dies in the
    trtllm-gen kernel the override is the cause, above the device fault that follows from it."""
    log = tmp_path / "ws.log"
    log.write_text(_head() + _WS + "\n" + W0 + "torch.AcceleratorError: CUDA error: an illegal "
                   "memory access was encountered\n" + L.DIED.format(pid=300, ts=L.ts(130), r=0,
                                                                     code=-6) + "\n")
    res = diagnose([log])
    assert res.exit_code == 1 and res.findings, res.verdict
    top = res.findings[0]
    assert (top.category, top.rule) == ("config-invalid", "sparse-mla-workspace-override-too-small")
