"""Named log signatures the rules consume (``match_signals(line) -> [ids]``).

Each signature is a mechanism-level message: what a class of failure prints, in the wording that
stayed stable across versions (PyTorch, NCCL, vLLM, FlashInfer, the CUDA runtime). A substring
needle gates every regex, so a line costs one ``in`` test per signature.
"""

from __future__ import annotations

import re

from sm120kit.evidence.phases import STALL_MESSAGES

_TABLE: tuple[tuple[str, str, str], ...] = (
    # memory
    ("cuda-oom", "emory", r"CUDA out of memory|OutOfMemoryError|cudaErrorMemoryAllocation"
     r"|CUBLAS_STATUS_ALLOC_FAILED|Failed to CUDA calloc|out of memory"),
    ("kv-cache-too-small", "cache", r"No available memory for the cache blocks"
     r"|larger than the available KV cache memory|Insufficient memory for KV cache"
     r"|num_gpu_blocks.*(?:<=|is) 0"
     r"|larger than the maximum number of tokens that can be stored in KV cache"),
    ("kv-available", "Available KV cache memory", r"Available KV cache memory: -?[\d.]+ ?GiB"),
    # checkpoint / config of the model
    ("experts-count", "number of experts", r"Local/global number of experts: (?P<v>\d+/\d+)"),
    ("weight-shape-mismatch", "Attempted to load weight", r"Attempted to load weight \(torch\.Size"),
    ("weight-key-missing", "'", r"(?:KeyError|Error): '(?:model\.)?[\w.]+\.(?:weight|bias|weight_scale\w*)'"),
    ("drafter-load", "draft", r"drafter\.load_model|[Dd]raft model|Loading drafter"),
    ("spec-config", "speculative", r"speculative[-_]config|num_speculative_tokens"),
    # DCP support on the backend
    ("dcp-not-supported", "DCP", r"DCP not supported|does not support (?:DCP|decode context parallel)"
     r"|DCP is not supported"),
    ("dcp-lse-assert", "LSE", r"requires attention implementations to return the softmax LSE"),
    ("dcp-nvfp4", "decode context parallel", r"not supported with decode context parallelism"),
    ("dcp-interleave", "interleave", r"should be greater than or equal to and divisible by cp_kv_cache_interleave_size"
     r"|MTP with cp_kv_cache_interleave_size > 1 is not supported"),
    # sparse-MLA warmup / autotune markers
    ("sm120-autotune-leader", "Autotuning FlashInfer", r"Autotuning FlashInfer SM120 sparse MLA"),
    ("sm120-autotune-loaded", "autotune cache loaded", r"autotune cache loaded on rank (?P<rank>\d+)"),
    ("sm120-autotune-empty", "autotune cache entries", r"No FlashInfer SM120 sparse MLA \S+ decode autotune cache entries"),
    ("sparse-mla-warmup", "sparse_mla", r"flashinfer_sparse_mla_warmup|sparse_mla_decode_autotune_warmup"),
    ("autotuner-start", "utotun", r"Autotuning process starts|\[Autotuner\]"),
    ("jit-compile", "JIT", r"JIT compilation during inference|Triton kernel JIT|JIT compil|JIT cache"
     r"|FlashInfer JIT|JIT\b.*(?:build|compil)"),
    ("jit-compile", "nvcc", r"\bnvcc\b"),
    ("jit-compile", "ompil", r"[Cc]ompiling (?:CUDA|kernel|module|extension|\w+ kernels?)"),
    ("autotune-mention", "utotun", r"[Aa]uto-?tun(?:e|er|ing)|AutoTuner"),
    # shared memory / IPC
    ("shm-error", "shm", r"/dev/shm|shm_open|Error while creating shared memory segment"
     r"|could not attach to shared memory|shared memory ring buffer"),
    ("no-space", "No space left", r"No space left on device"),
    ("semlock", "SemLock", r"SemLock|_rebuild.*FileNotFoundError"),
    ("bus-error", "Bus error", r"Bus error"),
    # P2P / transport
    ("p2p-disabled", "P2P", r"lacks GPU P2P capability|P2P test failed|do not agree on the P2P access"
     r"|peer access is not supported|P2P is disabled|cudaErrorPeerAccess|peer mapping resources exhausted"),
    ("custom-ar-disabled", "ustom allreduce is disabled", r"Custom allreduce is disabled"),
    ("nccl-p2p-env", "NCCL_P2P", r"NCCL_P2P_(?:DISABLE|LEVEL)"),
    ("acs-iommu", "ACS", r"\bACS\b|ACSCtl|Access Control Services"),
    ("acs-iommu", "IOMMU", r"\bIOMMU\b"),
    ("acs-iommu", "iommu", r"\biommu=|amd_iommu|intel_iommu"),
    ("p2p-mention", "P2P", r"\bP2P\b(?! Chunksize| plugin)"),
    ("p2p-mention", "peer", r"(?i)peer[- ]to[- ]peer|peer (?:path|access|traffic)"),
    # a report that the same launch works on one GPU and fails/hangs only with TP > 1 (the
    # multi-GPU path: P2P / NCCL transports) - "works fine when using --tensor-parallel-size=1",
    # "vllm works for one gpu inference" (the "works"/"fine" wording class; one reporter's
    # "... to 1 allows start" was dropped in review as a single-file phrase)
    ("multi-gpu-only", "ork", r"(?i)\bworks?\b[^.]{0,40}?(?:tensor[-_ ]parallel[-_ ]size|\btp)"
     r"\s*(?:=|to|of)?\s*1\b(?!\.\d)|\bworks?\b[^.]{0,30}?\b(?:one|single|1) ?gpu\b"),
    # ("fine", not "fine-tuned on a single GPU")
    ("multi-gpu-only", "fine", r"(?i)\bfine\b(?!-)[^.]{0,30}?(?:tensor[-_ ]parallel[-_ ]size|\btp)"
     r"\s*(?:=|to|of)?\s*1\b(?!\.\d)|\bfine\b(?!-)[^.]{0,30}?\b(?:one|single|1) ?gpu\b"),
    # GPUs linked over PCIe only, said in words ("PCIe, no NVLink")
    ("pcie-only-said", "NVLink", r"(?i)\bno NVLink\b|without NVLink|NVLink: ?(?:no|none|n/a)\b"),
    ("pcie-only-said", "PCIe", r"(?i)PCIe[- ]only|only (?:over |via )?PCIe"),
    # consumer GeForce boards: PCIe peer-to-peer is not supported on them (NVIDIA disables it on
    # the RTX 40 series; 30 series only through an NVLink bridge)
    ("geforce", "GeForce", r"GeForce RTX \d{4}"),
    ("custom-ar", "ustom", r"--disable-custom-all-reduce|[Cc]ustom all-?reduce"),
    ("first-collective", "first", r"first (?:collective|all_?reduce|all-reduce|ncclAllReduce|NCCL "
     r"(?:collective|call|op))"),
    ("nccl-remote-error", "remote", r"remote process exited or there was a network error|NET/\w+ : .*(?:error|failed)"),
    ("nccl-unhandled-cuda", "unhandled", r"unhandled cuda error|ncclUnhandledCudaError|unhandled system error|ncclSystemError"),
    ("nccl-internal", "internal error", r"internal error - please report this issue to the NCCL developers|ncclInternalError"),
    ("nccl-invalid-usage", "nvalid usage", r"ncclInvalidUsage|invalid usage"),
    # device faults
    ("illegal-memory", "illegal", r"an illegal memory access was encountered|illegal instruction|cudaErrorIllegalAddress"),
    ("cuda-launch", "launch", r"unspecified launch failure|cudaErrorLaunchFailure|launch timed out"),
    ("xid", "Xid", r"NVRM: Xid|\bXid \d+"),
    ("device-assert", "assert", r"device-side assert triggered"),
    ("no-kernel-image", "kernel image", r"no kernel image is available for execution"),
    ("sm-not-compatible", "compatible", r"sm_12\d is not compatible|not compatible with the current PyTorch installation"),
    # library / version
    ("undefined-symbol", "undefined symbol", r"undefined symbol"),
    ("unexpected-kwarg", "unexpected keyword", r"got an unexpected keyword argument '(?P<kw>\w+)'"),
    ("flashinfer-api", "FlashInfer", r"requires FlashInfer's sparse MLA decode API|FlashInfer build containing"
     r"|flashinfer.*(?:has no attribute|cannot import name)"),
    ("import-error", "mport", r"ImportError|ModuleNotFoundError|cannot import name"),
    ("nccl-arch-unsupported", "exceeds", r"ncclMaxSharedMem \d+ exceeds device/fn maxSharedMem"),
    ("cuda-too-old", "gpu-name", r"Value 'sm_\d+\w?' is not defined for option 'gpu-name'"),
    ("cuda-too-old", "requires CUDA", r"requires CUDA ?>= ?\d+\.\d+"),
    ("cuda-too-old", "nvcc", r"(?i)nvcc V?12\.[0-8]\.\d+.*(?:crash|fail|error)"),
    ("driver-too-old", "driver", r"CUDA driver version is insufficient|driver version is insufficient"
     r"|The NVIDIA driver on your system is too old"),
    ("version-mismatch", "ersion", r"version mismatch|[Ii]ncompatible version|requires \S+ ?[<>=]=? ?\d"),
    ("flashinfer-version-check", "does not match flashinfer", r"flashinfer-cubin version \(\S+\) does "
     r"not match flashinfer version|flashinfer-jit-cache version \(\S+\) does not match"),
    ("flashinfer-version-check", "FLASHINFER_DISABLE_VERSION_CHECK", r"FLASHINFER_DISABLE_VERSION_CHECK"),
    ("nccl-version-mention", "NCCL", r"NCCL[\w ]{0,24}?:? ?v?(?P<v>2\.\d{1,2}\.\d{1,2})"),
    ("sm120-gpu", "6000", r"(?i)RTX PRO 6000(?! Ada)"),
    ("sm120-gpu", "RTX 50", r"RTX 50[6-9]0"),
    ("sm120-gpu", "sm_12", r"sm_12[01]"),
    ("sm120-gpu", "SM", r"\bSM ?12[01]\b|\bSM 12\.x"),
    ("sm120-gpu", "apability", r"[Cc]apability:? \(?12[.,] ?[01]"),
    # interposers / overrides
    ("ld-preload", "LD_PRELOAD", r"LD_PRELOAD"),
    ("nccl-so-path", "VLLM_NCCL_SO_PATH", r"VLLM_NCCL_SO_PATH"),
    ("hami", "HAMI", r"HAMI|libvgpu|vgpu"),
    # the GPU-sharing layers that LD_PRELOAD a CUDA/NVML hook into the container: HAMi / HAMi-core
    # (libvgpu.so), the Volcano vGPU device plugin (ships HAMi-core), the 4paradigm k8s-vgpu
    # scheduler; named in a report as "HAMi 2.7.0", "HAMi-core", "volcano-vgpu-device-plugin"
    ("gpu-virt", "HAMi", r"\bHAMi(?:-core)?\b"),
    ("gpu-virt", "HAMI", r"\bHAMI(?:_CORE|-core)?\b"),
    ("gpu-virt", "vgpu", r"(?i)libvgpu\.so|vgpu[-_ ]device[-_ ]plugin|k8s-vgpu-scheduler"),
    ("gpu-virt", "vGPU", r"(?i)vgpu[-_ ]device[-_ ]plugin|libvgpu\.so"),
    # HAMi-core's own limits, set in the pod env by the HAMi device plugin (HAMi-core README)
    ("gpu-virt", "CUDA_DEVICE_", r"\bCUDA_DEVICE_(?:MEMORY_LIMIT|SM_LIMIT|MEMORY_SHARED_CACHE)\w*="),
    ("nccl-plugin", "plugin", r"NCCL INFO (?:NET/)?Plugin|libnccl-net|NCCL_NET_PLUGIN|tuner plugin"),
    # config
    ("divisible", "divisible", r"must be divisible by|should be divisible by|is not divisible by"),
    ("config-value-error", "Error", r"(?:ValueError|AssertionError|NotImplementedError): .*(?:not supported|"
     r"must be|Invalid|invalid|unsupported|Unsupported|requires|only supports|does not support)"),
    ("arg-error", "argument", r"error: argument |unrecognized arguments|invalid choice"),
    ("backend-rejected", "backend", r"is not a DeepSeek V4 attention backend|[Nn]o valid attention backend"
     r"|Selected backend \S+ is not valid|backend .* does not support"),
    ("cudagraph-full", "cudagraph_mode", r"cudagraph_mode['\"]?[:=] ?['\"]?(?:CUDAGraphMode\.)?FULL"),
    # timeouts with a finer id than their stall id come from phases.STALL_MESSAGES (below)
    ("engine-init-failed-empty", "Failed core proc", r"Failed core proc\(s\): \{\}"),
    ("engine-ready-env", "VLLM_ENGINE_READY_TIMEOUT_S", r"VLLM_ENGINE_READY_TIMEOUT_S"),
    ("cudagraph-capture", "raph", r"init_cuda_graphs|capture_cudagraph|[Cc]apturing CUDA graph|CUDA graph "
     r"capture|cuda-graph-max-bs|graph capture"),
    ("rpc-dequeue", "get_response", r"in get_response|mq\.dequeue\(timeout|get_response\b"),
    ("fr-disabled", "FlightRecorder is disabled", r"FlightRecorder is disabled"),
    ("killed", "Killed", r"^Killed$|\bKilled\b.*(?:process|signal)|oom-kill|Out of memory: Killed"),
    ("segfault", "egmentation", r"Segmentation fault|SIGSEGV"),
    ("sigabrt", "abort", r"Aborted \(core dumped\)|SIGABRT|exit code: -6"),
)
_COMPILED: tuple[tuple[str, str, re.Pattern[str]], ...] = tuple(
    (sid, needle, re.compile(rx)) for sid, needle, rx in _TABLE
) + tuple((fine, needle, re.compile(rx)) for _stall, fine, needle, rx in STALL_MESSAGES if fine)
SIGNAL_IDS: tuple[str, ...] = tuple(dict.fromkeys(sid for sid, _n, _r in _COMPILED))


def match_signals(line: str) -> list[tuple[str, re.Match[str]]]:
    """(id, match) of every signature that matches the line (usually none)."""
    out: list[tuple[str, re.Match[str]]] = []
    seen: set[str] = set()
    for sid, needle, rx in _COMPILED:
        if needle in line and sid not in seen:
            m = rx.search(line)
            if m:
                out.append((sid, m))
                seen.add(sid)
    return out


def signal_match(sid: str, line: str) -> re.Match[str] | None:
    for s, _n, rx in _COMPILED:
        if s == sid:
            m = rx.search(line)
            if m:
                return m
    return None
