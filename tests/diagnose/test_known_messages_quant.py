"""What vLLM and SGLang print when a quantized checkpoint or a quantized kernel cannot run
(catalogue file known-quant.toml). Each log is the message in the shape its software prints it
(wording from the source named in the comment), inside the lines a vLLM / SGLang start prints
around it; the top finding names the category the fix belongs to and rests on an entry of
known-quant.toml. Without those entries these logs were answered `rank-crashed` (the kernel
selector's "Failed to find a kernel", torch._scaled_mm on a GPU without FP8, the NVFP4 stubs of
a build without NVFP4), `config-invalid` from the broad config-rejected entry or the message
index (a checkpoint's quantization config the loader rejects, SGLang's missing vLLM), or
`checkpoint-config` at 0.45 (transformers' missing gguf package). Messages the catalogue already
named right (the capability gate "Minimum capability: X. Current capability: Y", Marlin / FP8
block shapes "is not divisible by", "The input size is not aligned", "Cannot find the config file
for", "No compiled cutlass_scaled_mm", bf16 before compute capability 8.0) are checked here too,
so the new file does not take them over. Starts that print quantization notices (Marlin
fallbacks, "not fully optimized yet", kernels chosen) stay exit 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose import catalogue as C
from sm120kit.diagnose.engine import diagnose
from tests.diagnose.known_checks import assert_healthy, assert_named

KNOWN = Path(C.__file__).resolve().parent / "known-quant.toml"
SP = "/usr/local/lib/python3.12/dist-packages"


def _vllm(model: str, extra: str = "") -> str:
    return (
        "INFO 09-14 10:02:11 [__init__.py:241] Automatically detected platform cuda.\n"
        "(APIServer pid=4112) INFO 09-14 10:02:14 [api_server.py:1805] vLLM API server version "
        "0.10.2\n"
        f"(APIServer pid=4112) INFO 09-14 10:02:14 [utils.py:328] non-default args: {{'model': "
        f"'{model}'{extra}}}\n"
        "(APIServer pid=4112) INFO 09-14 10:02:21 [__init__.py:711] Resolved architecture: "
        "Qwen2ForCausalLM\n"
        "(EngineCore_0 pid=4370) INFO 09-14 10:02:30 [core.py:654] Waiting for init message from "
        "front-end.\n"
        "(EngineCore_0 pid=4370) INFO 09-14 10:02:31 [gpu_model_runner.py:2338] Starting to load "
        "model " + model + "...\n"
    )


_E = "(EngineCore_0 pid=4370) ERROR 09-14 10:02:33 [core.py:718] "


def _engine_tb(frames: list[tuple[str, int, str, str]], last: str) -> str:
    """V1's EngineCore traceback, each line behind the process prefix."""
    out = [f"{_E}EngineCore failed to start.", f"{_E}Traceback (most recent call last):"]
    for path, line, fn, code in frames:
        out += [f'{_E}  File "{path}", line {line}, in {fn}', f"{_E}    {code}"]
    out += [f"{_E}{ln}" for ln in last.splitlines()]
    return "\n".join(out) + (
        "\n(APIServer pid=4112) RuntimeError: Engine core initialization failed. See root cause "
        "above. Failed core proc(s): {}\n")


def _sglang_tb(frames: list[tuple[str, int, str, str]], last: str) -> str:
    out = ("[2025-05-25 00:29:10] server_args=ServerArgs(model_path='Qwen/QwQ-32B-AWQ', "
           "quantization=None, tp_size=1, attention_backend='flashinfer')\n"
           "[2025-05-25 00:29:24] Load weight begin. avail mem=23.11 GB\n"
           "[2025-05-25 00:29:24] Scheduler hit an exception: Traceback (most recent call last):\n")
    for path, line, fn, code in frames:
        out += f'  File "{path}", line {line}, in {fn}\n    {code}\n'
    return out + last + "\n\n[2025-05-25 00:29:24] Received sigquit from a child process. It " \
        "usually means the child failed.\n"


_LOAD = [(f"{SP}/vllm/v1/executor/abstract.py", 54, "__init__", "self._init_executor()"),
         (f"{SP}/vllm/model_executor/model_loader/base_loader.py", 44, "load_model",
          "model = initialize_model(vllm_config=vllm_config,")]
