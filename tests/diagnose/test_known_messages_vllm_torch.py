"""Messages that vLLM, torch.distributed, torch's CUDA layer, Triton, flash-attn and transformers
print by name, each in a two-line log as a user's engine start shows it: the top finding names
the cause an engineer who knows the software reads in the message (issue 29).

Each line is worded as the software prints it (source file in the comment, at a release tag)
and seen in the public thread named beside it. Where ``rule`` is given, the answer comes from an
entry of ``catalogue/known-vllm-torch.toml``: without that file these logs were answered
``rank-crashed`` / ``unknown`` (or a wrong category), so the test fails. The others already had
the right answer before the file existed and guard it against the new entries.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose.engine import diagnose

HEAD = "ERROR 01-01 00:00:00 [core.py:1] EngineCore failed to start.\n"

# (message line as printed, expected top category, catalogue entry that must name it or None)
FIXED = [
    # torch/csrc/distributed/c10d/ProcessGroupWrapper.cpp (v2.5.1); pytorch/pytorch#78022
    ("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: "
     "CollectiveFingerPrint(SequenceNumber=12, OpType=ALLREDUCE, TensorShape=[1], TensorDtypes=Float), "
     "but Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=12, OpType=BROADCAST).",
     "collective-desync", "torch-collective-fingerprint-mismatch"),
    # c10/cuda/CUDAException.cpp (v2.5.1), cudaErrorInvalidDevice; vllm-project/vllm#8984
    ("RuntimeError: CUDA error: invalid device ordinal", "config-invalid",
     "cuda-invalid-device-ordinal"),
    # c10/cuda/CUDAFunctions.cpp (v2.5.1); vllm-project/vllm#14413
    ("RuntimeError: No CUDA GPUs are available", "config-invalid", "no-gpu-visible"),
    # torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (v2.5.1); meta-llama/codellama#125
    ("ValueError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!", "config-invalid",
     "no-gpu-visible"),
    # c10/cuda/CUDAFunctions.cpp (v2.5.1), no driver loaded
    ("RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU "
     "and installed a driver from http://www.nvidia.com/Download/index.aspx", "config-invalid",
     "no-gpu-visible"),
    # torch/serialization.py (v2.5.1)
    ("RuntimeError: Attempting to deserialize object on a CUDA device but torch.cuda.is_available() "
     "is False. If you are running on a CPU-only machine, please use torch.load with "
     "map_location=torch.device('cpu') to map your storages to the CPU.", "config-invalid",
     "no-gpu-visible"),
    # vllm csrc/custom_all_reduce.cuh (v0.6.3) CUDACHECK; ai-dynamo/dynamo#787
    ("Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:307 'invalid argument'",
     "p2p-transport", "vllm-custom-allreduce-cuda-failure"),
    # cudaErrorPeerAccessUnsupported via torch's CUDA check / NCCL's CUDACHECK; efeslab/Nanoflow#22
    ("RuntimeError: CUDA error: peer access is not supported between these two devices",
     "p2p-transport", "cuda-peer-access-unsupported"),
    ("transport/p2p.cc:275 NCCL WARN Cuda failure 'peer access is not supported between these two "
     "devices'", "p2p-transport", "cuda-peer-access-unsupported"),
    # triton python/triton/runtime/build.py (v3.1.0); vllm-project/vllm#2997
    ("RuntimeError: Failed to find C compiler. Please specify via CC environment variable.",
     "library-version", "triton-no-c-compiler"),
    # torch/_inductor/exc.py TritonMissing (v2.9.1); kijai/ComfyUI-WanVideoWrapper#978
    ("torch._inductor.exc.TritonMissing: Cannot find a working triton installation. Either the "
     "package is not installed or it is too old. More information on installing Triton can be "
     "found at: https://github.com/triton-lang/triton", "library-version", "torch-triton-missing"),
    # torch/distributed/rendezvous.py (v2.5.1); pytorch/pytorch#39832
    ("ValueError: Error initializing torch.distributed using env:// rendezvous: environment variable "
     "MASTER_ADDR expected, but not set", "config-invalid", "torch-rendezvous-env-unset"),
    # flash-attention csrc/flash_attn/flash_api.cpp (v2.6.3); vllm-project/vllm#8189
    ("RuntimeError: FlashAttention only supports Ampere GPUs or newer.", "library-version",
     "flash-attn-needs-ampere"),
    ("RuntimeError: FlashAttention only support fp16 and bf16 data type", "config-invalid",
     "flash-attn-gpu-or-dtype-unsupported"),
    # transformers models/llama/configuration_llama.py (v4.42.4); runpod-workers/worker-vllm#89
    # (config-rejected read it as a bad flag before)
    ("ValueError: `rope_scaling` must be a dictionary with two fields, `type` and `factor`, got "
     "{'factor': 8.0, 'low_freq_factor': 1.0, 'high_freq_factor': 4.0, "
     "'original_max_position_embeddings': 8192, 'rope_type': 'llama3'}", "library-version",
     "transformers-rope-scaling-too-old"),
    # vllm/model_executor/layers/rotary_embedding.py (v0.6.3); NVIDIA/nim-deploy#60
    ("ValueError: Unknown RoPE scaling type longrope", "library-version", "vllm-unknown-rope-type"),
    # triton python/triton/runtime/errors.py (v3.1.0); vllm-project/vllm#36802
    ("triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 81920, "
     "Hardware limit: 65536. Reducing block sizes or `num_stages` may help.", "library-version",
     "triton-shared-memory-exceeded"),
    # vllm/utils/__init__.py make_zmq_socket (v0.11.0); vllm-project/vllm#7196
    ("zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:5570')", "config-invalid",
     "zmq-address-in-use"),
    # NCCL src/transport/nvls.cc (v2.26.2-1); NVIDIA/nccl#1672
    ("ccw-gpu-128:3485254:3487188 [0] transport/nvls.cc:598 NCCL WARN Cuda failure 1 "
     "'invalid argument'", "p2p-transport", "nccl-nvls-cuda-failure"),
    # torch/utils/cpp_extension.py (v2.5.1); sgl-project/sglang#2514, LMCache/LMCache#388
    ("RuntimeError: Ninja is required to load C++ extensions", "library-version",
     "torch-extension-toolchain-missing"),
    ("OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.",
     "library-version", "torch-extension-toolchain-missing"),
    ("RuntimeError: The current installed version of g++ (13.2.0) is greater than the maximum "
     "required version by CUDA 12.1. Please make sure to use an adequate version of g++ "
     "(>=6.0.0, <13.0).", "library-version", "torch-extension-toolchain-missing"),
    # Triton's launcher stub includes Python.h; vllm-project/vllm#27890
    ("/tmp/tmps1rkq3y3/main.c:5:10: fatal error: Python.h: No such file or directory",
     "library-version", "jit-build-headers-missing"),
    # torch/backends/cudnn/__init__.py (v2.5.1); pytorch/pytorch#80637
    ("RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against (8, 7, 0) but found "
     "runtime version (8, 6, 0). PyTorch already comes bundled with cuDNN.", "library-version",
     "torch-cudnn-version-mismatch"),
    # safetensors bindings/python/src/lib.rs (v0.4.5) safe_open; hiyouga/LlamaFactory#3340
    ('FileNotFoundError: No such file or directory: "/root/Qwen1.5-7B/model-00001-of-00004.safetensors"',
     "checkpoint-config", "safetensors-shard-missing"),
    # torch/serialization.py (v2.6.0); pytorch/pytorch#150998
    ("_pickle.UnpicklingError: Weights only load failed. This file can still be loaded, to do so you "
     "have two options, do those steps only if you trust the source of the checkpoint.",
     "library-version", "torch-weights-only-load"),
    # torch c10/core/Device.cpp (v2.5.1) under vLLM's UnspecifiedPlatform
    # (vllm/platforms/__init__.py, v0.11.0); vllm-project/vllm#27807
    ("RuntimeError: Device string must not be empty", "config-invalid", "vllm-no-platform-detected"),
    # c10/cuda/CUDAFunctions.cpp (v2.5.1), cudaErrorSystemNotReady; pytorch/pytorch#35710
    ("RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions "
     "before calling NumCudaDevices() that might have already set an error? Error 802: system not "
     "yet initialized", "config-invalid", "cuda-system-not-ready"),
    # transformers models/auto/tokenization_auto.py (v4.42.4); vllm-project/vllm#38099
    ("ValueError: Tokenizer class TokenizersBackend does not exist or is not currently imported.",
     "library-version", "transformers-tokenizer-class-unknown"),
    # huggingface_hub _snapshot_download.py (v0.24.0); vllm-project/vllm#23684
    ("huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot "
     "folder for the specified revision on the local disk and outgoing traffic has been disabled. "
     "To enable repo look-ups and downloads online, set 'HF_HUB_OFFLINE=0' as environment variable.",
     "config-invalid", "hf-offline-model-not-cached"),
    # aten/src/ATen/cuda/CublasHandlePool.cpp (v2.5.1); EleutherAI/lm-evaluation-harness#1689
    ("RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`",
     "out-of-memory", "cublas-handle-not-initialized"),
    # aten/src/ATen/cuda/CUDAContext.cpp (v2.5.1); vllm-project/vllm#327, pytorch/pytorch#107300
    ("torch.cuda.DeferredCudaCallError: CUDA call failed lazily at initialization with error: "
     "device >= 0 && device < num_gpus INTERNAL ASSERT FAILED at "
     "\"../aten/src/ATen/cuda/CUDAContext.cpp\":50, please report a bug to PyTorch. device=1, "
     "num_gpus=1", "config-invalid", "cuda-device-count-assert"),
]

# already answered right before known-vllm-torch.toml: the new entries must not take them
KEPT = [
    # vllm/v1/worker/gpu_worker.py (v0.11.0)
    ("ValueError: Free memory on device (10.5/23.55 GiB) on startup is less than desired GPU memory "
     "utilization (0.9, 21.2 GiB). Decrease GPU memory utilization or reduce GPU memory used by "
     "other processes.", "out-of-memory"),
    # vllm/v1/core/kv_cache_utils.py (v0.11.0)
    ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
     "when initializing the engine.", "kv-cache-insufficient"),
    # torch: cudaErrorNoKernelImageForDevice
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device",
     "library-version"),
    # vllm/model_executor/model_loader (KeyError on params_dict)
    ("KeyError: 'model.layers.0.self_attn.qkv_proj.weight'", "checkpoint-config"),
    # torch/distributed/rendezvous.py TCPStore bind
    ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
     "network address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address "
     "already in use", "config-invalid"),
    # NCCL init.cc
    ("init.cc:871 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000",
     "config-invalid"),
    # a CUDA OOM through NCCL's CUDACHECK is memory, not transport
    ("include/alloc.h:105 NCCL WARN Cuda failure 'out of memory'", "out-of-memory"),
    # the same rope_scaling check over a value without the Llama 3.1 keys (vLLM's own
    # transformers_utils/configs/nemotron.py, v0.6.3: a --rope-scaling the user passed) stays a
    # rejected setting
    ("ValueError: `rope_scaling` must be a dictionary with two fields, `type` and `factor`, got "
     "{'factor': 2.0}", "config-invalid"),
]


def _top(tmp_path: Path, line: str) -> tuple[str, str]:
    log = tmp_path / "engine.log"
    log.write_text(HEAD + "ERROR 01-01 00:00:00 [core.py:1] " + line + "\n", encoding="utf-8")
    f = diagnose([log]).findings[0]
    return f.category, f.rule


@pytest.mark.parametrize(("line", "category", "rule"), FIXED, ids=[r for _, _, r in FIXED])
def test_a_message_the_software_prints_names_its_cause(tmp_path: Path, line: str, category: str,
                                                       rule: str) -> None:
    assert _top(tmp_path, line) == (category, rule)


@pytest.mark.parametrize(("line", "category"), KEPT, ids=[c for _, c in KEPT])
def test_messages_known_before_keep_their_cause(tmp_path: Path, line: str, category: str) -> None:
    assert _top(tmp_path, line)[0] == category


def test_the_flash_attention_fallback_notice_is_not_a_cause(tmp_path: Path) -> None:
    """vLLM logs "Cannot use FlashAttention-2 backend for Volta and Turing GPUs." at INFO and
    falls back to another backend (vllm/attention/selector.py, v0.6.3): the FlashAttention entry
    must not read it as the GPU being refused."""
    line = "INFO 01-01 00:00:00 selector.py:224] Cannot use FlashAttention-2 backend for Volta and Turing GPUs."
    log = tmp_path / "engine.log"
    log.write_text(line + "\n", encoding="utf-8")
    assert "flash-attn-gpu-or-dtype-unsupported" not in {f.rule for f in diagnose([log]).findings}
