"""Wording classes of the catalogue (library versions, configuration, memory, stated regressions):
each real line names its entry, look-alike lines that state no fault name nothing, and a stated
cause ranks above the generic "a rank crashed" it led to.

Every line below is a real wording: the program that prints it (vLLM / torch / NCCL / nvcc /
cuBLAS source) or the public thread it was posted in is named beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose import catalogue as C
from sm120kit.diagnose.engine import diagnose

CAT = C.load(environ={})

NAMED = [
    # vLLM gpu_model_runner.py (0.11 .. 0.12): the attention-impl DCP check's earlier wording,
    # https://github.com/vllm-project/vllm/issues/30936
    ("AssertionError: DCP requires attention impls to return the softmax lse for decode, but the "
     "impl FlashAttentionImpl does not return the softmax lse for decode.", "dcp-unsupported"),
    # vLLM cp_utils.py check_attention_cp_compatibility: an impl without MTP at interleave > 1,
    # https://github.com/vllm-project/vllm/pull/56722
    ("AssertionError: MTP with cp_kv_cache_interleave_size > 1 is not supported in "
     "FlashMLASparseImpl.", "dcp-mtp-interleave-unsupported"),
    # vLLM config: the block size is the user's to fix
    ("AssertionError: block_size (32) should be greater than or equal to and divisible by "
     "cp_kv_cache_interleave_size (64)", "dcp-interleave"),
    # nvcc: https://github.com/thu-ml/TurboDiffusion/issues/80
    ("      nvcc fatal   : Unsupported gpu architecture 'compute_120a'", "cuda-toolkit-too-old"),
    # torch/utils/cpp_extension.py _get_cuda_arch_flags
    ("ValueError: Unknown CUDA arch (12.0+PTX) or GPU not supported", "cuda-toolkit-too-old"),
    # cudaErrorInvalidDeviceFunction's string (kernels not built for this GPU)
    ("RuntimeError: CUDA error: invalid device function", "binary-mismatch"),
    # the dynamic loader: a library built against a newer libstdc++
    ("ImportError: /lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.32' not found "
     "(required by /opt/venv/lib/python3.12/site-packages/vllm/_C.abi3.so)", "binary-mismatch"),
    ("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory",
     "binary-mismatch"),
    # https://github.com/vllm-project/vllm/issues/7940 (torch / torchvision builds differ)
    ("RuntimeError: operator torchvision::nms does not exist", "binary-mismatch"),
    # https://github.com/QwenLM/Qwen3-VL/issues/51 (vLLM's _C ops missing)
    ("AttributeError: '_OpNamespace' '_C' object has no attribute 'gelu_quick'", "binary-mismatch"),
    # torch/cuda/__init__.py _lazy_init
    ("AssertionError: Torch not compiled with CUDA enabled", "binary-mismatch"),
    # NCCL src/enqueue.cc, https://github.com/vllm-project/vllm/issues/3069
    ("NCCL WARN NCCL cannot be captured in a graph if either it wasn't built with CUDA runtime "
     ">= 11.3 or if the installed CUDA driver < R465.", "nccl-not-graph-capturable"),
    # https://github.com/vllm-project/vllm/issues/1814, /24289
    ("ModuleNotFoundError: No module named 'vllm._C'", "module-missing"),
    ("AttributeError: module 'triton.language' has no attribute 'constexpr_function'",
     "module-missing"),
    # a pasted excerpt that cut the argument name: https://github.com/vllm-project/vllm/issues/48054
    ("decode fails with `TypeError: trtllm_batch_decode_sparse_mla_dsv4() got an unexpected "
     "keyword argument 'swa_topk_le", "unexpected-keyword"),
    # cuBLAS CUBLAS_STATUS_ALLOC_FAILED as ggml prints it: https://github.com/ggml-org/llama.cpp/issues/25304
    ("CUDA error: the resource allocation failed", "cuda-oom"),
    ("failed to allocate 32.00M (33554432 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
     "cuda-oom"),
    # vllm/v1/worker/utils.py, https://github.com/pytorch/pytorch/issues/175666
    ("(EngineCore_DP0 pid=6940) ValueError: Free memory on device cuda:1 (19.77/22.05 GiB) on "
     "startup is less than desired GPU memory utilization (0.9, 19.84 GiB). Decrease GPU memory "
     "utilization or reduce GPU memory used by other processes.", "gpu-memory-taken"),
    # torch/cuda/__init__.py, https://github.com/vllm-project/vllm/issues/7151
    ("ERROR 01-19 03:55:24 multiproc_worker_utils.py:233] Exception in worker VllmWorkerProcess "
     "while processing method init_device: Cannot re-initialize CUDA in forked subprocess. To use "
     "CUDA with multiprocessing, you must use the 'spawn' start method", "cuda-fork-reinit"),
    # vllm/config/model.py _get_and_verify_max_len
    ("ValueError: User-specified max_model_len (200000) is greater than the derived max_model_len "
     "(max_position_embeddings=131072 or model_max_length=None in model's config.json).",
     "config-rejected"),
    # vLLM's Ray executor: https://github.com/vllm-project/vllm/issues/8885
    ("ValueError: The number of required GPUs exceeds the total number of available GPUs in the "
     "placement group.", "gpus-fewer-than-parallel-size"),
    # transformers dynamic_module_utils.resolve_trust_remote_code
    ("ValueError: Loading moonshotai/Kimi-K2.5 requires you to execute the configuration file in "
     "that repo on your local machine.", "trust-remote-code-missing"),
    # https://github.com/vllm-project/vllm/issues/12378
    ("huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
     "'namespace/repo_name': '/root/DeepSeek-V2-Lite'. Use `repo_type` argument if needed.",
     "model-path-invalid"),
    # torch TCPStore: https://github.com/vllm-project/vllm/issues/11617
    ("RuntimeError: The server socket has failed to listen on any local network address. "
     "useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use", "port-in-use"),
    # SGLang model_runner KV pool sizing
    ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
     "kv-cache-too-small"),
    # CUTLASS sm90 kernels (CUTE_INVALID_CONTROL_PATH)
    ("ERROR : Arch conditional MMA instruction used without targeting appropriate compute "
     "capability. Aborting.", "binary-mismatch"),
    # torch c10 alloc_cpu.cpp (host memory) and Kubernetes' container status
    ("RuntimeError: [enforce fail at alloc_cpu.cpp:83] data. DefaultCPUAllocator: can't allocate "
     "memory: you tried to allocate 1073741824 bytes. Error code 12 (Cannot allocate memory)",
     "host-oom-killed"),
    ("      Reason:       OOMKilled", "host-oom-killed"),
    # vllm/config/model.py _verify_quantization
    ("ValueError: Unknown quantization method: nvfp4. Must be one of ['awq', 'fp8'].",
     "config-rejected"),
    # the container toolkit: https://github.com/vllm-project/vllm/issues/5635
    ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.4, please update "
     "your driver to a newer version, or use an earlier cuda container: unknown.", "binary-mismatch"),
    # vllm/config/scheduler.py verify_max_model_len
    ("ValueError: max_num_batched_tokens (2048) is smaller than max_model_len (32768). This "
     "effectively limits the maximum sequence length to max_num_batched_tokens", "config-rejected"),
    # NCCL src/init.cc: two ranks bound to one device
    ("(Worker_PP1_TP0 pid=3954408) ERROR 02-27 00:29:48 [multiproc_executor.py:863] Duplicate GPU "
     "detected : rank 2 and rank 0 both on CUDA device 1000", "two-ranks-one-gpu"),
    # transformers dynamic_module_utils.check_imports
    ("ImportError: This modeling file requires the following packages that were not found in "
     "your environment: flash_attn. Run `pip install flash_attn`", "module-missing"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
     "that the latest NVIDIA driver is installed and running.", "binary-mismatch"),
    # NCCL >= 2.19's WARN form and torch's driver-API check
    ("node1:2345:2401 [3] include/alloc.h:103 NCCL WARN Cuda failure 2 'out of memory'", "cuda-oom"),
    ("RuntimeError: CUDA driver error: out of memory", "cuda-oom"),
    # https://github.com/NVIDIA/FasterTransformer/issues/25
    ("what():  [FT][ERROR] CUDA runtime error: CUBLAS_STATUS_ARCH_MISMATCH "
     "/root/fastertransformer/cuda/open_attention.h:171", "binary-mismatch"),
    # https://github.com/vllm-project/vllm/issues/52907, /13052, /52504, /3071
    ("This is a regression, not an unsupported configuration.", "version-regression-stated"),
    ("update，back to version 0.6.4.post1 solved the problem.", "version-regression-stated"),
    ("upgrading NCCL 2.28.9 → **2.30.4** fixes the deadlock with graphs re-enabled",
     "version-regression-stated"),
    ("This has been fixed in vLLM v0.3.2 released last week.", "version-regression-stated"),
]

# lines that look alike but state no fault (information, a warning the engine survives, a plan)
NOT_A_FAULT = [
    # NCCL's network-plugin probe: https://github.com/NVIDIA/nccl/issues/904
    "node:3447253:3447253 [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : "
    "libnccl-net.so: cannot open shared object file: No such file or directory",
    # vLLM's _custom_ops warning: the engine went on to initialise in that thread
    "WARNING 08-27 13:59:59 _custom_ops.py:15] Failed to import from vllm._C with ImportError("
    "'libcudart.so.12: cannot open shared object file: No such file or directory')",
    "│ Use this as the main tuning/regression signal for kernels, NCCL, DCP, MTP, and scheduler changes. │",
    "INFO 01-01 00:00:00 [cuda.py:1] Falling back to 0.9 for gpu_memory_utilization, works on any GPU",
    "Benchmarks show no regression in throughput since 0.10.2 on H100.",
    "This is not a regression in 0.11.0: the flag was never supported.",
    "Downgrading to 0.6.3 did not solve it, same hang.",
    "I went back to version 0.10.2 but it still does not work.",
    # a change tried in order to fix it, outcome bad or open; a question; "nothing works"
    "I tried upgrading to 0.8.5 to fix it but it still crashes with the same error.",
    "Downgrading to 0.19.1 to fix the hang, will report back.",
    "After downgrading to 0.19.1 nothing works either.",
    "降级到0.19.1可以吗？",
    "Would going back to 0.6.4 fix this?",
    # xFormers' load warning: runs on another attention backend go on (https://github.com/facebookresearch/xformers/issues/982)
    "WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for:",
]


@pytest.mark.parametrize(("line", "eid"), NAMED)
def test_each_real_wording_names_its_entry(line: str, eid: str) -> None:
    assert "cat:" + eid in dict(CAT.scan(line)), (eid, line)


@pytest.mark.parametrize("line", NOT_A_FAULT)
def test_look_alikes_that_state_no_fault_name_nothing(line: str) -> None:
    mine = ("library-version", "config-invalid", "out-of-memory", "kv-cache-insufficient")
    named = [sid for sid, _m in CAT.scan(line)]
    assert not [s for s in named if CAT.entries[s.removeprefix("cat:")].category in mine], named


def _worker_crash(error: str) -> list[str]:
    w = "(VllmWorker rank=1 pid=402)"
    return [
        "(EngineCore_DP0 pid=300) INFO 01-01 00:00:00 [core.py:1] Initializing a V1 LLM engine",
        f"{w} ERROR 01-01 00:00:05 [multiproc_executor.py:1] WorkerProc failed to start.",
        f"{w} ERROR 01-01 00:00:05 [multiproc_executor.py:1] Traceback (most recent call last):",
        f'{w} ERROR 01-01 00:00:05 [multiproc_executor.py:1]   File "/x/vllm/worker.py", line 9, in init',
        f"{w} ERROR 01-01 00:00:05 [multiproc_executor.py:1] {error}",
        "(EngineCore_DP0 pid=300) ERROR 01-01 00:00:06 [core.py:2] EngineCore failed to start.",
    ]


@pytest.mark.parametrize(("error", "category"), [
    ("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory",
     "library-version"),
    ("RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with "
     "multiprocessing, you must use the 'spawn' start method", "config-invalid"),
    ("RuntimeError: CUDA error: the resource allocation failed", "out-of-memory"),
])
def test_the_stated_cause_ranks_above_the_crash(tmp_path: Path, error: str, category: str) -> None:
    p = tmp_path / "w.log"
    p.write_text("\n".join(_worker_crash(error)) + "\n")
    res = diagnose([p])
    assert res.findings[0].category == category, [(f.category, f.confidence) for f in res.findings]
    assert all(f.category != "rank-crashed" or f.confidence <= 0.6 for f in res.findings)


def test_a_stated_regression_ranks_above_an_unexplained_crash_but_below_an_error_line(
        tmp_path: Path) -> None:
    """A report whose only log is a crash no entry knows, and whose text says the version is the
    cause: the stated cause first (weakly, 0.5); with an error line an entry knows, that first."""
    prose = ["This is a regression, not an unsupported configuration.", "", "```"]
    crash = _worker_crash("RuntimeError: Application timeout caused pair closure")
    p = tmp_path / "t.md"
    p.write_text("\n".join(prose + crash + ["```"]) + "\n")
    top = diagnose([p]).findings[0]
    assert (top.category, top.confidence) == ("library-version", 0.5), top
    crash = _worker_crash("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")
    p.write_text("\n".join(prose + crash + ["```"]) + "\n")
    cats = [f.category for f in diagnose([p]).findings]
    assert cats[0] == "out-of-memory" and "library-version" in cats[:3], cats


def test_a_count_quantifier_is_not_taken_for_the_gate_literal() -> None:
    """``{0,12}`` is a count, not text: the gate literal of a pattern is text every match holds
    (before the fix the gate looked for "0,12" and never let a line of this pattern through)."""
    from sm120kit.diagnose.catalogue.needles import needles
    assert needles("降级到[^\\n]{0,12}\\d+\\.\\d+") == ["降级到"]
    assert needles("ab{2,3}cde") == ["cde"]
    line = "尝试将vllm升级到0.20.0后也会报错，降级到0.19.1正常"
    assert CAT.passes(line) and "cat:version-regression-stated" in dict(CAT.scan(line))


def test_one_line_names_one_cause_the_most_specific_entry(tmp_path: Path) -> None:
    """torch's "Unknown CUDA arch (12.0+PTX) or GPU not supported" is also a "ValueError: ... not
    supported" (the broad configuration entry): the toolchain entry, of higher priority, names
    the line and the broad one does not claim it as a second cause."""
    p = tmp_path / "a.log"
    p.write_text("\n".join(_worker_crash("ValueError: Unknown CUDA arch (12.0+PTX) or GPU not "
                                         "supported")) + "\n")
    cats = [f.category for f in diagnose([p]).findings]
    assert cats[0] == "library-version" and "config-invalid" not in cats, cats
    p.write_text("\n".join(_worker_crash("ValueError: FP8 KV cache is not supported with this "
                                         "backend")) + "\n")
    assert diagnose([p]).findings[0].category == "config-invalid"


def test_a_placement_group_warning_is_a_cause_only_when_the_run_stopped(tmp_path: Path) -> None:
    """Newer vLLM warns "The number of required GPUs exceeds ..." and waits for the Ray nodes: a
    run whose nodes join goes on (no finding of it); one that stops there names it."""
    warn = ("WARNING 03-18 11:21:32 ray_utils.py:320] The number of required GPUs exceeds the "
            "total number of available GPUs in the placement group.")
    p = tmp_path / "r.log"
    p.write_text("INFO 03-18 11:21:30 api_server.py:1] vLLM API server version 0.6.3\n" + warn + "\n"
                 "INFO 03-18 11:22:40 model_runner.py:1] Loading model weights took 12.5 GB\n")
    assert "config-invalid" not in [f.category for f in diagnose([p]).findings]
    p.write_text("INFO 03-18 11:21:30 api_server.py:1] vLLM API server version 0.6.3\n" + warn + "\n"
                 "TimeoutError: Timed out waiting for engine core processes to start.\n")
    assert "config-invalid" in [f.category for f in diagnose([p]).findings[:3]]