_QUANT = f"{SP}/vllm/model_executor/layers/quantization"
_SGL = [(f"{SP}/sglang/srt/managers/scheduler.py", 2255, "run_scheduler_process",
         "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, pp_rank, dp_rank)"),
        (f"{SP}/sglang/srt/model_executor/model_runner.py", 512, "load_model",
         "self.model = get_model(")]

# name -> (category, log text); the source that prints the message in the comment above each
FIXED: dict[str, tuple[str, str]] = {
    # vllm v0.10.2 layers/quantization/kernels/mixed_precision/__init__.py (choose_mp_linear_kernel)
    "kernel-selection-wna16": ("config-invalid", _vllm(
        "Qwen/Qwen2.5-VL-7B-Instruct-W4A16") + _engine_tb(_LOAD + [
            (f"{_QUANT}/kernels/mixed_precision/__init__.py", 91, "choose_mp_linear_kernel",
             "raise ValueError(")],
        "ValueError: Failed to find a kernel that can implement the WNA16 linear layer. Reasons: "
        "\nCutlassW4A8LinearKernel requires capability 90, current compute  capability is 80\n"
        "MacheteLinearKernel requires capability 90, current compute  capability is 80\n"
        " AllSparkLinearKernel cannot implement due to: Act reordering currently not supported by "
        "AllSpark\n"
        " MarlinLinearKernel cannot implement due to: Weight input_size_per_partition = 3420 is "
        "not divisible by min_thread_k = 128. Consider reducing tensor_parallel_size or running "
        "with --quantization gptq.\n"
        " Dynamic4bitLinearKernel cannot implement due to: Only CPU is supported\n"
        " BitBLASLinearKernel cannot implement due to: bitblas is not installed. Please install "
        "bitblas by running `pip install bitblas>=0.1.0`\n"
        " ConchLinearKernel cannot implement due to: conch-triton-kernels is not installed, please "
        "install it via `pip install conch-triton-kernels` and try again!\n"
        " ExllamaLinearKernel cannot implement due to: Act reordering currently not supported by "
        "Exllama, when the input features are partitioned across devices")),
    # vllm v0.34.0 model_executor/kernels/linear/__init__.py (the NVFP4 selector)
    "kernel-selection-nvfp4": ("config-invalid", _vllm(
        "nvidia/Qwen3-30B-A3B-FP4") + _engine_tb(_LOAD + [
            (f"{SP}/vllm/model_executor/kernels/linear/__init__.py", 1308,
             "init_nvfp4_linear_kernel", "raise ValueError(")],
        "ValueError: Failed to find a kernel that can implement the NVFP4 linear layer. Reasons: "
        "\n CutlassNvFp4LinearKernel requires capability 100, current compute capability is 90")),
    # torch v2.5.1 aten/src/ATen/native/cuda/Blas.cpp; vLLM 0.6 V0 prints it from the model run
    "torch-scaled-mm-ampere": ("config-invalid", (
        "INFO 12-07 14:20:02 api_server.py:585] vLLM API server version 0.6.4.post1\n"
        "INFO 12-07 14:20:02 api_server.py:586] args: Namespace(model='meta-llama/Llama-3.1-8B-"
        "Instruct', quantization='fp8', tensor_parallel_size=2)\n"
        "INFO 12-07 14:21:40 model_runner.py:1077] Loading model weights took 4.2 GiB\n"
        "ERROR 12-07 14:21:53 engine.py:366] Error in model execution (input dumped to /tmp/"
        "err_execute_model_input_20241207-142153.pkl): torch._scaled_mm is only supported on CUDA "
        "devices with compute capability >= 9.0 or 8.9, or ROCm MI300+\n"
        "ERROR 12-07 14:21:53 engine.py:366] Traceback (most recent call last):\n"
        "ERROR 12-07 14:21:53 engine.py:366] RuntimeError: Error in model execution (input dumped "
        "to /tmp/err_execute_model_input_20241207-142153.pkl): torch._scaled_mm is only supported "
        "on CUDA devices with compute capability >= 9.0 or 8.9, or ROCm MI300+\n")),
    # triton v3.3.1 python/triton/language/core.py, inside vLLM's block-FP8 Triton GEMM on an A100
    "triton-fp8e4nv-ampere": ("config-invalid", _vllm(
        "Qwen/Qwen3-30B-A3B-FP8") + (
        "(EngineCore_0 pid=4370) INFO 09-14 10:02:58 [gpu_model_runner.py:2392] Model loading took "
        "29.1 GiB and 41.2 seconds\n"
        "(EngineCore_0 pid=4370) triton.compiler.errors.CompilationError: at 1:0:\n"
        "(EngineCore_0 pid=4370) def _w8a8_block_fp8_matmul(\n"
        "(EngineCore_0 pid=4370) ^\n"
        "(EngineCore_0 pid=4370) ValueError(\"type fp8e4nv not supported in this architecture. The "
        "supported fp8 dtypes are ('fp8e4b15', 'fp8e5')\")\n"
        "[rank0]:[W914 10:03:12.613147412 ProcessGroupNCCL.cpp:1575] Warning: WARNING: "
        "destroy_process_group() was not called before program exit, which can leak resources.\n")),
    # vllm csrc/quantization/fp4/nvfp4_quant_entry.cu (a source build without ENABLE_NVFP4_SM120)
    "nvfp4-quant-not-compiled": ("library-version", _vllm(
        "nvidia/Llama-3.3-70B-Instruct-FP4", ", 'tensor_parallel_size': 2") + _engine_tb([
            (f"{SP}/vllm/v1/worker/gpu_model_runner.py", 2680, "profile_run",
             "= self._dummy_run(self.max_num_tokens, is_profile=True)"),
            (f"{SP}/vllm/_custom_ops.py", 1352, "scaled_fp4_quant",
             "torch.ops._C.scaled_fp4_quant(output, input, output_scale, input_global_scale)")],
        "NotImplementedError: No compiled nvfp4 quantization kernel")),
    # vllm csrc/quantization/fp4/nvfp4_blockwise_moe_kernel.cu (cutlass_fp4_group_mm stub)
    "nvfp4-moe-not-compiled": ("library-version", _vllm(
        "nvidia/Qwen3-30B-A3B-FP4") + _engine_tb([
            (f"{SP}/vllm/_custom_ops.py", 1421, "cutlass_fp4_moe_mm",
             "torch.ops._C.cutlass_fp4_group_mm(out_tensors, a_tensors, b_tensors,")],
        "NotImplementedError: No compiled cutlass_fp4_group_mm kernel, vLLM must be compiled with "
        "ENABLE_NVFP4_SM100 or ENABLE_NVFP4_SM120 and CUDA 12.8 or above.")),
    # sglang v0.4.6.post5 python/sglang/srt/layers/quantization/__init__.py
    "sglang-awq-needs-vllm": ("library-version", _sglang_tb(_SGL + [
        (f"{SP}/sglang/srt/layers/quantization/__init__.py", 116, "get_quantization_config",
         "raise ValueError(")],
        "ValueError: awq quantization requires some operators from vllm. Please install vllm by "
        "`pip install vllm==0.8.4`")),
    # sglang v0.5.2 python/sglang/srt/layers/quantization/compressed_tensors/compressed_tensors_moe.py
    "sglang-wna16-moe-needs-vllm": ("library-version", _sglang_tb(_SGL + [
        (f"{SP}/sglang/srt/layers/quantization/compressed_tensors/compressed_tensors_moe.py", 91,
         "get_moe_method", "raise ImportError(")],
        "ImportError: vllm is not installed, to use CompressedTensorsWNA16MoEMethod, please "
        "install vllm.")),
    # transformers v4.46.0 src/transformers/modeling_gguf_pytorch_utils.py (load_gguf_checkpoint)
    "gguf-package-missing": ("library-version", _vllm(
        "/models/qwen2.5-7b-instruct-q4_k_m.gguf") + (
        "Loading a GGUF checkpoint in PyTorch, requires both PyTorch and GGUF>=0.10.0 to be "
        "installed. Please see https://pytorch.org/ and https://github.com/ggerganov/llama.cpp/"
        "tree/master/gguf-py for installation instructions.\n") + _engine_tb(_LOAD + [
            (f"{SP}/transformers/modeling_gguf_pytorch_utils.py", 82, "load_gguf_checkpoint",
             'raise ImportError("Please install torch and gguf>=0.10.0 to load a GGUF checkpoint '
             'in PyTorch.")')],
        "ImportError: Please install torch and gguf>=0.10.0 to load a GGUF checkpoint in "
        "PyTorch.")),
    # vllm v0.10.2 layers/quantization/gptq_bitblas.py (GPTQBitBLASConfig.__init__)
    "bitblas-missing": ("library-version", _vllm(
        "TheBloke/Llama-2-7B-GPTQ", ", 'quantization': 'gptq_bitblas'") + _engine_tb(_LOAD + [
            (f"{_QUANT}/gptq_bitblas.py", 74, "__init__", "raise ValueError(")],
        "ValueError: Trying to use the bitblas backend, but could not importwith the following "
        "error: No module named 'bitblas'. Please install bitblas through the following command: "
        "`pip install bitblas>=0.1.0`")),
    # vllm v0.10.2 layers/quantization/modelopt.py (ModelOptNvFp4Config.from_config)
    "modelopt-nvfp4-fields": ("checkpoint-config", _vllm(
        "/models/Llama-3.1-8B-NVFP4", ", 'quantization': 'modelopt_fp4'") + _engine_tb(
        _LOAD + [(f"{_QUANT}/modelopt.py", 761, "from_config", "raise ValueError(")],
        "ValueError: NVFP4 quantization requires the following fields in hf_quant_config.json: "
        "['kv_cache_quant_algo', 'exclude_modules']")),
    # vllm v0.10.2 layers/quantization/awq.py (AWQConfig.__init__)
    "awq-8-bit-checkpoint": ("checkpoint-config", _vllm("someone/Llama-3-8B-AWQ-8bit") + _engine_tb(
        _LOAD + [(f"{_QUANT}/awq.py", 43, "__init__", "raise ValueError(")],
        "ValueError: Currently, only 4-bit weight quantization is supported for AWQ, but got 8 "
        "bits.")),
    # vllm v0.10.2 layers/quantization/gptq_marlin.py (GPTQMarlinConfig.__init__)
    "gptq-marlin-3-bit": ("checkpoint-config", _vllm("someone/Mistral-7B-GPTQ-3bit") + _engine_tb(
        _LOAD + [(f"{_QUANT}/gptq_marlin.py", 117, "__init__", "raise ValueError(")],
        "ValueError: Unsupported quantization config: bits=3, sym=True")),
    # vllm v0.10.2 layers/quantization/modelopt.py (ModelOptFp8Config.from_config)
    "modelopt-algo": ("checkpoint-config", _vllm(
        "nvidia/Llama-3.1-8B-Instruct-W4A8", ", 'quantization': 'modelopt'") + _engine_tb(
        _LOAD + [(f"{_QUANT}/modelopt.py", 148, "from_config", "raise ValueError(")],
        "ValueError: ModelOpt currently only supports: ['FP8'] quantizations in vLLM. Please check "
        "the `hf_quant_config.json` file for your model's quant configuration.")),
    # vllm v0.10.2 model_loader/weight_utils.py (get_quant_config, modelopt producer check)
    "modelopt-producer": ("checkpoint-config", _vllm(
        "/models/Llama-3.1-8B-FP8", ", 'quantization': 'modelopt'") + _engine_tb(
        _LOAD + [(f"{SP}/vllm/model_executor/model_loader/weight_utils.py", 261,
                  "get_quant_config", "raise ValueError(")],
        "ValueError: Unsupported quantization config found for modelopt in <_io.TextIOWrapper "
        "name='/models/Llama-3.1-8B-FP8/hf_quant_config.json' mode='r' encoding='UTF-8'>.")),
    # vllm v0.10.2 layers/quantization/fp8.py (Fp8Config.__init__)
    "fp8-block-not-serialized": ("checkpoint-config", _vllm("/models/block-fp8-bf16") + _engine_tb(
        _LOAD + [(f"{_QUANT}/fp8.py", 90, "__init__", "raise ValueError(")],
        "ValueError: The block-wise quantization only supports fp8-serialized checkpoint for "
        "now.")),
    # vllm v0.10.2 compressed_tensors/compressed_tensors.py (_get_scheme_from_parts)
    "compressed-tensors-no-scheme": ("checkpoint-config", _vllm(
        "RedHatAI/Qwen3-8B-NVFP4") + _engine_tb(_LOAD + [
            (f"{_QUANT}/compressed_tensors/compressed_tensors.py", 540, "_get_scheme_from_parts",
             "raise NotImplementedError(")],
        "NotImplementedError: No compressed-tensors compatible scheme was found.")),
    # vllm v0.34.0 compressed_tensors/compressed_tensors.py (actorder group/dynamic removed)
    "compressed-tensors-actorder": ("checkpoint-config", _vllm(
        "someone/Qwen3-14B-W4A16-actorder") + _engine_tb(_LOAD + [
            (f"{_QUANT}/compressed_tensors/compressed_tensors.py", 340, "_quantization_scheme_map"
             "_from_config", "raise ValueError(")],
        "ValueError: Compressed-tensors group/dynamic activation ordering (actorder='group') is "
        "no longer supported. Use a checkpoint with static/weight activation ordering or without "
        "activation ordering.")),
    # vllm v0.10.2 layers/quantization/gguf.py (GGUFLinearMethod.process_weights_after_loading)
    "gguf-type": ("checkpoint-config", _vllm("/models/Qwen3-8B-IQ1_M.gguf") + _engine_tb(
        _LOAD + [(f"{_QUANT}/gguf.py", 381, "process_weights_after_loading",
                  "raise ValueError(")],
        "ValueError: Unsupported GGUF quantization type 29 in layer QKVParallelLinear("
        "in_features=4096, output_features=6144, bias=False, tp_size=1, gather_output=False).")),
}

