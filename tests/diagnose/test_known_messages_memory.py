"""What the software that prints them means by memory messages (catalogue file known-memory.toml):
host RAM (Ray's memory monitor, torch's CPU allocator, the kernel's ENOMEM, a vLLM process killed
with SIGKILL), GPU memory (torch's OOM path through NVML, NCCL's allocations, FlashInfer's
workspace, vLLM's startup budget checks),
a KV cache too small for the requests (vLLM V0 block managers, vLLM V1 auto-fit and Mamba blocks,
SGLang's token and request pools), shared memory (vLLM's /dev/shm check, torch's shared tensors)
and CUDA-graph capture (vLLM's capture monitor, torch's RNG state). Each log is the message in the
shape its software prints it (wording from the source named in the comment above it), inside the
lines a vLLM / SGLang / Ray / torchrun run prints around it; the top finding names the category
an engineer who knows that software names, and it rests on an entry of known-memory.toml (without
those entries these logs were `rank-crashed`, `unknown`, exit 0, a generic index match, or
`cuda-oom` for host RAM). Healthy starts that print vLLM's and SGLang's memory advice, KV-cache
preemption warnings and Ray's /dev/shm fallback warning stay exit 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose import catalogue as C
from tests.diagnose.known_checks import assert_healthy, assert_named

KNOWN = Path(C.__file__).resolve().parent / "known-memory.toml"

_V1 = (
    "INFO 05-01 10:00:00 [__init__.py:239] Automatically detected platform cuda.\n"
    "INFO 05-01 10:00:02 [api_server.py:1043] vLLM API server version 0.10.1\n"
    "(EngineCore_DP0 pid=6940) INFO 05-01 10:00:20 [core.py:69] Initializing a V1 LLM engine (v0.10.1) "
    "with config: model='Qwen/Qwen2.5-72B-Instruct', tensor_parallel_size=4\n"
)
_V0 = (
    "INFO 05-01 10:00:02 api_server.py:712] vLLM API server version 0.6.3\n"
    "INFO 05-01 10:00:20 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: "
    "model='meta-llama/Llama-3.1-8B-Instruct', tensor_parallel_size=1\n"
    "INFO 05-01 10:00:40 model_runner.py:1067] Loading model weights took 14.9888 GB\n"
    "INFO 05-01 10:00:45 gpu_executor.py:122] # GPU blocks: 2700, # CPU blocks: 2048\n"
)
_V0_SERVING = _V0 + (
    "INFO 05-01 10:01:01 api_server.py:937] Starting vLLM API server on http://0.0.0.0:8000\n"
    "INFO:     Application startup complete.\n"
)
_SGL = (
    "[2025-05-01 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct', tp_size=1, "
    "mem_fraction_static=0.88, max_running_requests=None)\n"
    "[2025-05-01 10:00:20 TP0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=62.31 GB\n"
)
_SGL_SERVING = _SGL + (
    "[2025-05-01 10:00:22 TP0] KV Cache is allocated. #tokens: 1000000, K size: 26.7 GB, V size: 26.7 GB\n"
    "[2025-05-01 10:00:30] The server is fired up and ready to roll!\n"
    "[2025-05-01 10:04:59 TP0] Decode batch. #running-req: 64, #token: 998000, token usage: 0.99, #queue-req: 12\n"
)
_RAY = (
    "2025-03-21 17:20:00,000\tINFO worker.py:1654 -- Connecting to existing Ray cluster at address: 10.0.0.5:6379...\n"
    "INFO 03-21 17:20:01 [ray_distributed_executor.py:176] use_ray_spmd_worker: True\n"
)
_TORCHRUN = (
    "W0501 10:00:00.000000 140 torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment variable "
    "for each process to be 1 in default\n"
)

# name -> (expected top category, log text); source of the message in the comment above each
FIXED: dict[str, tuple[str, str]] = {
    # ray 2.40.0 src/ray/raylet/node_manager.cc (in the raylet binary); https://github.com/vllm-project/vllm/issues/15102
    "ray-task-killed-low-memory": ("out-of-memory", _RAY + (
        "ERROR 03-21 17:27:44 [core.py:340] EngineCore hit an exception: Traceback (most recent call last):\n"
        "ERROR 03-21 17:27:44 [core.py:340]   File \"/usr/local/lib/python3.12/dist-packages/ray/_private/worker.py\", line 2771, in get\n"
        "ERROR 03-21 17:27:44 [core.py:340] ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
        "ERROR 03-21 17:27:44 [core.py:340] Memory on the node (IP: 10.0.0.5, ID: 3486ef92af91b0494ff27f70492b1895998d2c380f41e1132316408a) "
        "where the task (actor ID: 46c8d4da5261e03252fadd9c05000000, name=RayWorkerWrapper.__init__, pid=13378, memory used=3.37GB) was running "
        "was 2152.43GB / 2265.25GB (0.950196), which exceeds the memory usage threshold of 0.95. Ray killed this worker "
        "(ID: 5dd7c3ab222be1d47c4ec86bf6d5a385e270c853c5ea8d04b89bc79c) because it was the most recently scheduled task; "
        "to see more information about memory usage on this node, use `ray logs raylet.out -ip 10.0.0.5`.\n")),
    # ray 2.40.0 src/ray/raylet/node_manager.cc; https://github.com/hiyouga/EasyR1/issues/185
    "raylet-oom-summary": ("out-of-memory", _RAY + (
        "Compute log probs:  76%|████████▍  | 244/320 [08:56<02:05,  1.65s/it]\n"
        "(raylet) [2025-04-02 15:02:00,117 E 135782 135782] (raylet) node_manager.cc:3069: 1 Workers (tasks / actors) killed due to "
        "memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 351e406b196f66bb45eaad02a3b8b4725babfa8cc12949432f7ad7d8, "
        "IP: 10.95.143.76) over the last time period. To see more information about the Workers killed on this node, use "
        "`ray logs raylet.out -ip 10.95.143.76`\n"
        "(raylet) \n"
        "(raylet) Refer to the documentation on how to address the out of memory issue: https://docs.ray.io/en/latest/ray-core/scheduling/"
        "ray-oom-prevention.html. Consider provisioning more memory on this node or reducing task parallelism by requesting more CPUs per task.\n")),
    # torch v2.5.1 c10/core/impl/alloc_cpu.cpp; https://github.com/AUTOMATIC1111/stable-diffusion-webui/issues/5020
    "torch-cpu-not-enough-memory": ("out-of-memory", _V0 + (
        "Traceback (most recent call last):\n"
        "  File \"C:\\venv\\lib\\site-packages\\torch\\serialization.py\", line 712, in load\n"
        "RuntimeError: [enforce fail at ..\\c10\\core\\impl\\alloc_cpu.cpp:72] data. DefaultCPUAllocator: not enough memory: "
        "you tried to allocate 151781376 bytes.\n")),
    # cpython v3.12.0 Modules/posixmodule.c (os.fork, ENOMEM); https://github.com/microsoft/Graphormer/issues/7
    "host-enomem-fork": ("out-of-memory", _V1 + (
        "Traceback (most recent call last):\n"
        "  File \"/usr/lib/python3.12/multiprocessing/popen_fork.py\", line 66, in _launch\n"
        "    self.pid = os.fork()\n"
        "OSError: [Errno 12] Cannot allocate memory\n")),
    # vllm v0.6.3 vllm/executor/multiproc_worker_utils.py (WorkerMonitor); https://github.com/vllm-project/vllm/issues/15800
    "vllm-v0-worker-sigkill": ("out-of-memory", _V0.split("INFO 05-01 10:00:40")[0] + (
        "(VllmWorkerProcess pid=1235) INFO 05-01 10:00:30 model_runner.py:1056] Starting to load model meta-llama/Llama-3.1-70B-Instruct...\n"
        "Loading safetensors checkpoint shards:  38% Completed | 11/30 [00:40<01:10,  3.70s/it]\n"
        "ERROR 05-01 10:02:00 multiproc_worker_utils.py:116] Worker VllmWorkerProcess pid 1235 died, exit code: -9\n"
        "INFO 05-01 10:02:00 multiproc_worker_utils.py:120] Killing local vLLM worker processes\n")),
    # vllm v0.20.0 vllm/v1/utils.py (wait_for_completion_or_failure)
    "vllm-v1-engine-sigkill": ("out-of-memory", _V1 + (
        "(EngineCore_DP0 pid=6940) INFO 05-01 10:00:30 [gpu_model_runner.py:1800] Starting to load model Qwen/Qwen2.5-72B-Instruct...\n"
        "(APIServer pid=1) ERROR 05-01 10:02:00 [api_server.py:1900] Exception occurred while running API servers: Process "
        "EngineCore_DP0 (PID: 6940) died with exit code -9\n"
        "RuntimeError: Process EngineCore_DP0 (PID: 6940) died with exit code -9\n")),
    # torch v2.5.1 c10/cuda/CUDACachingAllocator.cpp (reportProcessMemoryInfo); https://github.com/vllm-project/vllm/issues/9824
    "torch-oom-nvml-assert": ("out-of-memory", _V0_SERVING + (
        "ERROR 10-29 18:38:39 async_llm_engine.py:58] Engine background task failed\n"
        "ERROR 10-29 18:38:39 async_llm_engine.py:58] Traceback (most recent call last):\n"
        "ERROR 10-29 18:38:39 async_llm_engine.py:58]   File \"/usr/local/lib/python3.12/dist-packages/vllm/worker/model_runner_base.py\", line 112, in _wrapper\n"
        "ERROR 10-29 18:38:39 async_llm_engine.py:58] RuntimeError: NVML_SUCCESS == r INTERNAL ASSERT FAILED at "
        "\"../c10/cuda/CUDACachingAllocator.cpp\":838, please report a bug to PyTorch. \n")),
    # nccl v2.21.5-1 src/include/alloc.h (ncclCudaMalloc)
    "nccl-cuda-malloc-failed": ("out-of-memory", _V1 + (
        "node1:2345:2345 [3] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>\n"
        "node1:2345:2401 [3] include/alloc.h:161 NCCL WARN Failed to CUDA malloc 2097152 bytes\n"
        "node1:2345:2401 [3] NCCL INFO transport/p2p.cc:221 -> 1\n"
        "node1:2345:2401 [3] NCCL INFO init.cc:1089 -> 1\n")),
    # vllm v0.34.0 vllm/v1/worker/utils.py (externally held weights)
    "vllm-external-weights": ("out-of-memory", _V1 + (
        "(EngineCore_DP0 pid=6940) ERROR 05-01 10:01:00 [core.py:708] EngineCore failed to start.\n"
        "(EngineCore_DP0 pid=6940) ValueError: Externally held weights on device cuda:0 (30.00/79.19 GiB) exceed the desired GPU memory "
        "utilization (0.3, 23.76 GiB). Increase GPU memory utilization or reduce GPU memory used by other processes.\n")),
    # vllm v0.34.0 vllm/v1/worker/utils.py (free memory below the engine's budget)
    "vllm-free-below-engine-budget": ("out-of-memory", _V1 + (
        "(EngineCore_DP0 pid=6940) ERROR 05-01 10:01:00 [core.py:708] EngineCore failed to start.\n"
        "(EngineCore_DP0 pid=6940) ValueError: Free memory on device cuda:0 (20.00/79.19 GiB) on startup is less than the engine's "
        "budget after excluding external process's weights (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory "
        "used by other processes.\n")),
    # flashinfer v0.3.1 include/flashinfer/allocator.h; https://github.com/sgl-project/sglang/issues/2102
    "flashinfer-workspace-overflow": ("out-of-memory", _V1 + (
        "INFO:     Application startup complete.\n"
        "(VllmWorker rank=0 pid=1234) ERROR 05-01 10:11:00 [multiproc_executor.py:522] RuntimeError: Error in function 'aligned_alloc' at "
        "/workspace/include/flashinfer/allocator.h:49: Buffer overflow when allocating memory for batch_prefill_tmp_v with size 671088640 "
        "and alignment 16, but only 268435456 bytes available in AlignedAllocator. Increase the workspace buffer size.\n")),
    # flashinfer v0.2.5 include/flashinfer/allocator.h; https://github.com/sgl-project/sglang/issues/2102
    "flashinfer-workspace-old": ("out-of-memory", _SGL_SERVING + (
        "[2024-11-20 16:40:55 TP0] Traceback (most recent call last):\n"
        "  File \"/root/miniconda3/envs/sglang/lib/python3.10/site-packages/sglang/srt/managers/scheduler.py\", line 1196, in run_scheduler_process\n"
        "RuntimeError: Failed to allocate memory for batch_prefill_tmp_v with size 435814400 and alignment 16 in AlignedAllocator\n")),
    # vllm v0.14.0 vllm/v1/core/kv_cache_utils.py; https://github.com/vllm-project/vllm/pull/29431
    "vllm-auto-fit-no-memory": ("kv-cache-insufficient", _V1 + (
        "(EngineCore_DP0 pid=3862035) INFO 11-25 18:39:23 [gpu_worker.py:348] Available KV cache memory: -0.44 GiB\n"
        "(EngineCore_DP0 pid=3862035) ERROR 11-25 18:39:23 [core.py:842] EngineCore failed to start.\n"
        "(EngineCore_DP0 pid=3862035) ERROR 11-25 18:39:23 [core.py:842] ValueError: Cannot auto-fit max_model_len: not enough GPU memory "
        "available to serve even a single token. Try increasing `gpu_memory_utilization`.\n")),
    # vllm v0.6.3 vllm/core/block_manager_v1.py
    "vllm-v0-no-free-blocks": ("kv-cache-insufficient", _V0_SERVING + (
        "ERROR 05-01 10:03:00 async_llm_engine.py:57] Engine background task failed\n"
        "Traceback (most recent call last):\n"
        "  File \"/usr/local/lib/python3.10/dist-packages/vllm/core/block_manager_v1.py\", line 199, in allocate\n"
        "ValueError: Out of memory! No free blocks are available.\n")),
    # vllm v0.6.3 vllm/core/block/interfaces.py; https://github.com/vllm-project/vllm/issues/11168
    "vllm-v0-no-free-blocks-error": ("kv-cache-insufficient", _V0_SERVING + (
        "ERROR 12-13 08:58:11 engine.py:165] NoFreeBlocksError()\n"
        "ERROR 12-13 08:58:11 engine.py:165] Traceback (most recent call last):\n"
        "ERROR 12-13 08:58:11 engine.py:165]   File \"/workspace-lib/lib/python3.11/site-packages/vllm/core/block/naive_block.py\", line 134, in _allocate_block_id\n"
        "ERROR 12-13 08:58:11 engine.py:165]     raise BlockAllocator.NoFreeBlocksError()\n"
        "ERROR 12-13 08:58:11 engine.py:165] vllm.core.block.interfaces.BlockAllocator.NoFreeBlocksError\n")),
    # vllm v0.6.3 vllm/core/scheduler.py; https://github.com/vllm-project/vllm/issues/2198
    "vllm-v0-prompt-over-capacity": ("kv-cache-insufficient", _V0_SERVING + (
        "INFO 12-19 10:21:05 async_llm_engine.py:173] Added request cmpl-b8c7b3b2eb7a4de488ef870004648708.\n"
        "WARNING 12-19 10:21:05 scheduler.py:897] Input prompt (4644 tokens) is too long and exceeds the capacity of block_manager\n"
        "INFO 12-19 10:21:05 async_llm_engine.py:140] Finished request cmpl-b8c7b3b2eb7a4de488ef870004648708.\n")),
    # vllm v0.34.0 vllm/config/compilation.py (above config-rejected, which reads the ValueError as a bad flag)
    "vllm-mamba-blocks": ("kv-cache-insufficient", _V1 + (
        "(EngineCore_DP0 pid=6940) ERROR 05-01 10:01:00 [core.py:708] EngineCore failed to start.\n"
        "(EngineCore_DP0 pid=6940) ValueError: max_num_seqs (512) exceeds available Mamba cache blocks (100). Each decode sequence requires "
        "one Mamba cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at most 100 or increase "
        "gpu_memory_utilization.\n")),
    # sglang v0.4.10.post2 python/sglang/srt/managers/schedule_batch.py; https://github.com/sgl-project/sglang/issues/7353
    "sglang-prefill-oom": ("kv-cache-insufficient", _SGL_SERVING + (
        "[2025-05-01 10:05:00 TP0] Prefill out of memory. Try to lower your batch size.\n"
        "Try to allocate 8192 tokens.\n"
        "[2025-05-01 10:05:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        "  File \"/sgl-workspace/sglang/python/sglang/srt/managers/schedule_batch.py\", line 1006, in alloc_paged_token_slots_extend\n"
        "RuntimeError: Prefill out of memory. Try to lower your batch size.\n")),
    # sglang v0.4.10.post2 python/sglang/srt/managers/schedule_batch.py (retract_decode); https://github.com/sgl-project/sglang/pull/15626
    "sglang-no-space-one-request": ("kv-cache-insufficient", _SGL_SERVING + (
        "[2025-05-01 10:05:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        "  File \"/sgl-workspace/sglang/python/sglang/srt/managers/schedule_batch.py\", line 1483, in retract_decode\n"
        "ValueError: Failed to retract any request. No space left for only one request.\n")),
    # sglang v0.4.10.post2 python/sglang/srt/managers/schedule_batch.py (alloc_req_slots)
    "sglang-req-slots": ("kv-cache-insufficient", _SGL_SERVING + (
        "[2025-05-01 10:05:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        "RuntimeError: alloc_req_slots runs out of memory. Please set a smaller number for `--max-running-requests`. "
        "self.req_to_token_pool.available_size()=0, num_reqs=1, \n")),
    # sglang v0.5.23 python/sglang/srt/mem_cache/kv_cache_configurator.py
    "sglang-weights-leave-no-kv": ("kv-cache-insufficient", _SGL + (
        "[2025-05-01 10:00:21 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.8. Raise --mem-fraction-static "
        "above 0.874 (minimum viable = 1 - available/pre = 0.8731). If using speculative decoding, draft weights are now counted.\n")),
    # vllm v0.34.0 vllm/distributed/device_communicators/shm_broadcast.py
    "vllm-shm-no-space": ("shared-memory", (
        "$ docker run --gpus all -p 8000:8000 vllm/vllm-openai:v0.31.0 --model Qwen/Qwen2.5-72B-Instruct -tp 4\n") + _V1 + (
        "(EngineCore_DP0 pid=6940) ERROR 05-01 10:00:25 [core.py:708] EngineCore failed to start.\n"
        "(EngineCore_DP0 pid=6940) RuntimeError: Insufficient space in /dev/shm for psm_1a2b3c: 512.00 MiB required, 60.12 MiB free. "
        "Increase /dev/shm (e.g. --shm-size or --ipc=host).\n")),
    # torch v2.5.1 aten/src/ATen/MapAllocator.cpp; https://github.com/idiap/ESLAM/issues/20
    "torch-shm-write-failed": ("shared-memory", _V1 + (
        "Traceback (most recent call last):\n"
        "  File \"/usr/lib/python3.12/multiprocessing/queues.py\", line 264, in _feed\n"
        "    obj = _ForkingPickler.dumps(obj)\n"
        "  File \"/usr/local/lib/python3.12/dist-packages/torch/multiprocessing/reductions.py\", line 607, in reduce_storage\n"
        "    metadata = storage._share_filename_cpu_()\n"
        "RuntimeError: unable to write to file </torch_31911_952036340_6686>: No space left on device (28)\n")),
    # vllm v0.20.0 vllm/compilation/monitor.py; https://github.com/vllm-project/vllm-ascend/issues/7150
    "vllm-capture-after-startup": ("cudagraph-capture", _V1 + (
        "INFO:     Application startup complete.\n"
        "(Worker_TP0 pid=1865682) ERROR 03-11 03:26:30 [multiproc_executor.py:822] WorkerProc hit an exception.\n"
        "(Worker_TP0 pid=1865682) ERROR 03-11 03:26:30 [multiproc_executor.py:822] Traceback (most recent call last):\n"
        "(Worker_TP0 pid=1865682) ERROR 03-11 03:26:30 [multiproc_executor.py:822] RuntimeError: CUDA graph capturing detected at an "
        "inappropriate time. This operation is currently disabled.\n")),
    # torch v2.9.1 aten/src/ATen/cuda/CUDAGeneratorImpl.cpp
    "torch-rng-offset-capture": ("cudagraph-capture", _TORCHRUN + (
        "Traceback (most recent call last):\n"
        "  File \"/app/serve.py\", line 88, in generate\n"
        "    next_token = torch.multinomial(probs, num_samples=1)\n"
        "RuntimeError: Offset increment outside graph capture encountered unexpectedly.\n")),
}

# vLLM 0.6-0.8's capture banner and memory advice, its V0 preemption warning, SGLang's KV-pool
# retraction notice, Ray's /dev/shm fallback warning and vLLM V1's profiling warning are printed
# by starts and servers that go on: no fault.
HEALTHY: dict[str, str] = {
    "vllm-v0-capture-advice": _V0 + (
        "INFO 05-01 10:00:47 model_runner.py:1394] Capturing the model for CUDA graphs. This may lead to unexpected consequences if "
        "the model is not static. To run the model in eager mode, set 'enforce_eager=True' or use '--enforce-eager' in the CLI.\n"
        "INFO 05-01 10:00:47 model_runner.py:1398] CUDA graphs can take additional 1~3 GiB memory per GPU. If you are running out of "
        "memory, consider decreasing `gpu_memory_utilization` or enforcing eager mode. You can also reduce the `max_num_seqs` as "
        "needed to decrease memory usage.\n"
        "INFO 05-01 10:01:00 model_runner.py:1522] Graph capturing finished in 13 secs.\n"
        "INFO 05-01 10:01:01 api_server.py:937] Starting vLLM API server on http://0.0.0.0:8000\n"
        "INFO:     Application startup complete.\n"),
    "vllm-0.8-capture-oom-hint": (
        "INFO 04-24 08:27:50 [api_server.py:1043] vLLM API server version 0.8.5\n"
        "INFO 04-24 08:27:56 [model_runner.py:1456] Capturing cudagraphs for decoding. This may lead to unexpected consequences if the "
        "model is not static. To run the model in eager mode, set 'enforce_eager=True' or use '--enforce-eager' in the CLI. If "
        "out-of-memory error occurs during cudagraph capture, consider decreasing `gpu_memory_utilization` or switching to eager mode. "
        "You can also reduce the `max_num_seqs` as needed to decrease memory usage.\n"
        "Capturing CUDA graph shapes: 100%|██████████| 35/35 [00:13<00:00,  2.51it/s]\n"
        "INFO 04-24 08:28:10 [model_runner.py:1592] Graph capturing finished in 14 secs, took 0.21 GiB\n"
        "INFO 04-24 08:28:12 [api_server.py:1090] Starting vLLM API server on http://0.0.0.0:8000\n"
        "INFO:     Application startup complete.\n"),
    "vllm-v0-preemption": _V0_SERVING + (
        "WARNING 05-01 10:05:00 scheduler.py:1481] Sequence group cmpl-12ab is preempted by PreemptionMode.RECOMPUTE mode because "
        "there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or "
        "tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption=1\n"
        "INFO:     10.0.0.9:50312 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK\n"),
    "sglang-retract": _SGL_SERVING + (
        "[2025-05-01 10:05:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_token_ratio: 0.7000 -> 1.0000\n"
        "[2025-05-01 10:05:01 TP0] Decode batch. #running-req: 63, #token: 990000, token usage: 0.99, gen throughput (token/s): 1500.00, #queue-req: 13\n"),
    "ray-dev-shm-fallback": (
        "2025-05-01 10:00:00,000\tINFO worker.py:1819 -- Started a local Ray instance.\n"
        "2025-05-01 10:00:00,000\tWARNING services.py:2022 -- WARNING: The object store is using /tmp instead of /dev/shm because "
        "/dev/shm has only 67108864 bytes available. This will harm performance! You may be able to free up space by deleting files "
        "in /dev/shm. If you are inside a Docker container, you can increase /dev/shm size by passing '--shm-size=10.24gb' to "
        "'docker run' (or add it to the run_options list in a Ray cluster config). Make sure to set this to more than 30% of available RAM.\n"
    ) + _V0_SERVING,
    "vllm-v1-free-memory-grew": _V1 + (
        "(EngineCore_DP0 pid=6940) WARNING 05-01 10:00:50 [gpu_worker.py:167] Free memory grew by 0.52 GiB during profiling (initial "
        "20.31 GiB, current 20.83 GiB). Sizing the KV cache from the 2.10 GiB torch reserved instead of the profiling difference.\n"
        "(EngineCore_DP0 pid=6940) INFO 05-01 10:00:50 [kv_cache_utils.py:700] GPU KV cache size: 428,512 tokens\n"
        "(EngineCore_DP0 pid=6940) INFO 05-01 10:01:00 [gpu_model_runner.py:2300] Graph capturing finished in 4 secs, took 0.52 GiB\n"
        "(APIServer pid=1) INFO 05-01 10:01:05 [api_server.py:1800] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
        "INFO:     Application startup complete.\n"),
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_memory_message_names_its_cause(name: str, tmp_path: Path) -> None:
    expected, text = FIXED[name]
    assert_named(KNOWN, name, expected, text, tmp_path)


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_memory_advice_on_a_healthy_run_stays_exit_0(name: str, tmp_path: Path) -> None:
    assert_healthy(name, HEALTHY[name], tmp_path)
