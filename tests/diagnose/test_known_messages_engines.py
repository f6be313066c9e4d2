"""What SGLang, TGI, Ray, NCCL / nccl-tests and FlashInfer messages mean (catalogue file
known-engines.toml): each log is the message in the shape its engine prints it (wording from the
module that prints it, named in the comment) inside that engine's own startup lines; the top
finding names the category an engineer who knows the software names, and it rests on an entry of
known-engines.toml (without those entries these logs were read as rank-crashed, unknown or a
wrong category). The healthy starts of each engine stay exit 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose import catalogue as C
from tests.diagnose.known_checks import assert_healthy, assert_named

KNOWN = Path(C.__file__).resolve().parent / "known-engines.toml"

# name -> (expected top category, log text); source of the message in the comment above each
FIXED: dict[str, tuple[str, str]] = {
    # sglang v0.4.10.post2 python/sglang/srt/model_executor/model_runner.py; https://github.com/sgl-project/sglang/issues/1533
    'sg-mem-unbalanced': ('out-of-memory',
        "[2025-06-27 19:01:50] server_args=ServerArgs(model_path='Qwen/Qwen2.5-72B-Instruct', tp_size=2, mem_fraction_static=0.88)\n"
        '[2025-06-27 19:01:58 TP0] Init torch distributed begin.\n'
        '[2025-06-27 19:01:58 TP1] Init torch distributed begin.\n'
        '[2025-06-27 19:02:01 TP0] Init torch distributed begin.\n'
        '[2025-06-27 19:02:10 TP0] Scheduler hit an exception: Traceback (most recent call last):\n'
        '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 2405, in run_scheduler_process\n'
        '    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)\n'
        '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/model_executor/model_runner.py", line 594, in init_torch_distributed\n'
        'ValueError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes. min_per_gpu_memory=62.13, local_gpu_memory=78.5, local_gpu_memory * 0.9=70.65\n'
        '\n'
        '[2025-06-27 19:02:11] Received sigquit from a child process. It usually means the child failed.\n'),
    # sglang v0.4.10.post2 python/sglang/srt/entrypoints/http_server.py; https://github.com/sgl-project/sglang/issues/10856
    'sg-healthcheck': ('serving-stall',
        "[2025-06-27 19:01:50] server_args=ServerArgs(model_path='Qwen/Qwen2.5-72B-Instruct', tp_size=2, mem_fraction_static=0.88)\n"
        '[2025-06-27 19:01:58 TP0] Init torch distributed begin.\n'
        '[2025-06-27 19:01:58 TP1] Init torch distributed begin.\n'
        '[2025-06-27 19:02:01 TP0] The server is fired up and ready to roll!\n'
        "[2025-06-27 19:30:10] Health check failed. Server couldn't get a response from detokenizer for last 20 seconds. tic start time: 19:29:50. last_heartbeat time: 19:29:40\n"
        '[2025-06-27 19:02:11] Received sigquit from a child process. It usually means the child failed.\n'),
    # sglang v0.4.10.post2 python/sglang/srt/configs/model_config.py (the raise, not the warning)
    'sg-context-len': ('config-invalid',
        "[2025-06-27 19:01:50] server_args=ServerArgs(model_path='Qwen/Qwen2.5-72B-Instruct', tp_size=2, mem_fraction_static=0.88)\n"
        '[2025-06-27 19:01:58 TP0] Init torch distributed begin.\n'
        '[2025-06-27 19:01:58 TP1] Init torch distributed begin.\n'
        '[2025-06-27 19:02:01 TP0] Load weight begin. avail mem=78.50 GB\n'
        '[2025-06-27 19:02:10 TP0] Scheduler hit an exception: Traceback (most recent call last):\n'
        '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 2405, in run_scheduler_process\n'
        '    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)\n'
        '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/configs/model_config.py", line 120, in __init__\n'
        "ValueError: User-specified context_length (200000) is greater than the derived context_length (131072). This may lead to incorrect model outputs or CUDA errors. Note that the derived context_length may differ from max_position_embeddings in the model's config. To allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1\n"
        '\n'
        '[2025-06-27 19:02:11] Received sigquit from a child process. It usually means the child failed.\n'),
    # TGI server/text_generation_server/models/flash_causal_lm.py warmup; https://github.com/huggingface/text-generation-inference/issues/755
    'tgi-prefill-tokens': ('out-of-memory',
        '2024-05-01T01:16:50.101Z  INFO text_generation_launcher: Args { model_id: "meta-llama/Llama-2-70b-chat-hf", num_shard: Some(2), max_input_tokens: None }\n'
        '2024-05-01T01:16:50.201Z  INFO text_generation_launcher: Sharding model on 2 processes\n'
        '2024-05-01T01:16:52.618Z  INFO shard-manager: text_generation_launcher: Starting shard rank=0\n'
        '2024-05-01T01:16:52.619Z  INFO shard-manager: text_generation_launcher: Starting shard rank=1\n'
        '2024-05-01T01:17:02.618Z  INFO shard-manager: text_generation_launcher: Waiting for shard to be ready... rank=0\n'
        '2024-05-01T01:18:10.100Z  INFO text_generation_launcher: Shard ready in 20.1s rank=0\n'
        '2024-05-01T01:18:12.000Z ERROR warmup{max_input_length=4095 max_prefill_tokens=4096 max_total_tokens=4096 max_batch_size=None}:warmup: text_generation_router_v3::client: backends/v3/src/client/mod.rs:45: Server error: Not enough memory to handle 4096 prefill tokens. You need to decrease `--max-batch-prefill-tokens`\n'
        'Error: Backend(Warmup(Generation("Not enough memory to handle 4096 prefill tokens. You need to decrease `--max-batch-prefill-tokens`")))\n'
        '2024-05-01T01:18:12.200Z ERROR text_generation_launcher: Webserver Crashed\n'
        '2024-05-01T01:18:12.200Z  INFO text_generation_launcher: Shutting down shards\n'),
    # TGI launcher/src/main.rs LauncherError::ArgumentValidation; https://github.com/huggingface/text-generation-inference/issues/710
    'tgi-arg-validation': ('config-invalid',
        '2024-05-01T01:16:50.101Z  INFO text_generation_launcher: Args { model_id: "meta-llama/Llama-2-7b-chat-hf", max_input_tokens: Some(8192), max_total_tokens: Some(4096) }\n'
        'Error: ArgumentValidation("`max_input_tokens`(8192) must be < `max_total_tokens`(4096)")\n'),
    # TGI launcher/src/main.rs shard_manager; https://github.com/huggingface/text-generation-inference/issues/451
    'tgi-signal9': ('out-of-memory',
        '2024-05-01T01:16:50.101Z  INFO text_generation_launcher: Args { model_id: "meta-llama/Llama-2-70b-chat-hf", num_shard: Some(2), max_input_tokens: None }\n'
        '2024-05-01T01:16:50.201Z  INFO text_generation_launcher: Sharding model on 2 processes\n'
        '2024-05-01T01:16:52.618Z  INFO shard-manager: text_generation_launcher: Starting shard rank=0\n'
        '2024-05-01T01:16:52.619Z  INFO shard-manager: text_generation_launcher: Starting shard rank=1\n'
        '2024-05-01T01:17:02.618Z  INFO shard-manager: text_generation_launcher: Waiting for shard to be ready... rank=0\n'
        '2024-05-01T01:17:31.052Z ERROR shard-manager: text_generation_launcher: Shard complete standard error output:\n'
        ' rank=0\n'
        '2024-05-01T01:17:31.052Z ERROR shard-manager: text_generation_launcher: Shard process was signaled to shutdown with signal 9 rank=0\n'
        'Error: ShardCannotStart\n'
        '2024-05-01T01:17:31.149Z ERROR text_generation_launcher: Shard 0 failed to start\n'),
    # TGI launcher/src/main.rs; SIGILL per the maintainer in https://github.com/huggingface/text-generation-inference/issues/2238
    'tgi-signal4': ('library-version',
        '2024-05-01T01:16:50.101Z  INFO text_generation_launcher: Args { model_id: "meta-llama/Llama-2-70b-chat-hf", num_shard: Some(2), max_input_tokens: None }\n'
        '2024-05-01T01:16:50.201Z  INFO text_generation_launcher: Sharding model on 2 processes\n'
        '2024-05-01T01:16:52.618Z  INFO shard-manager: text_generation_launcher: Starting shard rank=0\n'
        '2024-05-01T01:16:52.619Z  INFO shard-manager: text_generation_launcher: Starting shard rank=1\n'
        '2024-05-01T01:17:02.618Z  INFO shard-manager: text_generation_launcher: Waiting for shard to be ready... rank=0\n'
        '2024-05-01T01:17:31.052Z ERROR shard-manager: text_generation_launcher: Shard complete standard error output:\n'
        ' rank=0\n'
        '2024-05-01T01:17:31.052Z ERROR shard-manager: text_generation_launcher: Shard process was signaled to shutdown with signal 4 rank=0\n'
        'Error: ShardCannotStart\n'
        '2024-05-01T01:17:31.149Z ERROR text_generation_launcher: Shard 0 failed to start\n'),
    # TGI server/text_generation_server/utils/weights.py get_filename
    'tgi-weight-missing': ('checkpoint-config',
        '2024-05-01T01:16:50.101Z  INFO text_generation_launcher: Args { model_id: "meta-llama/Llama-2-70b-chat-hf", num_shard: Some(2), max_input_tokens: None }\n'
        '2024-05-01T01:16:50.201Z  INFO text_generation_launcher: Sharding model on 2 processes\n'
        '2024-05-01T01:16:52.618Z  INFO shard-manager: text_generation_launcher: Starting shard rank=0\n'
        '2024-05-01T01:16:52.619Z  INFO shard-manager: text_generation_launcher: Starting shard rank=1\n'
        '2024-05-01T01:17:02.618Z  INFO shard-manager: text_generation_launcher: Waiting for shard to be ready... rank=0\n'
        '2024-05-01T01:17:10.553Z ERROR text_generation_launcher: Error when initializing model\n'
        'Traceback (most recent call last):\n'
        '  File "/opt/conda/bin/text-generation-server", line 8, in <module>\n'
        '    sys.exit(app())\n'
        '  File "/opt/conda/lib/python3.10/site-packages/text_generation_server/utils/weights.py", line 150, in get_tensor\n'
        'RuntimeError: weight model.layers.0.self_attn.q_proj.weight does not exist\n'
        '2024-05-01T01:17:11.052Z ERROR shard-manager: text_generation_launcher: Shard complete standard error output:\n'
        ' rank=0\n'
        'Error: ShardCannotStart\n'
        '2024-05-01T01:17:11.149Z ERROR text_generation_launcher: Shard 0 failed to start\n'
        '2024-05-01T01:17:11.149Z  INFO text_generation_launcher: Shutting down shards\n'),
    # TGI server/text_generation_server/models/__init__.py get_model
    'tgi-unsupported-model': ('library-version',
        '2024-05-01T01:16:50.101Z  INFO text_generation_launcher: Args { model_id: "meta-llama/Llama-2-70b-chat-hf", num_shard: Some(2), max_input_tokens: None }\n'
        '2024-05-01T01:16:50.201Z  INFO text_generation_launcher: Sharding model on 2 processes\n'
        '2024-05-01T01:16:52.618Z  INFO shard-manager: text_generation_launcher: Starting shard rank=0\n'
        '2024-05-01T01:16:52.619Z  INFO shard-manager: text_generation_launcher: Starting shard rank=1\n'
        '2024-05-01T01:17:02.618Z  INFO shard-manager: text_generation_launcher: Waiting for shard to be ready... rank=0\n'
        '2024-05-01T01:17:10.553Z ERROR text_generation_launcher: Error when initializing model\n'
        'Traceback (most recent call last):\n'
        '  File "/opt/conda/bin/text-generation-server", line 8, in <module>\n'
        '    sys.exit(app())\n'
        '  File "/opt/conda/lib/python3.10/site-packages/text_generation_server/models/__init__.py", line 1200, in get_model\n'
        'ValueError: Unsupported model type gemma3\n'
        '2024-05-01T01:17:11.052Z ERROR shard-manager: text_generation_launcher: Shard complete standard error output:\n'
        ' rank=0\n'
        'Error: ShardCannotStart\n'
        '2024-05-01T01:17:11.149Z ERROR text_generation_launcher: Shard 0 failed to start\n'
        '2024-05-01T01:17:11.149Z  INFO text_generation_launcher: Shutting down shards\n'),
    # ray python/ray/exceptions.py ActorDiedError; https://github.com/verl-project/verl/issues/4921
    'ray-actor-died': ('rank-crashed',
        '2025-03-10 11:02:01,101\tINFO worker.py:1821 -- Started a local Ray instance. View the dashboard at 127.0.0.1:8265 \n'
        'INFO 03-10 11:02:05 [config.py:1610] Defaulting to use ray for distributed inference\n'
        'INFO 03-10 11:02:06 [ray_distributed_executor.py:176] use_ray_spmd_worker: True\n'
        'ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n'
        '\tclass_name: RayWorkerWrapper\n'
        '\tactor_id: 8a68478b2d9178e85688a01607000000\n'
        '\tpid: 20174\n'
        '\tnamespace: de88eeeb-9347-44bf-9df6-9f1c7f74c698\n'
        '\tip: 10.164.37.106\n'
        'The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file. There are some potential root causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop --force is called. (3) The worker is crashed unexpectedly due to SIGSEGV or other unexpected errors.\n'),
    # ray python/ray/dag/compiled_dag_node.py; https://github.com/vllm-project/vllm/issues/19703
    'ray-cgraph-timeout': ('timeout-too-short',
        '2025-03-10 11:02:01,101\tINFO worker.py:1821 -- Started a local Ray instance. View the dashboard at 127.0.0.1:8265 \n'
        'INFO 03-10 11:02:05 [config.py:1610] Defaulting to use ray for distributed inference\n'
        'INFO 03-10 11:02:06 [ray_distributed_executor.py:176] use_ray_spmd_worker: True\n'
        'ERROR 03-21 19:23:35 [core.py:340] EngineCore hit an exception: Traceback (most recent call last):\n'
        'ERROR 03-21 19:23:35 [core.py:340]   File "/opt/venv/lib/python3.12/site-packages/ray/dag/compiled_dag_node.py", line 2410, in _execute_until\n'
        'ERROR 03-21 19:23:35 [core.py:340]     raise RayChannelTimeoutError(\n'
        'ERROR 03-21 19:23:35 [core.py:340] ray.exceptions.RayChannelTimeoutError: System error: If the execution is expected to take a long time, increase RAY_CGRAPH_get_timeout which is currently 300 seconds. Otherwise, this may indicate that the execution is hanging.\n'),
    # ray GCS health check (node marked dead); https://github.com/ray-project/ray/issues/53845
    'ray-node-dead': ('rank-crashed',
        '2025-03-10 11:02:01,101\tINFO worker.py:1821 -- Started a local Ray instance. View the dashboard at 127.0.0.1:8265 \n'
        'INFO 03-10 11:02:05 [config.py:1610] Defaulting to use ray for distributed inference\n'
        'INFO 03-10 11:02:06 [ray_distributed_executor.py:176] use_ray_spmd_worker: True\n'
        '(raylet) [2025-03-10 11:05:01,000 E 2122527 2122927] gcs_node_manager.cc:400: The node with node id: 7c2bd9d9a1c8 and address: 10.0.0.6 and node name: 10.0.0.6 has been marked dead because the detector has missed too many heartbeats from it. This can happen when a \t(1) raylet crashes unexpectedly (OOMKilled etc.) \n'
        '\t(2) raylet has lagging heartbeats due to slow network or busy workload.\n'),
    # ray python/ray/exceptions.py ObjectStoreFullError
    'ray-objstore-full': ('shared-memory',
        '2025-03-10 11:02:01,101\tINFO worker.py:1821 -- Started a local Ray instance. View the dashboard at 127.0.0.1:8265 \n'
        'INFO 03-10 11:02:05 [config.py:1610] Defaulting to use ray for distributed inference\n'
        'INFO 03-10 11:02:06 [ray_distributed_executor.py:176] use_ray_spmd_worker: True\n'
        'ray.exceptions.ObjectStoreFullError: Failed to put object ffffffffffffffffffffffffffffffffffffffff0100000001000000 in object store because it is full. Object size is 4294967296 bytes.\n'
        'The local object store is full of objects that are still in scope and cannot be evicted. Tip: Use the `ray memory` command to list active objects in the cluster.\n'),
    # ray python/ray/autoscaler/_private/autoscaler.py (infeasible requests)
    'ray-no-gpu-node': ('config-invalid',
        '2025-03-10 11:02:01,101\tINFO worker.py:1821 -- Started a local Ray instance. View the dashboard at 127.0.0.1:8265 \n'
        'INFO 03-10 11:02:05 [config.py:1610] Defaulting to use ray for distributed inference\n'
        'INFO 03-10 11:02:06 [ray_distributed_executor.py:176] use_ray_spmd_worker: True\n'
        "(autoscaler +1m2s) Error: No available node types can fulfill resource request {'GPU': 1.0}. Add suitable node types to this cluster to resolve this issue.\n"),
    # NCCL src/misc/socket.cc WARN 'Net : Connection closed by remote peer'
    'nccl-conn-closed': ('rank-crashed',
        '# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n'
        '#\n'
        '# Using devices\n'
        '#  Rank  0 Group  0 Pid 215836 on   node-a device  0 [0x1a] NVIDIA H100 80GB HBM3\n'
        '#  Rank  1 Group  0 Pid 215837 on   node-a device  1 [0x1b] NVIDIA H100 80GB HBM3\n'
        'node-a:215836:215836 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.5<0>\n'
        'node-a:215836:215836 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n'
        'node-a:215836:215900 [0] include/socket.h:409 NCCL WARN Net : Connection closed by remote peer node-b<45678>\n'
        "node-a: Test NCCL failure common.cu:1012 'remote process exited or there was a network error / '\n"),
    # NCCL src/misc/ibvwrap.cc WARN 'Call to ibv_reg_mr failed with error'
    'nccl-ibv-regmr': ('p2p-transport',
        '# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n'
        '#\n'
        '# Using devices\n'
        '#  Rank  0 Group  0 Pid 215836 on   node-a device  0 [0x1a] NVIDIA H100 80GB HBM3\n'
        '#  Rank  1 Group  0 Pid 215837 on   node-a device  1 [0x1b] NVIDIA H100 80GB HBM3\n'
        'node-a:215836:215836 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.5<0>\n'
        'node-a:215836:215836 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n'
        'node-a:215836:215900 [0] misc/ibvwrap.cc:193 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory\n'
        "node-a: Test NCCL failure common.cu:1012 'unhandled system error (run with NCCL_DEBUG=INFO for details) / '\n"
        ' .. node-a pid 215836: Test failure common.cu:891\n'),
    # nccl-tests src/common.cu PRINT('# Out of bounds values : %d %s'); https://github.com/NVIDIA/nccl-tests/issues/131
    'nccl-wrong-data': ('p2p-transport',
        '# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n'
        '#\n'
        '# Using devices\n'
        '#  Rank  0 Group  0 Pid 215836 on   node-a device  0 [0x1a] NVIDIA H100 80GB HBM3\n'
        '#  Rank  1 Group  0 Pid 215837 on   node-a device  1 [0x1b] NVIDIA H100 80GB HBM3\n'
        'node-a:215836:215836 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.5<0>\n'
        'node-a:215836:215836 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n'
        '#\n'
        '#                                                              out-of-place                       in-place          \n'
        '#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n'
        '#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       \n'
        '    33554432       8388608     float     sum      -1    820.1   40.91   40.91     42    819.7   40.94   40.94     42\n'
        '# Out of bounds values : 84 FAILED\n'
        '# Avg bus bandwidth    : 40.92 \n'),
    # NCCL src/include/checks.h CUDACHECK WARN("Cuda failure '%s'")
    'nccl-invalid-devfn': ('library-version',
        '# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n'
        '#\n'
        '# Using devices\n'
        '#  Rank  0 Group  0 Pid 215836 on   node-a device  0 [0x1a] NVIDIA H100 80GB HBM3\n'
        '#  Rank  1 Group  0 Pid 215837 on   node-a device  1 [0x1b] NVIDIA H100 80GB HBM3\n'
        'node-a:215836:215836 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.5<0>\n'
        'node-a:215836:215836 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n'
        "node-a:215836:215836 [0] enqueue.cc:1500 NCCL WARN Cuda failure 'invalid device function'\n"
        "node-a: Test NCCL failure common.cu:1012 'unhandled system error (run with NCCL_DEBUG=INFO for details) / '\n"
        ' .. node-a pid 215836: Test failure common.cu:891\n'),
    # flashinfer v0.2.14.post1 flashinfer/jit/core.py check_cuda_arch
    'fi-sm75': ('library-version',
        "[2025-06-27 19:01:50] server_args=ServerArgs(model_path='Qwen/Qwen2.5-72B-Instruct', tp_size=2, mem_fraction_static=0.88)\n"
        '[2025-06-27 19:01:58 TP0] Init torch distributed begin.\n'
        '[2025-06-27 19:01:58 TP1] Init torch distributed begin.\n'
        '[2025-06-27 19:02:01 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=8.71 GB\n'
        '[2025-06-27 19:02:10 TP0] Scheduler hit an exception: Traceback (most recent call last):\n'
        '  File "/usr/local/lib/python3.10/dist-packages/flashinfer/decode.py", line 800, in plan\n'
        'RuntimeError: FlashInfer requires sm75+\n'
        '[2025-06-27 19:02:11] Received sigquit from a child process. It usually means the child failed.\n'),
    # flash-attn csrc/flash_attn/flash_api.cpp TORCH_CHECK, as a TGI shard prints it; https://github.com/Dao-AILab/flash-attention/issues/762
    'tgi-flashattn-ampere': ('library-version',
        '2024-05-01T01:16:50.101Z  INFO text_generation_launcher: Args { model_id: "meta-llama/Llama-2-70b-chat-hf", num_shard: Some(2), max_input_tokens: None }\n'
        '2024-05-01T01:16:50.201Z  INFO text_generation_launcher: Sharding model on 2 processes\n'
        '2024-05-01T01:16:52.618Z  INFO shard-manager: text_generation_launcher: Starting shard rank=0\n'
        '2024-05-01T01:16:52.619Z  INFO shard-manager: text_generation_launcher: Starting shard rank=1\n'
        '2024-05-01T01:17:02.618Z  INFO shard-manager: text_generation_launcher: Waiting for shard to be ready... rank=0\n'
        '2024-05-01T01:17:10.553Z ERROR text_generation_launcher: Error when initializing model\n'
        'Traceback (most recent call last):\n'
        '  File "/opt/conda/bin/text-generation-server", line 8, in <module>\n'
        '    sys.exit(app())\n'
        '  File "/opt/conda/lib/python3.10/site-packages/text_generation_server/layers/attention/cuda.py", line 250, in attention\n'
        'RuntimeError: FlashAttention only supports Ampere GPUs or newer.\n'
        '2024-05-01T01:17:11.052Z ERROR shard-manager: text_generation_launcher: Shard complete standard error output:\n'
        ' rank=0\n'
        'Error: ShardCannotStart\n'
        '2024-05-01T01:17:11.149Z ERROR text_generation_launcher: Shard 0 failed to start\n'
        '2024-05-01T01:17:11.149Z  INFO text_generation_launcher: Shutting down shards\n'),
    # nccl-tests src/common.h CUDACHECK ('Test CUDA failure'); https://github.com/NVIDIA/nccl-tests/issues/165 (was exit 0 before the entry)
    'nccl-tests-bad-ordinal': ('config-invalid',
        '# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n'
        '#\n'
        '# Using devices\n'
        '#  Rank  0 Group  0 Pid 215836 on   node-a device  0 [0x1a] NVIDIA H100 80GB HBM3\n'
        '#  Rank  1 Group  0 Pid 215837 on   node-a device  1 [0x1b] NVIDIA H100 80GB HBM3\n'
        'node-a:215836:215836 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.5<0>\n'
        'node-a:215836:215836 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n'
        "node-a: Test CUDA failure common.cu:944 'invalid device ordinal'\n"
        ' .. node-a pid 215836: Test failure common.cu:891\n'),
    # nccl-tests src/common.h CUDACHECK with cudaGetErrorString 'out of memory'
    'nt-cuda-oom-alone': ('out-of-memory',
        '# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n'
        '#\n'
        '# Using devices\n'
        '#  Rank  0 Group  0 Pid 215836 on   node-a device  0 [0x1a] NVIDIA H100 80GB HBM3\n'
        '#  Rank  1 Group  0 Pid 215837 on   node-a device  1 [0x1b] NVIDIA H100 80GB HBM3\n'
        'node-a:215836:215836 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.5<0>\n'
        'node-a:215836:215836 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n'
        "node-a: Test CUDA failure common.cu:892 'out of memory'\n"
        ' .. node-a pid 215836: Test failure common.cu:891\n'),
}

HEALTHY: dict[str, str] = {
    # SGLang startup lines (scheduler.py / model_runner.py / http_server.py info logs)
    'sg-healthy': (
        "[2025-06-27 19:01:50] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct', tp_size=1)\n"
        '[2025-06-27 19:01:58 TP0] Init torch distributed begin.\n'
        '[2025-06-27 19:01:59 TP0] Init torch distributed ends. mem usage=0.00 GB\n'
        '[2025-06-27 19:02:01 TP0] Load weight begin. avail mem=78.50 GB\n'
        '[2025-06-27 19:02:09 TP0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=63.8 GB, mem usage=14.7 GB.\n'
        '[2025-06-27 19:02:09 TP0] KV Cache is allocated. #tokens: 1011345, K size: 27.01 GB, V size: 27.01 GB\n'
        '[2025-06-27 19:02:10 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=8.71 GB\n'
        '[2025-06-27 19:02:30 TP0] Capture cuda graph end. Time elapsed: 20.1 s. mem usage=0.52 GB. avail mem=8.19 GB.\n'
        '[2025-06-27 19:02:31 TP0] max_total_num_tokens=1011345, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=4096, context_len=32768\n'
        '[2025-06-27 19:02:32] INFO:     Started server process [123]\n'
        '[2025-06-27 19:02:32] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)\n'
        '[2025-06-27 19:02:33] The server is fired up and ready to roll!\n'),
    # TGI launcher and router startup lines (launcher/src/main.rs, router/src/server.rs)
    'tgi-healthy': (
        '2024-05-01T01:16:50.101Z  INFO text_generation_launcher: Args { model_id: "meta-llama/Llama-2-70b-chat-hf", num_shard: Some(2), max_input_tokens: None }\n'
        '2024-05-01T01:16:50.201Z  INFO text_generation_launcher: Sharding model on 2 processes\n'
        '2024-05-01T01:16:52.618Z  INFO shard-manager: text_generation_launcher: Starting shard rank=0\n'
        '2024-05-01T01:16:52.619Z  INFO shard-manager: text_generation_launcher: Starting shard rank=1\n'
        '2024-05-01T01:17:02.618Z  INFO shard-manager: text_generation_launcher: Waiting for shard to be ready... rank=0\n'
        '2024-05-01T01:17:20.100Z  INFO text_generation_launcher: Server started at unix:///tmp/text-generation-server-0\n'
        '2024-05-01T01:17:20.200Z  INFO shard-manager: text_generation_launcher: Shard ready in 27.5s rank=0\n'
        '2024-05-01T01:17:20.300Z  INFO shard-manager: text_generation_launcher: Shard ready in 27.6s rank=1\n'
        '2024-05-01T01:17:20.400Z  INFO text_generation_launcher: Starting Webserver\n'
        '2024-05-01T01:17:21.500Z  INFO text_generation_router_v3: backends/v3/src/lib.rs:125: Warming up model\n'
        '2024-05-01T01:17:30.000Z  INFO text_generation_router_v3: backends/v3/src/lib.rs:137: Setting max batch total tokens to 150000\n'
        '2024-05-01T01:17:30.100Z  INFO text_generation_router::server: router/src/server.rs:2000: Connected\n'),
    # vLLM on Ray startup (ray worker.py, vllm ray_distributed_executor.py)
    'ray-healthy': (
        '2025-03-10 11:02:01,101\tINFO worker.py:1821 -- Started a local Ray instance. View the dashboard at 127.0.0.1:8265 \n'
        'INFO 03-10 11:02:05 [config.py:1610] Defaulting to use ray for distributed inference\n'
        'INFO 03-10 11:02:06 [ray_distributed_executor.py:176] use_ray_spmd_worker: True\n'
        'INFO 03-10 11:02:30 [ray_distributed_executor.py:352] non_carry_over_env_vars from config: set()\n'
        '(RayWorkerWrapper pid=3123) INFO 03-10 11:02:40 [default_loader.py:267] Loading weights took 12.35 seconds\n'
        'INFO 03-10 11:03:10 [api_server.py:1000] Starting vLLM API server 0 on http://0.0.0.0:8000\n'
        'INFO:     Application startup complete.\n'),
    # nccl-tests src/common.cu result table and summary
    'nccl-tests-healthy': (
        '# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n'
        '#\n'
        '# Using devices\n'
        '#  Rank  0 Group  0 Pid 215836 on   node-a device  0 [0x1a] NVIDIA H100 80GB HBM3\n'
        '#  Rank  1 Group  0 Pid 215837 on   node-a device  1 [0x1b] NVIDIA H100 80GB HBM3\n'
        'node-a:215836:215836 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.5<0>\n'
        'node-a:215836:215836 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n'
        '#\n'
        '#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n'
        '    33554432       8388608     float     sum      -1    420.1   79.87   79.87      0    419.7   79.95   79.95      0\n'
        '# Out of bounds values : 0 OK\n'
        '# Avg bus bandwidth    : 79.91 \n'
        '#\n'),
    # SGLang serving with its 'KV cache pool is full. Retract requests.' warning (scheduler.py): it goes on
    'sg-retract-warn-healthy': (
        "[2025-06-27 19:01:50] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct', tp_size=1)\n"
        '[2025-06-27 19:01:58 TP0] Init torch distributed begin.\n'
        '[2025-06-27 19:01:59 TP0] Init torch distributed ends. mem usage=0.00 GB\n'
        '[2025-06-27 19:02:01 TP0] Load weight begin. avail mem=78.50 GB\n'
        '[2025-06-27 19:02:09 TP0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=63.8 GB, mem usage=14.7 GB.\n'
        '[2025-06-27 19:02:09 TP0] KV Cache is allocated. #tokens: 1011345, K size: 27.01 GB, V size: 27.01 GB\n'
        '[2025-06-27 19:02:10 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=8.71 GB\n'
        '[2025-06-27 19:02:30 TP0] Capture cuda graph end. Time elapsed: 20.1 s. mem usage=0.52 GB. avail mem=8.19 GB.\n'
        '[2025-06-27 19:02:31 TP0] max_total_num_tokens=1011345, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=4096, context_len=32768\n'
        '[2025-06-27 19:02:32] INFO:     Started server process [123]\n'
        '[2025-06-27 19:02:32] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)\n'
        '[2025-06-27 19:02:33] The server is fired up and ready to roll!\n'
        '[2025-06-27 19:05:01 TP0] Decode batch. #running-req: 120, #token: 380000, token usage: 0.98, gen throughput (token/s): 2100.5, #queue-req: 30\n'
        '[2025-06-27 19:05:02 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.7000 -> 1.0000\n'
        '[2025-06-27 19:05:12 TP0] Decode batch. #running-req: 117, #token: 370000, token usage: 0.95, gen throughput (token/s): 2050.1, #queue-req: 33\n'),
    # TGI start with the launcher's flash-attention / custom-kernel warnings
    'tgi-healthy-warns': (
        '2024-05-01T01:16:50.101Z  INFO text_generation_launcher: Args { model_id: "meta-llama/Llama-2-70b-chat-hf", num_shard: Some(2), max_input_tokens: None }\n'
        '2024-05-01T01:16:50.201Z  INFO text_generation_launcher: Sharding model on 2 processes\n'
        '2024-05-01T01:16:50.301Z  WARN text_generation_launcher: Could not import Flash Attention enabled models: CUDA is not available\n'
        "2024-05-01T01:16:50.302Z  WARN text_generation_launcher: We're not using custom kernels.\n"
        '2024-05-01T01:16:52.618Z  INFO shard-manager: text_generation_launcher: Starting shard rank=0\n'
        '2024-05-01T01:16:52.619Z  INFO shard-manager: text_generation_launcher: Starting shard rank=1\n'
        '2024-05-01T01:17:02.618Z  INFO shard-manager: text_generation_launcher: Waiting for shard to be ready... rank=0\n'
        '2024-05-01T01:17:20.100Z  INFO text_generation_launcher: Server started at unix:///tmp/text-generation-server-0\n'
        '2024-05-01T01:17:20.200Z  INFO shard-manager: text_generation_launcher: Shard ready in 27.5s rank=0\n'
        '2024-05-01T01:17:20.300Z  INFO shard-manager: text_generation_launcher: Shard ready in 27.6s rank=1\n'
        '2024-05-01T01:17:20.400Z  INFO text_generation_launcher: Starting Webserver\n'
        '2024-05-01T01:17:21.500Z  INFO text_generation_router_v3: backends/v3/src/lib.rs:125: Warming up model\n'
        '2024-05-01T01:17:30.000Z  INFO text_generation_router_v3: backends/v3/src/lib.rs:137: Setting max batch total tokens to 150000\n'
        '2024-05-01T01:17:30.100Z  INFO text_generation_router::server: router/src/server.rs:2000: Connected\n'),
    # Ray's /dev/shm warning (ray/_private/services.py) on a vLLM start that completes
    'ray-shm-tmp-healthy': (
        "2025-03-10 11:02:01,000\tWARNING services.py:2152 -- WARNING: The object store is using /tmp instead of /dev/shm because /dev/shm has only 67108864 bytes available. This will harm performance! You may be able to free up space by deleting files in /dev/shm. If you are inside a Docker container, you can increase /dev/shm size by passing '--shm-size=10.24gb' to 'docker run' (or add it to the run_options list in a Ray cluster config). Make sure to set this to more than 30% of available RAM.\n"
        '2025-03-10 11:02:01,101\tINFO worker.py:1821 -- Started a local Ray instance. View the dashboard at 127.0.0.1:8265 \n'
        'INFO 03-10 11:02:05 [config.py:1610] Defaulting to use ray for distributed inference\n'
        'INFO 03-10 11:02:06 [ray_distributed_executor.py:176] use_ray_spmd_worker: True\n'
        '(RayWorkerWrapper pid=3123) INFO 03-10 11:02:40 [default_loader.py:267] Loading weights took 12.35 seconds\n'
        'INFO 03-10 11:03:10 [api_server.py:1000] Starting vLLM API server 0 on http://0.0.0.0:8000\n'
        'INFO:     Application startup complete.\n'),
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_engine_message_names_its_cause(name: str, tmp_path: Path) -> None:
    expected, text = FIXED[name]
    assert_named(KNOWN, name, expected, text, tmp_path)


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_engine_healthy_start_stays_exit_0(name: str, tmp_path: Path) -> None:
    assert_healthy(name, HEALTHY[name], tmp_path)


def test_sglang_context_length_warning_is_no_finding(tmp_path: Path) -> None:
    """The same words after "Warning: " (SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN set) are a
    warning on a start that goes on: not the entry's evidence."""
    line = ("[2025-06-27 19:01:55 TP0] Warning: User-specified context_length (200000) is greater "
            "than the derived context_length (131072). This may lead to incorrect model outputs or "
            "CUDA errors.")
    assert "cat:sglang-context-length-over-model" not in dict(C.load(environ={}).scan(line))


def test_ray_cause_list_is_not_an_oom_finding() -> None:
    """Ray's ActorDiedError lists the OOM killer among possible causes: the line is owned by
    ray-actor-died (rank-crashed), not read as a host OOM kill."""
    line = FIXED["ray-actor-died"][1].splitlines()[-1]
    hits = [s for s, _m in C.load(environ={}).scan(line)]
    assert hits[0] == "cat:ray-actor-died", hits