# name -> (category, entry id) for messages other catalogue files already name right: the new
# file must not take them over (vllm v0.10.2 config/__init__.py, marlin_utils.py, fp8.py)
KEPT: dict[str, tuple[str, str, str]] = {
    "capability-gate": ("config-invalid", "config-rejected",
                        "ValueError: The quantization method awq is not supported for the current "
                        "GPU. Minimum capability: 75. Current capability: 70."),
    "marlin-shape": ("config-invalid", "config-rejected",
                     "ValueError: Weight output_size_per_partition = 2736 is not divisible by  "
                     "min_thread_n = 64. Consider reducing tensor_parallel_size or running with "
                     "--quantization gptq."),
    "fp8-block-shape": ("config-invalid", "config-rejected",
                        "ValueError: Weight input_size_per_partition = 3696 is not divisible by "
                        "weight quantization block_k = 128."),
    "cutlass-scaled-mm": ("library-version", "vllm-cutlass-kernel-not-compiled-for-arch",
                          "NotImplementedError: No compiled cutlass_scaled_mm for a compute "
                          "capability less than CUDA device capability: 120"),
}

_READY = (
    "(EngineCore_0 pid=4370) INFO 09-14 10:03:40 [gpu_model_runner.py:2392] Model loading took "
    "5.44 GiB and 8.1 seconds\n"
    "(EngineCore_0 pid=4370) INFO 09-14 10:04:02 [kv_cache_utils.py:864] GPU KV cache size: "
    "412,160 tokens\n"
    "(APIServer pid=4112) INFO 09-14 10:04:30 [api_server.py:1880] Starting vLLM API server 0 on "
    "http://0.0.0.0:8000\n"
    "(APIServer pid=4112) INFO:     Application startup complete.\n"
)

