"""What the engines mean when they refuse a launch configuration or a checkpoint (catalogue file
known-vllm-config.toml, issue 29): vLLM (V1 engine core and the V0 engine), SGLang's scheduler
and TGI's launcher each print the message in their own start-up lines and traceback; the top
finding names the category an engineer who knows the software reads in the message, and it rests
on an entry of known-vllm-config.toml.

The wording of each message is the one its source prints (file and release in the comment above
each case, with a public thread where one exists). Without the file these logs were answered
rank-crashed (TGI's server and torch/CPython strings are in no source index), a wrong category
from the message index's module mapping (the quantization config's missing key read as a launch
setting, vLLM's trust-remote-code wrapper read as a checkpoint fault, the engine's unknown
architecture read as a checkpoint fault) or by the broad config-rejected entry (an old
transformers' RoPE type list read as a bad flag), or the index named the category at 0.55 with
no cause; so the tests fail without it. Healthy starts that load weights stay exit 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose import catalogue as C
from sm120kit.diagnose.engine import diagnose
from tests.diagnose.known_checks import assert_healthy, assert_named

KNOWN = Path(C.__file__).resolve().parent / "known-vllm-config.toml"
SITE = "/usr/local/lib/python3.12/dist-packages"

_V1_HEAD = (
    "INFO 08-20 10:00:00 [__init__.py:241] Automatically detected platform cuda.\n"
    "(APIServer pid=1) INFO 08-20 10:00:02 [api_server.py:1805] vLLM API server version 0.10.1\n"
    "(APIServer pid=1) INFO 08-20 10:00:02 [utils.py:326] non-default args: {'model': '/models/m', "
    "'tensor_parallel_size': 2}\n"
    "(APIServer pid=1) INFO 08-20 10:00:09 [config.py:1604] Using max model len 32768\n"
    "(EngineCore_0 pid=812) INFO 08-20 10:00:12 [core.py:654] Waiting for init message from "
    "front-end.\n"
    "(EngineCore_0 pid=812) INFO 08-20 10:00:20 [gpu_model_runner.py:1953] Starting to load model "
    "/models/m...\n"
)


def v1(frame: str, func: str, message: str) -> str:
    """A V1 engine core that fails while building the model: its traceback, then the API
    server's wrapper (vllm/v1/engine/core.py, vllm/v1/engine/utils.py, v0.10.1)."""
    pre = "(EngineCore_0 pid=812) ERROR 08-20 10:00:21 [core.py:718] "
    lines = [
        "EngineCore failed to start.",
        "Traceback (most recent call last):",
        f'  File "{SITE}/vllm/v1/engine/core.py", line 709, in run_engine_core',
        "    engine_core = EngineCoreProc(*args, **kwargs)",
        f'  File "{SITE}/vllm/v1/worker/gpu_model_runner.py", line 1976, in load_model',
        "    self.model = model_loader.load_model(",
        f'  File "{SITE}/{frame}", line 301, in {func}',
        f"    raise {message.split(':', 1)[0].split('.')[-1]}(",
        message,
    ]
    return (_V1_HEAD + "".join(pre + x + "\n" for x in lines)
            + "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause "
              "above. Failed core proc(s): {'EngineCore_0': 1}\n")


def api(frame: str, func: str, message: str) -> str:
    """The API server process refuses the configuration before any engine starts (the engine
    arguments' create_engine_config), as vLLM 0.6-0.8 print it."""
    return (
        "INFO 03-12 09:00:00 api_server.py:585] vLLM API server version 0.6.3.post1\n"
        "INFO 03-12 09:00:00 api_server.py:586] args: Namespace(model='/models/m', "
        "tensor_parallel_size=2)\n"
        "Traceback (most recent call last):\n"
        f'  File "{SITE}/vllm/entrypoints/openai/api_server.py", line 217, in '
        "build_async_engine_client_from_engine_args\n"
        "    engine_config = engine_args.create_engine_config()\n"
        f'  File "{SITE}/vllm/engine/arg_utils.py", line 1046, in create_engine_config\n'
        "    model_config = self.create_model_config()\n"
        f'  File "{SITE}/{frame}", line 160, in {func}\n'
        f"{message}\n")


