"""What the libraries around an engine print when the installed versions do not fit each other,
the toolkit or the GPU (catalogue file known-libs.toml). Each log is the message in the shape its
software prints it (wording from the source named in the comment), inside the lines a vLLM /
SGLang / TGI start or a Python traceback prints around it; the top finding is library-version
and rests on an entry of known-libs.toml (without those entries these logs were `rank-crashed`,
`unknown` or, for TGI, `config-invalid`). Starts that print versions, version warnings they
survive and the harmless forms of the same messages stay exit 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose import catalogue as C
from tests.diagnose.known_checks import VLLM_READY, VLLM_START, assert_healthy, assert_named

KNOWN = Path(C.__file__).resolve().parent / "known-libs.toml"
SP = "/usr/local/lib/python3.12/dist-packages"

_VLLM, _READY = VLLM_START, VLLM_READY
_SGLANG = ("[2025-03-01 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct', "
           "tp_size=1, attention_backend='flashinfer')\n")
_TGI = (
    '2024-05-01T10:00:00.000000Z  INFO text_generation_launcher: Args { model_id: '
    '"meta-llama/Meta-Llama-3-8B-Instruct", num_shard: Some(2) }\n'
    "2024-05-01T10:00:05.000000Z ERROR shard-manager: text_generation_launcher: Shard complete "
    "standard error output:\n"
)


def _tb(frames: list[tuple[str, int, str, str]], last: str) -> str:
    """A Python traceback as the interpreter prints it."""
    out = "Traceback (most recent call last):\n"
    for path, line, fn, code in frames:
        out += f'  File "{path}", line {line}, in {fn}\n    {code}\n'
    return out + last + "\n"


_CLI = [("/usr/local/bin/vllm", 8, "<module>", "sys.exit(main())"),
        (f"{SP}/vllm/entrypoints/cli/main.py", 54, "main", "args.dispatch_function(args)")]
_WORKER = "(VllmWorker rank=0 pid=4471) ERROR 06-10 09:13:02 [multiproc_executor.py:527] "

# name -> log text; the source that prints the message in the comment above each
FIXED: dict[str, str] = {
    # transformers v4.46.0 src/transformers/utils/versions.py (_compare_versions)
    "transformers-dependency-out-of-range": _VLLM + _tb(_CLI + [
        (f"{SP}/transformers/utils/versions.py", 44, "_compare_versions", "raise ImportError(")],
        "ImportError: tokenizers>=0.19,<0.20 is required for a normal functioning of this module, "
        "but found tokenizers==0.20.0.\nTry: `pip install transformers -U` or `pip install -e "
        "'.[dev]'` if you're working with git main"),
    # transformers v4.57.6 src/transformers/utils/import_utils.py (logger.warning at import)
    "transformers-torch-too-old": (
        "Disabling PyTorch because PyTorch >= 2.1 is required but found 2.0.1\n"
        "None of PyTorch, TensorFlow >= 2.0, or Flax have been found. Models won't be available "
        "and only tokenizers, configuration and file/data utilities can be used.\n"
        + _tb([("train.py", 3, "<module>", "from transformers import AutoModelForCausalLM")],
              "NameError: name 'torch' is not defined")),
    # transformers v4.46.0 src/transformers/utils/import_utils.py (requires_backends)
    "transformers-backend-package-missing": _VLLM + _tb(_CLI, (
        "ImportError: \nLlamaTokenizer requires the SentencePiece library but it was not found in "
        "your environment. Checkout the instructions on the\ninstallation page of its repo: "
        "https://github.com/google/sentencepiece#installation and follow the ones\nthat match your "
        "environment. Please note that you may need to restart your runtime after installation.")),
    # numpy v2.0.0 numpy/core/_multiarray_umath.py and the import_array() check
    "numpy-abi-mismatch": (
        "\nA module that was compiled using NumPy 1.x cannot be run in\nNumPy 2.0.0 as it may "
        "crash. To support both 1.x and 2.x\nversions of NumPy, modules must be compiled with NumPy "
        "2.0.\nSome module may need to rebuild instead e.g. with 'pybind11>=2.12'.\n\n" + _VLLM
        + "AttributeError: _ARRAY_API not found\n"
        + _tb(_CLI, "ImportError: numpy.core.multiarray failed to import")),
    # numpy v2.0.0 numpy/__init__.py (__expired_attributes__)
    "numpy2-removed-alias": _VLLM + _tb(_CLI + [
        (f"{SP}/outlines/fsm/json_schema.py", 12, "<module>", "FLOAT = np.float_")],
        "AttributeError: `np.float_` was removed in the NumPy 2.0 release. Use `np.float64` "
        "instead."),
    # Cython 3.0.0 Cython/Utility/ImportExport.c (__Pyx_ImportType)
    "cython-binary-size-mismatch": _VLLM + _tb(_CLI + [
        (f"{SP}/pandas/__init__.py", 22, "<module>", "from pandas.compat import is_numpy_dev"),
        ("pandas/_libs/interval.pyx", 1, "init pandas._libs.interval", "")],
        "ValueError: numpy.dtype size changed, may indicate binary incompatibility. Expected 96 "
        "from C header, got 88 from PyObject"),
    # protobuf v25.3 python/descriptor.c (4.21.0 printed "cannot not")
    "protobuf-generated-code-too-old": _VLLM + _tb(_CLI + [
        (f"{SP}/sentencepiece/sentencepiece_model_pb2.py", 34, "<module>",
         "_descriptor.FieldDescriptor(")],
        "TypeError: Descriptors cannot not be created directly.\nIf this call came from a _pb2.py "
        "file, your generated code is out of date and must be regenerated with protoc >= 3.19.0."),
    # pydantic v2.7.0 pydantic/_migration.py
    "pydantic-v1-code-on-v2": _tb([("app/settings.py", 3, "<module>",
                                    "from pydantic import BaseSettings")], (
        "pydantic.errors.PydanticImportError: `BaseSettings` has been moved to the "
        "`pydantic-settings` package. See https://docs.pydantic.dev/2.7/migration/"
        "#basesettings-has-moved-to-pydantic-settings for more details.")),
    # torchvision v0.20.1 torchvision/extension.py (_check_cuda_version)
    "torchvision-torch-cuda-mismatch": _VLLM + _tb(_CLI + [
        (f"{SP}/torchvision/extension.py", 78, "_check_cuda_version", "raise RuntimeError(")],
        "RuntimeError: Detected that PyTorch and torchvision were compiled with different CUDA "
        "major versions. PyTorch has CUDA Version=12.8 and torchvision has CUDA Version=13.0. "
        "Please reinstall the torchvision that matches your PyTorch install."),
    # torch v2.13.0 torch/cuda/__init__.py (_warn_unsupported_code), then the engine dies
    "torch-build-lacks-gpu-arch": _VLLM + (
        f"{SP}/torch/cuda/__init__.py:283: UserWarning: \n"
        "Found GPU0 NVIDIA GeForce RTX 5090 which is of compute capability (CC) 12.0.\n"
        "The following list shows the CCs this version of PyTorch was built for and the "
        "hardware CCs it supports:\n- 8.0 which supports hardware CC >=8.0,<9.0\n"
        "- 9.0 which supports hardware CC >=9.0,<10.0\n"
        "Your installed torch==2.13.0+cu126 does not include kernels for this GPU. Reinstall the "
        "same version against a CUDA build that does, e.g.:\n"
        "  For CUDA 12.8 use pip install torch==2.13.0 --index-url "
        "https://download.pytorch.org/whl/cu128\n"
        "ERROR 06-10 09:12:30 [core.py:515] EngineCore failed to start.\n"),
    # torch v2.1.0 torch/cuda/__init__.py (old_gpu_warn): the older wording
    "torch-build-lacks-gpu-arch-old": _VLLM + (
        f"{SP}/torch/cuda/__init__.py:123: UserWarning: \n"
        "    Found GPU0 Tesla K80 which is of cuda capability 3.7.\n"
        "    PyTorch no longer supports this GPU because it is too old.\n"
        "    The minimum cuda capability supported by this library is 5.0.\n\n"
        "  warnings.warn(old_gpu_warn % (d, name, major, minor, min_arch // 10, min_arch % 10))\n"
        "ERROR 06-10 09:12:30 [core.py:515] EngineCore failed to start.\n"),
    # torch v2.5.1 torch/_inductor/scheduler.py (create_backend)
    "triton-gpu-too-old": _VLLM + (
        "(VllmWorkerProcess pid=62) ERROR 12-26 16:20:28 multiproc_worker_utils.py:236]     "
        "raise RuntimeError(\n"
        "(VllmWorkerProcess pid=62) ERROR 12-26 16:20:28 multiproc_worker_utils.py:236] "
        "RuntimeError: Found Tesla P100-PCIE-16GB which is too old to be supported by the triton "
        "GPU compiler, which is used as the backend. Triton only supports devices of CUDA "
        "Capability >= 7.0, but your device is of CUDA capability 6.0\n"),
    # CUDA runtime string for cudaErrorSymbolNotFound via torch v2.5.1 c10/cuda/CUDAException.cpp
    "cuda-named-symbol-not-found": _VLLM + _WORKER + "WorkerProc hit an exception.\n" + _tb(
        [(f"{SP}/vllm/v1/attention/backends/flash_attn.py", 622, "forward",
          "flash_attn_varlen_func(")],
        "RuntimeError: CUDA error: named symbol not found\nCUDA kernel errors might be "
        "asynchronously reported at some other API call, so the stacktrace below might be "
        "incorrect."),
    # xformers v0.0.27.post2 xformers/ops/fmha/common.py + dispatch.py
    "xformers-no-kernel-for-gpu": _VLLM + _tb(_CLI + [
        (f"{SP}/xformers/ops/fmha/dispatch.py", 83, "_run_priority_list",
         "raise NotImplementedError(msg)")],
        "NotImplementedError: No operator found for `memory_efficient_attention_forward` with "
        "inputs:\n     query       : shape=(1, 4096, 16, 64) (torch.bfloat16)\n"
        "`fa3F@0.0.0` is not supported because:\n"
        "    requires device with capability <= (9, 0) but your GPU has capability (12, 0) "
        "(too new)\n`cutlassF-pt` is not supported because:\n"
        "    requires device with capability <= (9, 0) but your GPU has capability (12, 0) "
        "(too new)"),
    # xformers v0.0.27.post2 xformers/ops/fmha/common.py: a wheel without CUDA kernels
    "xformers-no-cuda-build": _VLLM + (
        "[rank0]: NotImplementedError: Error in model execution: No operator found for "
        "`memory_efficient_attention_forward` with inputs:\n"
        "[rank0]: `fa2F@v2.5.7-pt` is not supported because:\n"
        "[rank0]:     xFormers wasn't build with CUDA support\n"),
    # flashinfer v0.6.18.post1 flashinfer/utils.py (backend_requirement, BackendSupportedError)
    "flashinfer-kernel-unsupported-gpu": _VLLM + _tb(_CLI + [
        (f"{SP}/flashinfer/utils.py", 1436, "wrapper", "raise BackendSupportedError(")],
        "flashinfer.utils.BackendSupportedError: mm_fp4 does not support backend 'trtllm' with "
        "capability 120"),
    # flashinfer v0.6.18.post1 flashinfer/compilation_context.py (get_nvcc_flags_list)
    "flashinfer-jit-no-target-arch": _VLLM + _WORKER + "WorkerProc failed to start.\n" + _tb(
        [(f"{SP}/flashinfer/compilation_context.py", 124, "get_nvcc_flags_list",
          "raise RuntimeError(")],
        "RuntimeError: No supported CUDA architectures found for major versions [9, 10]."),
    # text-generation-inference server/text_generation_server/utils/flash_attn.py
    "tgi-flash-attention-unavailable": _TGI + _tb(
        [("/opt/conda/bin/text-generation-server", 8, "<module>", "sys.exit(app())")],
        "ImportError: Flash Attention V2 is not installed.\nUse the official Docker image "
        "(ghcr.io/huggingface/text-generation-inference:latest) or install flash attention v2 "
        "with `cd server && make install install-flash-attention-v2-cuda`"),
    # text-generation-inference v2.0.4 server/text_generation_server/models/__init__.py
    "tgi-sharded-needs-flash-attention": _TGI + _tb(
        [("/opt/conda/lib/python3.10/site-packages/text_generation_server/models/__init__.py",
          505, "get_model", "raise NotImplementedError(FLASH_ATT_ERROR_MESSAGE.format(")],
        "NotImplementedError: Sharded Llama requires Flash Attention enabled models.")
        + "2024-05-01T10:00:05.500000Z ERROR text_generation_launcher: Shard 0 failed to start\n",
    # sglang v0.4.10.post2 python/sglang/srt/utils.py (assert_pkg_version)
    "sglang-package-version-check": _SGLANG + _tb([
        (f"{SP}/sglang/launch_server.py", 14, "<module>", "launch_server(server_args)"),
        (f"{SP}/sglang/srt/entrypoints/engine.py", 642, "_set_envs_and_config",
         "assert_pkg_version("),
        (f"{SP}/sglang/srt/utils.py", 851, "assert_pkg_version", "raise Exception(")],
        "Exception: sgl-kernel is installed with version 0.0.5, which is less than the minimum "
        "required version 0.0.8. Please reinstall the latest version with `pip install "
        "sgl-kernel --force-reinstall`"),
    # vllm v0.19.0 vllm/model_executor/layers/sparse_attn_indexer.py
    "vllm-deepgemm-required": _VLLM + (
        "(Worker_TP0 pid=881) ERROR 12-23 19:34:21 [multiproc_executor.py:824] RuntimeError: "
        "Sparse Attention Indexer CUDA op requires DeepGEMM to be installed.\n"
        "(EngineCore_DP0 pid=612) ERROR 12-23 19:34:22 [core.py:708] EngineCore failed to "
        "start.\n"),
    # vllm v0.10.0 vllm/utils/__init__.py (PlaceholderModule) at the first audio request
    "vllm-optional-extra-missing": _VLLM + _READY + (
        "INFO:     10.0.0.5:51234 - \"POST /v1/audio/transcriptions HTTP/1.1\" 500 Internal "
        "Server Error\n"
        "ERROR:    Exception in ASGI application\n")
        + _tb([(f"{SP}/vllm/utils/__init__.py", 2453, "__getattr__", "raise ImportError(msg)")],
              "ImportError: Please install vllm[audio] for audio support"),
    # flash-attention v2.7.3 setup.py (pip building the wheel from source)
    "flash-attn-build-cuda-too-old": (
        "Collecting flash-attn\n  Downloading flash_attn-2.7.3.tar.gz (3.2 MB)\n"
        "  Preparing metadata (setup.py): started\n"
        "  Preparing metadata (setup.py): finished with status 'error'\n"
        "  error: subprocess-exited-with-error\n"
        "      torch.__version__  = 2.5.1+cu124\n"
        + _tb([("<string>", 174, "<module>", "")],
              "      RuntimeError: FlashAttention is only supported on CUDA 11.7 and above.  "
              "Note: make sure nvcc has a supported version by running nvcc -V.")),
}

# name -> log that must stay exit 0: a start that prints versions, and the harmless forms of the
# messages above (warnings the run survives)
HEALTHY: dict[str, str] = {
    # a vLLM start that names its versions and reaches the API server
    "vllm-versions-printed": _VLLM + (
        "INFO 06-10 09:12:05 [config.py:793] This model supports multiple tasks: {'generate'}.\n"
        "INFO 06-10 09:12:06 [core.py:455] Waiting for init message from front-end.\n"
        "INFO 06-10 09:12:40 [gpu_model_runner.py:1595] Model loading took 15.27 GiB and "
        "25.1 seconds\n"
        "INFO 06-10 09:13:10 [kv_cache_utils.py:715] GPU KV cache size: 301,216 tokens\n"
        "INFO 06-10 09:13:40 [gpu_model_runner.py:2001] Graph capturing finished in 30 secs, "
        "took 0.56 GiB\n") + _READY,
    # Ray's check: a Python patch-level difference is only a warning (ray/_private/utils.py)
    "ray-python-patch-warning": _VLLM + (
        "2025-03-01 10:00:03,512\tWARNING utils.py:1591 -- Python patch version mismatch: The "
        "cluster was started with:\n    Ray: 2.40.0\n    Python: 3.12.3\nThis process on node "
        "10.0.0.2 was started with:\n    Ray: 2.40.0\n    Python: 3.12.4\n") + _READY,
    # pydantic's migration shim warns for a moved name and goes on (pydantic/_migration.py)
    "pydantic-moved-warning": _VLLM + (
        f"{SP}/pydantic/_migration.py:283: UserWarning: `pydantic.error_wrappers:ValidationError`"
        " has been moved to `pydantic:ValidationError`.\n"
        "  warnings.warn(f'`{import_path}` has been moved to `{new_location}`.')\n") + _READY,
    # Cython's RuntimeWarning form (the type grew: harmless), the run goes on
    "cython-size-warning": _VLLM + (
        f"{SP}/sklearn/__init__.py:8: RuntimeWarning: numpy.ufunc size changed, may indicate "
        "binary incompatibility. Expected 216 from C header, got 232 from PyObject\n") + _READY,
    # transformers logs that it leaves torch out when USE_TF says so (info, not a failure)
    "transformers-use-tf-info": _VLLM + "Disabling PyTorch because USE_TF is set\n" + _READY,
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_library_message_names_its_cause(name: str, tmp_path: Path) -> None:
    assert_named(KNOWN, name, "library-version", FIXED[name], tmp_path)


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_library_healthy_run_stays_exit_0(name: str, tmp_path: Path) -> None:
    assert_healthy(name, HEALTHY[name], tmp_path)


def test_every_entry_has_a_case() -> None:
    """Each entry of known-libs.toml is exercised by at least one log above."""
    from sm120kit.diagnose.catalogue.schema import parse_file
    texts = "\n".join(FIXED.values())
    missing = [e.id for e in parse_file(KNOWN) if not any(e.match(ln) for ln in texts.splitlines())]
    assert not missing, missing