# name -> a start that prints quantization notices and serves (each line from the vLLM 0.10.2
# module named in its bracket)
HEALTHY: dict[str, str] = {
    "awq-marlin-chosen": _vllm("Qwen/Qwen2.5-7B-Instruct-AWQ") + (
        "(APIServer pid=4112) INFO 09-14 10:02:21 [awq_marlin.py:117] The model is convertible to "
        "awq_marlin during runtime. Using awq_marlin kernel.\n"
        "(EngineCore_0 pid=4370) INFO 09-14 10:02:31 [gptq_marlin.py:266] Using MarlinLinearKernel "
        "for AWQMarlinLinearMethod\n") + _READY,
    "awq-forced": _vllm("Qwen/Qwen2.5-7B-Instruct-AWQ", ", 'quantization': 'awq'") + (
        "(APIServer pid=4112) INFO 09-14 10:02:21 [awq_marlin.py:121] Detected that the model can "
        "run with awq_marlin, however you specified quantization=awq explicitly, so forcing awq. "
        "Use quantization=awq_marlin for faster inference\n"
        "(APIServer pid=4112) WARNING 09-14 10:02:21 [__init__.py:1217] awq quantization is not "
        "fully optimized yet. The speed can be slower than non-quantized models.\n") + _READY,
    "fp8-via-marlin": _vllm("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8") + (
        "(EngineCore_0 pid=4370) WARNING 09-14 10:02:40 [marlin_utils_fp8.py:80] Your GPU does not "
        "have native support for FP8 computation but FP8 quantization is being used. Weight-only "
        "FP8 compression will be used leveraging the Marlin kernel. This may degrade performance "
        "for compute-heavy workloads.\n"
        "(EngineCore_0 pid=4370) INFO 09-14 10:02:40 [marlin_utils.py:353] You are running Marlin "
        "kernel with bf16 on GPUs before SM90. You can consider change to fp16 to achieve better "
        "performance if possible.\n") + _READY,
    "nvfp4-via-w4a16": _vllm("RedHatAI/Qwen3-8B-NVFP4") + (
        "(EngineCore_0 pid=4370) WARNING 09-14 10:02:35 [compressed_tensors.py:488] Current "
        "platform does not support cutlass NVFP4. Running CompressedTensorsW4A16Fp4.\n"
        "(EngineCore_0 pid=4370) WARNING 09-14 10:02:40 [marlin_utils_fp4.py:129] Your GPU does "
        "not have native support for FP4 computation but FP4 quantization is being used. "
        "Weight-only FP4 compression will be used leveraging the Marlin kernel. This may degrade "
        "performance for compute-heavy workloads.\n") + _READY,
    # SGLang 0.5.2 (srt/layers/quantization/awq.py) picks Marlin for an AWQ checkpoint and serves
    "sglang-awq-marlin": (
        "[2025-09-14 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct-AWQ', "
        "quantization=None, tp_size=1, attention_backend='flashinfer')\n"
        "[2025-09-14 10:00:05] The model is convertible to awq_marlin during runtime. Using "
        "awq_marlin kernel.\n"
        "[2025-09-14 10:00:06 TP0] Load weight begin. avail mem=78.46 GB\n"
        "[2025-09-14 10:00:14 TP0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.float16, "
        "avail mem=73.02 GB, mem usage=5.44 GB.\n"
        "[2025-09-14 10:00:40] The server is fired up and ready to roll!\n"),
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_quant_message_names_its_cause(name: str, tmp_path: Path) -> None:
    category, text = FIXED[name]
    assert_named(KNOWN, name, category, text, tmp_path)


@pytest.mark.parametrize("name", sorted(KEPT))
def test_message_already_named_stays_with_its_entry(name: str, tmp_path: Path) -> None:
    category, rule, line = KEPT[name]
    log = tmp_path / f"{name}.log"
    log.write_text(_vllm("x/y") + _engine_tb(_LOAD, line))
    res = diagnose([log])
    assert res.findings and res.findings[0].category == category, res.verdict
    assert res.findings[0].rule == rule, res.findings[0].rule


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_quant_healthy_start_stays_exit_0(name: str, tmp_path: Path) -> None:
    assert_healthy(name, HEALTHY[name], tmp_path)


def test_every_entry_has_a_case() -> None:
    """Each entry of known-quant.toml is exercised by at least one log above."""
    from sm120kit.diagnose.catalogue.schema import parse_file
    texts = "\n".join(t for _, t in FIXED.values()).splitlines()
    missing = [e.id for e in parse_file(KNOWN) if not any(e.match(ln) for ln in texts)]
    assert not missing, missing