def sglang(frame: str, func: str, message: str) -> str:
    """SGLang's scheduler process fails while loading the model (v0.4.10.post2 wording of the
    scheduler's exception line and the launcher's sigquit)."""
    return (
        "[2025-07-28 10:00:00] server_args=ServerArgs(model_path='/data/Qwen2___5-Omni-7B/', "
        "tp_size=1, mem_fraction_static=0.8, trust_remote_code=True)\n"
        "[2025-07-28 10:00:05 TP0] Init torch distributed begin.\n"
        "[2025-07-28 10:00:06 TP0] Load weight begin. avail mem=78.50 GB\n"
        "[2025-07-28 10:00:07 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 2405, in run_scheduler_process\n'
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, pp_rank, dp_rank)\n"
        f'  File "{SITE}/{frame}", line 52, in {func}\n'
        f"{message}\n"
        "\n"
        "[2025-07-28 10:00:08] Received sigquit from a child process. It usually means the "
        "child failed.\n")


def tgi(message: str, frame: str = "text_generation_server/utils/weights.py",
        func: str = "get_sharded") -> str:
    """TGI's launcher relaying a shard's traceback (launcher/src/main.rs and server/cli.py
    shapes, TGI 1.4-2.x)."""
    ts = "2024-04-02T10:00:{:02d}.000000Z"
    return (
        f'{ts.format(0)}  INFO text_generation_launcher: Args {{ model_id: "/data/model", '
        "num_shard: Some(4), quantize: Some(Gptq) }\n"
        f"{ts.format(1)}  INFO text_generation_launcher: Sharding model on 4 processes\n"
        f"{ts.format(2)}  INFO download: text_generation_launcher: Starting download process.\n"
        f"{ts.format(5)}  INFO download: text_generation_launcher: Successfully downloaded "
        "weights.\n"
        f"{ts.format(5)}  INFO shard-manager: text_generation_launcher: Starting shard rank=0\n"
        f"{ts.format(9)} ERROR text_generation_launcher: Error when initializing model\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/conda/bin/text-generation-server", line 8, in <module>\n'
        "    sys.exit(app())\n"
        f'  File "/opt/conda/lib/python3.10/site-packages/{frame}", line 275, in {func}\n'
        f"{message}\n"
        f"{ts.format(10)} ERROR shard-manager: text_generation_launcher: Shard complete standard "
        "error output:\n"
        f"{ts.format(10)} ERROR text_generation_launcher: Shard 0 failed to start\n"
        f"{ts.format(10)}  INFO text_generation_launcher: Shutting down shards\n"
        "Error: ShardCannotStart\n")


QUANT = "vllm/model_executor/layers/quantization"
LOADER = "vllm/model_executor/model_loader"

# name -> (expected top category, entry id, log text)
CASES: dict[str, tuple[str, str, str]] = {
    # vllm/model_executor/layers/quantization/base_config.py (v0.11.1); vllm-project/vllm#6861
    # (before: config-invalid from the module mapping)
    "quant-key": ("checkpoint-config", "quant-config-key-missing", v1(
        f"{QUANT}/base_config.py", "get_from_keys",
        "ValueError: Cannot find any of ['bits', 'w_bit'] in the model's quantization config.")),
    # vllm/model_executor/model_loader/weight_utils.py (v0.6.3); vllm-project/vllm#13612
    # (before: checkpoint-config from the index at 0.55, no cause named)
    "quant-file": ("checkpoint-config", "quant-config-file-missing", api(
        f"{LOADER}/weight_utils.py", "get_quant_config",
        "ValueError: Cannot find the config file for gptq")),
    # sglang python/sglang/srt/model_loader/weight_utils.py (v0.4.10.post2) (before: 0.55)
    "quant-file-sglang": ("checkpoint-config", "quant-config-file-missing", sglang(
        "sglang/srt/model_loader/weight_utils.py", "get_quant_config",
        "ValueError: Cannot find the config file for awq")),
    # vllm/model_executor/model_loader/default_loader.py (v0.10.1); vllm-project/vllm#3329
    # (before: 0.55)
    "no-weights": ("checkpoint-config", "model-weights-not-found", v1(
        f"{LOADER}/default_loader.py", "_prepare_weights",
        "RuntimeError: Cannot find any model weights with `/models/m`")),
    # the same loader (v0.10.1); vllm-project/vllm#15536 (before: 0.55)
    "not-initialized": ("checkpoint-config", "weights-not-initialized-from-checkpoint", v1(
        f"{LOADER}/default_loader.py", "load_weights",
        "ValueError: Following weights were not initialized from checkpoint: {'lm_head.weight'}")),
    # vllm/model_executor/models/utils.py (v0.10.1); vllm-project/vllm#12783 (before: 0.55)
    "no-parameter": ("checkpoint-config", "checkpoint-tensor-without-parameter", v1(
        "vllm/model_executor/models/utils.py", "_load_module",
        "ValueError: There is no module or parameter named '_orig_mod' in Qwen2ForCausalLM")),
    # CPython Modules/_pickle.c under torch/serialization.py _legacy_load; vllm-project/vllm#1382
    # (before: rank-crashed)
    "lfs-pointer": ("checkpoint-config", "weight-file-not-a-pickle", v1(
        "torch/serialization.py", "_legacy_load", "_pickle.UnpicklingError: invalid load key, 'v'.")),
    # pytorch caffe2/serialize/inline_container.cc (v2.5.1) (before: rank-crashed)
    "truncated-bin": ("checkpoint-config", "weight-file-truncated", v1(
        "torch/serialization.py", "__init__",
        "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central "
        "directory")),
    # transformers src/transformers/models/auto/configuration_auto.py (v4.40.0);
    # gpustack/gpustack#1804 (before: 0.55)
    "no-model-type": ("checkpoint-config", "config-json-without-model-type", api(
        "transformers/models/auto/configuration_auto.py", "from_pretrained",
        "ValueError: Unrecognized model in /models/lora_model_QwQ-32B. Should have a `model_type` "
        "key in its config.json, or contain one of the following strings in its name: albert, "
        "align, altclip")),
    # transformers src/transformers/utils/hub.py (v4.40.0); vllm-project/vllm#4416 (before: 0.55)
    "no-config-json": ("checkpoint-config", "model-folder-file-missing", api(
        "transformers/utils/hub.py", "cached_file",
        "OSError: /models/m does not appear to have a file named config.json. Checkout "
        "'https://huggingface.co//models/m/tree/None' for available files.")),
    # vllm/transformers_utils/config.py (v0.6.3); lm-sys/FastChat#2471 (before: checkpoint-config
    # from the module mapping)
    "trust-remote-code": ("config-invalid", "vllm-custom-config-needs-trust-remote-code", api(
        "vllm/transformers_utils/config.py", "get_config",
        "RuntimeError: Failed to load the model config. If the model is a custom model not yet "
        "available in the HuggingFace transformers library, consider setting "
        "`trust_remote_code=True` in LLM or using the `--trust-remote-code` flag in the CLI.")),
    # vllm/model_executor/layers/quantization/awq.py (v0.6.3); vllm-project/vllm#5675
    # (before: config-invalid at 0.55, no cause named)
    "awq-tp": ("config-invalid", "quantized-weight-split-by-tp", v1(
        f"{QUANT}/awq.py", "create_weights",
        "ValueError: The input size is not aligned with the quantized weight shape. This can be "
        "caused by too large tensor parallel size.")),
    # vllm/engine/arg_utils.py (v0.11.1) (before: cudagraph-capture from the module mapping)
    "cudagraph-flags": ("config-invalid", "vllm-cudagraph-sizes-conflict", v1(
        "vllm/engine/arg_utils.py", "create_engine_config",
        "ValueError: cudagraph_capture_sizes and compilation_config.cudagraph_capture_sizes are "
        "mutually exclusive")),
    # vllm/config/vllm.py (v0.11.1) (before: cudagraph-capture from the module mapping)
    "cudagraph-max": ("config-invalid", "vllm-cudagraph-sizes-conflict", v1(
        "vllm/config/vllm.py", "_set_cudagraph_sizes",
        "ValueError: customized max_cudagraph_capture_size(=1024) should be consistent with the "
        "max value of cudagraph_capture_sizes(=512)")),
    # vllm/model_executor/models/registry.py (v0.10.1) (before: checkpoint-config from the
    # module mapping)
    "arch-vllm": ("library-version", "architecture-not-in-engine-or-transformers", v1(
        "vllm/model_executor/models/registry.py", "_try_resolve_transformers",
        "ValueError: Cannot find model module. 'TeleChatForCausalLM' is not a registered model in "
        "the Transformers library (only relevant if the model is meant to be in Transformers) and "
        "'AutoModel' is not present in the model config's 'auto_map' (relevant if the model is "
        "custom).")),
    # sglang python/sglang/srt/model_loader/utils.py (v0.4.10.post2); sgl-project/sglang#8451
    "arch-sglang": ("library-version", "architecture-not-in-engine-or-transformers", sglang(
        "sglang/srt/model_loader/utils.py", "get_model_architecture",
        "ValueError: Cannot find model module. 'Qwen2_5OmniModel' is not a registered model in the "
        "Transformers library (only relevant if the model is meant to be in Transformers) and "
        "'AutoModel' is not present in the model config's 'auto_map' (relevant if the model is "
        "custom).")),
    # transformers src/transformers/models/llama/configuration_llama.py (v4.40.0)
    # (before: config-invalid from config-rejected)
    "rope-yarn": ("library-version", "rope-scaling-type-unknown-to-config-class", api(
        "transformers/models/llama/configuration_llama.py", "_rope_scaling_validation",
        "ValueError: `rope_scaling`'s type field must be one of ['linear', 'dynamic'], got yarn")),
    # TGI server/text_generation_server/utils/weights.py (v1.4.0);
    # huggingface/text-generation-inference#3005 (before: rank-crashed)
    "tgi-shards": ("config-invalid", "tgi-shard-count-does-not-divide", tgi(
        "AssertionError: The choosen size 10944 is not compatible with sharding on 4 shards")),
    # TGI server/text_generation_server/layers/marlin/gptq.py (v3.3.7);
    # huggingface/text-generation-inference#2356 (before: rank-crashed)
    "tgi-gptq": ("checkpoint-config", "tgi-quantized-weights-missing", tgi(
        "RuntimeError: Cannot load `gptq` weight for GPTQ -> Marlin repacking, make sure the model "
        "is already quantized", "text_generation_server/layers/marlin/gptq.py", "get_weights_col")),
    # TGI server/text_generation_server/utils/hub.py (v1.4.0);
    # huggingface/text-generation-inference#229 (before: rank-crashed)
    "tgi-no-weights": ("checkpoint-config", "tgi-no-weight-files-for-model", tgi(
        "huggingface_hub.utils._errors.EntryNotFoundError: No .bin weights found for model "
        "TheBloke/vicuna-13B-1.1-GPTQ-4bit-128g and revision None.",
        "text_generation_server/utils/hub.py", "weight_hub_files")),
    # TGI server/text_generation_server/models/__init__.py (v2.0.0) (before: rank-crashed)
    "tgi-model-type": ("checkpoint-config", "tgi-model-type-missing", tgi(
        "RuntimeError: Could not determine model type for /data/model revision None",
        "text_generation_server/models/__init__.py", "get_model")),
    # TGI server/text_generation_server/models/__init__.py (v2.0.0) (before: rank-crashed)
    "tgi-speculate": ("config-invalid", "tgi-speculate-over-heads", tgi(
        "RuntimeError: Speculate is set to `4` but this medusa models only has `3` heads, please "
        "make them match", "text_generation_server/models/__init__.py", "get_model")),
    # TGI server/text_generation_server/models/__init__.py (v2.2.0) (before: rank-crashed)
    "tgi-exl2": ("config-invalid", "tgi-exl2-not-shardable", tgi(
        "RuntimeError: Sharding is currently not supported with `exl2` quantization",
        "text_generation_server/models/__init__.py", "get_model")),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_config_or_checkpoint_message_names_its_cause(name: str, tmp_path: Path) -> None:
    category, entry, text = CASES[name]
    assert_named(KNOWN, name, category, text, tmp_path)
    log = tmp_path / f"{name}.log"
    assert diagnose([log]).findings[0].rule == entry


HEALTHY: dict[str, str] = {
    # vLLM V1 start that loads safetensors shards, warns about the quantization and serves
    "vllm-v1-awq": (
        _V1_HEAD
        + "(EngineCore_0 pid=812) WARNING 08-20 10:00:13 [config.py:1211] awq quantization is not "
          "fully optimized yet. The speed can be slower than non-quantized models.\n"
          "(EngineCore_0 pid=812) INFO 08-20 10:00:21 [weight_utils.py:296] Using model weights "
          "format ['*.safetensors']\n"
          "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:09<00:00,  2.40s/it]\n"
          "(EngineCore_0 pid=812) INFO 08-20 10:00:31 [default_loader.py:262] Loading weights took "
          "9.61 seconds\n"
          "(EngineCore_0 pid=812) INFO 08-20 10:00:40 [gpu_worker.py:276] Available KV cache "
          "memory: 52.31 GiB\n"
          "(APIServer pid=1) INFO 08-20 10:01:02 [api_server.py:1880] Starting vLLM API server 0 "
          "on http://0.0.0.0:8000\n"
          "(APIServer pid=1) INFO:     Application startup complete.\n"),
    # TGI start of a sharded GPTQ model that converts no weights and reaches the router
    "tgi-gptq": (
        '2024-04-02T10:00:00.000000Z  INFO text_generation_launcher: Args { model_id: '
        '"/data/model", num_shard: Some(2), quantize: Some(Gptq) }\n'
        "2024-04-02T10:00:01.000000Z  INFO text_generation_launcher: Sharding model on 2 "
        "processes\n"
        "2024-04-02T10:00:02.000000Z  INFO download: text_generation_launcher: Files are already "
        "present on the host. Skipping download.\n"
        "2024-04-02T10:00:03.000000Z  INFO shard-manager: text_generation_launcher: Starting shard "
        "rank=0\n"
        "2024-04-02T10:00:30.000000Z  INFO shard-manager: text_generation_launcher: Shard ready in "
        "27.1s rank=0\n"
        "2024-04-02T10:00:31.000000Z  INFO text_generation_launcher: Starting Webserver\n"
        "2024-04-02T10:00:32.000000Z  INFO text_generation_router: router/src/main.rs:339: "
        "Connected\n"),
    # SGLang start that loads weights and fires up
    "sglang": (
        "[2025-07-28 10:00:00] server_args=ServerArgs(model_path='/data/Qwen2.5-7B-Instruct-AWQ', "
        "tp_size=1, quantization='awq')\n"
        "[2025-07-28 10:00:05 TP0] Init torch distributed begin.\n"
        "[2025-07-28 10:00:06 TP0] Load weight begin. avail mem=78.50 GB\n"
        "Loading safetensors checkpoint shards: 100% Completed | 2/2 [00:03<00:00,  1.60s/it]\n"
        "[2025-07-28 10:00:10 TP0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.float16, "
        "avail mem=73.10 GB\n"
        "[2025-07-28 10:00:20] The server is fired up and ready to roll!\n"),
}


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_healthy_start_that_loads_weights_stays_exit_0(name: str, tmp_path: Path) -> None:
    assert_healthy(name, HEALTHY[name], tmp_path)
