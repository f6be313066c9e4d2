"""What the layers that launch and supervise an engine say (catalogue file known-supervisors.toml):
TGI's launcher and router, SGLang's launcher, Ray Serve's controller, the Kubernetes kubelet and
scheduler, Slurm, torch's allocator under a memory fraction and the DeepSpeed launcher. Each log
is the message in the shape its software prints it (wording from the source named in the
comment) inside the lines the supervised engine prints around it; the top finding names the
category an engineer who knows that software names, and it rests on an entry of
known-supervisors.toml (without the file these logs were exit 0 or `unknown`, and a liveness kill
of a pod still loading weights was not told from a server that hung). Healthy starts stay exit 0:
a TGI start to "Connected", a pod whose readiness probe fails twice while it starts and then
serves, a Ray Serve app that deploys after a slow replica init."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose import catalogue as C
from sm120kit.diagnose.engine import diagnose
from tests.diagnose.known_checks import assert_healthy, assert_named, entry_ids

KNOWN = Path(C.__file__).resolve().parent / "known-supervisors.toml"

_TGI = (
    '2024-09-25T15:00:00.100000Z  INFO text_generation_launcher: Args { model_id: "meta-llama/Meta-Llama-3.1-8B-Instruct", num_shard: None, max_total_tokens: Some(8192) }\n'
    "2024-09-25T15:00:00.200000Z  INFO download: text_generation_launcher: Starting check and download process for meta-llama/Meta-Llama-3.1-8B-Instruct\n"
    "2024-09-25T15:00:05.100000Z  INFO download: text_generation_launcher: Successfully downloaded weights for meta-llama/Meta-Llama-3.1-8B-Instruct\n"
    "2024-09-25T15:00:05.200000Z  INFO shard-manager: text_generation_launcher: Starting shard rank=0\n"
    "2024-09-25T15:00:15.200000Z  INFO shard-manager: text_generation_launcher: Waiting for shard to be ready... rank=0\n"
)
_TGI_READY = (
    "2024-09-25T15:00:22.300000Z  INFO text_generation_launcher: Server started at unix:///tmp/text-generation-server-0\n"
    "2024-09-25T15:00:22.400000Z  INFO shard-manager: text_generation_launcher: Shard ready in 17.2s rank=0\n"
    "2024-09-25T15:00:22.500000Z  INFO text_generation_launcher: Starting Webserver\n"
    "2024-09-25T15:00:22.600000Z  INFO text_generation_router_v3: backends/v3/src/lib.rs:125: Warming up model\n"
)
_VLLM_LOADING = (
    "INFO 05-16 13:12:16 api_server.py:712] vLLM API server version 0.8.5\n"
    "INFO 05-16 13:12:20 config.py:689] This model supports multiple tasks. Defaulting to 'generate'.\n"
    "INFO 05-16 13:12:45 model_runner.py:1110] Starting to load model meta-llama/Llama-3.1-70B-Instruct...\n"
    "Loading safetensors checkpoint shards:   0% Completed | 0/30 [00:00<?, ?it/s]\n"
    "Loading safetensors checkpoint shards:   3% Completed | 1/30 [00:21<10:09, 21.02s/it]\n"
    "Loading safetensors checkpoint shards:   7% Completed | 2/30 [00:42<09:48, 21.02s/it]\n"
)
_VLLM_READY = (
    "INFO 05-16 13:12:16 api_server.py:712] vLLM API server version 0.8.5\n"
    "INFO 05-16 13:12:45 model_runner.py:1110] Starting to load model Qwen/Qwen2.5-7B-Instruct...\n"
    "INFO 05-16 13:13:05 model_runner.py:1115] Loading model weights took 14.2 GB\n"
    "INFO 05-16 13:13:30 api_server.py:937] Starting vLLM API server on http://0.0.0.0:8000\n"
    "INFO:     Application startup complete.\n"
    'INFO:     10.244.1.1:52310 - "GET /health HTTP/1.1" 200 OK\n'
)
_EVENTS = (
    "Events:\n"
    "  Type     Reason     Age                From               Message\n"
    "  ----     ------     ----               ----               -------\n"
)
_SERVE = (
    'INFO 2025-04-02 10:00:01,000 serve 123 -- Started Serve in namespace "serve".\n'
    "INFO 2025-04-02 10:00:05,000 controller 456 -- Deploying new version of Deployment(name='VLLMDeployment', app='default') (initial target replicas: 1).\n"
    "INFO 2025-04-02 10:00:05,100 controller 456 -- Adding 1 replica to Deployment(name='VLLMDeployment', app='default').\n"
)
_SGLANG = (
    "[2025-03-10 11:02:00] server_args=ServerArgs(model_path='Qwen/Qwen2.5-72B-Instruct', tp_size=4, mem_fraction_static=0.88)\n"
    "[2025-03-10 11:02:10 TP0] Load weight begin. avail mem=78.50 GB\n"
)
_DS = (
    "[2024-03-01 10:00:00,000] [INFO] [launch.py:145:main] WORLD INFO DICT: {'localhost': [0, 1, 2, 3]}\n"
    "[2024-03-01 10:00:00,000] [INFO] [launch.py:163:main] dist_world_size=4\n"
    "[2024-03-01 10:00:00,000] [INFO] [launch.py:253:main] process 12345 spawned with command: ['/usr/bin/python', '-u', 'train.py', '--local_rank=0']\n"
    "[2024-03-01 10:05:00,000] [INFO] [launch.py:316:sigkill_handler] Killing subprocess 12345\n"
)

# name -> (expected top category, log text); source of the message in the comment above each
FIXED: dict[str, tuple[str, str]] = {
    # torch v2.5.1 c10/cuda/CUDACachingAllocator.cpp through TGI v0.9.0 router/src/main.rs
    # (.expect("Unable to warmup model")); https://github.com/huggingface/text-generation-inference/issues/563
    'tgi-warmup-memory-fraction': ('out-of-memory', _TGI + (
        "2023-07-07T17:55:35.700Z  INFO shard-manager: text_generation_launcher: Shard ready in 10.1s rank=0\n"
        "2023-07-07T17:55:35.800Z  INFO text_generation_launcher: Starting Webserver\n"
        "2023-07-07T17:55:36.100Z  INFO text_generation_router: router/src/main.rs:210: Warming up model\n"
        "thread 'main' panicked at 'Unable to warmup model: Generation(\"Allocation on device 0 would exceed allowed memory. (out of memory)\\nCurrently allocated     : 16.08 GiB\\nRequested               : 4.83 GiB\\nDevice limit            : 22.20 GiB\\nFree (according to CUDA): 11.12 MiB\")', router/src/main.rs:216:18\n"
        "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n"
        "2023-07-07T17:55:43.805488Z ERROR text_generation_launcher: Webserver Crashed\n"
        "2023-07-07T17:55:43.805514Z  INFO text_generation_launcher: Shutting down shards\n"
        "Error: WebserverFailed\n")),
    # TGI v3.3.6 backends/v3/src/lib.rs (V3Error::NotEnoughMemory); https://github.com/huggingface/text-generation-inference/issues/2873
    'tgi-max-total-over-kv': ('kv-cache-insufficient', _TGI + _TGI_READY + (
        "2024-09-25T15:00:40.100000Z  INFO text_generation_launcher: KV-cache blocks: 5120, size: 1\n"
        "Error: Backend(NotEnoughMemory(131072))\n"
        "2024-09-25T15:00:40.300000Z ERROR text_generation_launcher: Webserver Crashed\n"
        "2024-09-25T15:00:40.300100Z  INFO text_generation_launcher: Shutting down shards\n"
        "Error: WebserverFailed\n")),
    # TGI v2.4.1 launcher/src/main.rs (shard_manager: exit_status.signal()); https://github.com/huggingface/text-generation-inference/issues/2293
    'tgi-shard-sigsegv': ('rank-crashed', _TGI + (
        "2024-09-25T15:00:20.100000Z ERROR shard-manager: text_generation_launcher: Shard complete standard error output:\n"
        "\n"
        "2024-09-25T15:00:20.100100Z ERROR shard-manager: text_generation_launcher: Shard process was signaled to shutdown with signal 11 rank=0\n"
        "2024-09-25T15:00:20.200000Z ERROR text_generation_launcher: Shard 0 failed to start\n"
        "2024-09-25T15:00:20.200100Z  INFO text_generation_launcher: Shutting down shards\n"
        "Error: ShardCannotStart\n")),
    # TGI v2.4.1 launcher/src/main.rs (download_convert_model); https://github.com/huggingface/text-generation-inference/issues/446
    'tgi-download-sigbus': ('shared-memory', (
        '2023-06-13T08:12:30.100000Z  INFO text_generation_launcher: Args { model_id: "tiiuae/falcon-7b-instruct", num_shard: None }\n'
        "2023-06-13T08:12:30.200000Z  INFO download: text_generation_launcher: Starting download process.\n"
        "2023-06-13T08:12:40.455302Z ERROR download: text_generation_launcher: Download process was signaled to shutdown with signal 7: \n"
        "Error: DownloadError\n")),
    # TGI v2.4.1 launcher/src/main.rs (ShardCannotStart, empty stderr); https://github.com/huggingface/text-generation-inference/issues/1354
    'tgi-shard-cannot-start': ('rank-crashed', _TGI + (
        "2024-09-25T15:00:20.100000Z ERROR shard-manager: text_generation_launcher: Shard complete standard error output:\n"
        " rank=0\n"
        "2024-09-25T15:00:20.200000Z ERROR text_generation_launcher: Shard 0 failed to start\n"
        "2024-09-25T15:00:20.200100Z  INFO text_generation_launcher: Shutting down shards\n"
        "Error: ShardCannotStart\n")),
    # TGI v2.4.1 launcher/src/main.rs (download_convert_model); https://github.com/huggingface/text-generation-inference/issues/306
    'tgi-download-failed': ('checkpoint-config', (
        '2024-08-11T08:31:10.100000Z  INFO text_generation_launcher: Args { model_id: "someorg/some-model", revision: None, num_shard: None }\n'
        "2024-08-11T08:31:10.200000Z  INFO download: text_generation_launcher: Starting check and download process for someorg/some-model\n"
        "2024-08-11T08:31:20.364603Z ERROR download: text_generation_launcher: Download encountered an error: \n"
        "Error: DownloadError\n")),
    # TGI v2.4.1 launcher/src/main.rs (num_shard); https://github.com/huggingface/text-generation-inference/issues/1204
    'tgi-not-enough-devices': ('config-invalid', (
        '2023-10-27T10:00:00.100000Z  INFO text_generation_launcher: Args { model_id: "meta-llama/Llama-2-13b-chat-hf", sharded: Some(true), num_shard: None }\n'
        "2023-10-27T10:00:00.200000Z  INFO text_generation_launcher: Parsing num_shard from CUDA_VISIBLE_DEVICES\n"
        'Error: NotEnoughCUDADevices("`sharded` is true but only found 1 CUDA devices")\n')),
    # Ray Serve ray-2.60.0 python/ray/serve/_private/deployment_state.py (check_health timeout)
    'ray-serve-health-timeout': ('serving-stall', _SERVE + (
        "(ServeReplica:default:VLLMDeployment pid=789) INFO 04-02 10:02:00 model_runner.py:1115] Loading model weights took 14.2 GB\n"
        "INFO 2025-04-02 10:02:30,000 serve 123 -- Application 'default' is ready at http://0.0.0.0:8000/.\n"
        "WARNING 2025-04-02 10:20:00,000 controller 456 -- Didn't receive health check response for replica Replica(id='abc123', deployment='VLLMDeployment', app='default') after 10.0s, marking it unhealthy.\n"
        "WARNING 2025-04-02 10:20:00,100 controller 456 -- Replica Replica(id='abc123', deployment='VLLMDeployment', app='default') failed health check, stopping it.\n"
        "INFO 2025-04-02 10:20:00,200 controller 456 -- Adding 1 replica to Deployment(name='VLLMDeployment', app='default').\n")),
    # Ray Serve ray-2.60.0 python/ray/serve/_private/deployment_state.py (PENDING_ALLOCATION); https://github.com/ray-project/ray-llm/issues/143
    'ray-serve-unschedulable': ('config-invalid', _SERVE + (
        "WARNING 2025-04-02 10:00:35,100 controller 456 -- Deployment 'VLLMDeployment' in application 'default' has 1 replicas that have taken more than 30s to be scheduled. This may be due to waiting for the cluster to auto-scale or for a runtime environment to be installed. Resources required for each replica: {\"CPU\": 1, \"GPU\": 8}, total resources available: {\"CPU\": 64.0, \"GPU\": 4.0}. Use `ray status` for more details.\n"
        "WARNING 2025-04-02 10:01:05,100 controller 456 -- Deployment 'VLLMDeployment' in application 'default' has 1 replicas that have taken more than 30s to be scheduled. This may be due to waiting for the cluster to auto-scale or for a runtime environment to be installed. Resources required for each replica: {\"CPU\": 1, \"GPU\": 8}, total resources available: {\"CPU\": 64.0, \"GPU\": 4.0}. Use `ray status` for more details.\n")),
    # kubernetes v1.29.0 pkg/kubelet/prober/prober.go + kuberuntime/kuberuntime_manager.go; https://github.com/vllm-project/aibrix/issues/772
    'k8s-liveness-kills-loading': ('timeout-too-short', "$ kubectl logs vllm-7d9c8b6f5-abcde --previous\n" + _VLLM_LOADING + (
        "$ kubectl describe pod vllm-7d9c8b6f5-abcde\n"
        "    Last State:     Terminated\n"
        "      Reason:       Error\n"
        "      Exit Code:    137\n") + _EVENTS + (
        '  Warning  Unhealthy  2m (x3 over 2m40s) kubelet  Liveness probe failed: Get "http://10.244.1.7:8000/health": dial tcp 10.244.1.7:8000: connect: connection refused\n'
        "  Normal   Killing    2m                 kubelet  Container vllm failed liveness probe, will be restarted\n"
        "  Warning  BackOff    30s (x6 over 2m)   kubelet  Back-off restarting failed container vllm in pod vllm-7d9c8b6f5-abcde\n")),
    # kubernetes v1.29.0 pkg/kubelet/kuberuntime/kuberuntime_manager.go (startup probe); https://github.com/opendatahub-io/kserve/pull/1161
    'k8s-startup-kills-compile': ('timeout-too-short', (
        "INFO 05-16 13:12:16 [api_server.py:1043] vLLM API server version 0.9.1\n"
        "INFO 05-16 13:14:45 [default_loader.py:272] Loading weights took 120.02 seconds\n"
        "INFO 05-16 13:14:46 [gpu_model_runner.py:1801] Model loading took 65.1 GiB and 121.3 seconds\n"
        "INFO 05-16 13:14:58 [backends.py:508] Using cache directory: /root/.cache/vllm/torch_compile_cache/8f1d/rank_0_0 for vLLM's torch.compile\n"
        "INFO 05-16 13:14:58 [backends.py:519] Dynamo bytecode transform time: 11.6 s\n") + _EVENTS + (
        '  Warning  Unhealthy  40s (x30 over 5m)  kubelet  Startup probe failed: Get "http://10.42.0.10:8000/health": dial tcp 10.42.0.10:8000: connect: connection refused\n'
        "  Normal   Killing    40s                kubelet  Container vllm-server failed startup probe, will be restarted\n")),
    # kubernetes v1.29.0 pkg/kubelet/kuberuntime/kuberuntime_manager.go, after the server was ready
    'k8s-liveness-kills-serving': ('serving-stall', _VLLM_READY + (
        "INFO 05-16 15:40:02 metrics.py:455] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 12.1 tokens/s, Running: 4 reqs, Swapped: 0 reqs, Pending: 0 reqs\n") + _EVENTS + (
        '  Warning  Unhealthy  71s (x3 over 91s)  kubelet  Liveness probe failed: Get "http://10.244.1.7:8000/health": context deadline exceeded (Client.Timeout exceeded while awaiting headers)\n'
        "  Normal   Killing    71s                kubelet  Container vllm failed liveness probe, will be restarted\n")),
    # moby v24.0.7 libnetwork/portallocator/portallocator.go (ErrPortAlreadyAllocated)
    'docker-port-allocated': ('config-invalid', (
        "$ docker run --gpus all -p 8000:8000 vllm/vllm-openai:v0.8.5 --model Qwen/Qwen2.5-7B-Instruct\n"
        "docker: Error response from daemon: driver failed programming external connectivity on endpoint quirky_lamport (3f2b9c): Bind for 0.0.0.0:8000 failed: port is already allocated.\n")),
    # kubernetes v1.29.0 pkg/kubelet/images/image_manager.go; https://github.com/sasha0552/pascal-pkgs-ci/issues/19
    'k8s-image-pull': ('config-invalid', _EVENTS + (
        "  Normal   Scheduled  2m                 default-scheduler  Successfully assigned default/vllm-0 to gpu-node-1\n"
        '  Normal   Pulling    50s (x4 over 2m)   kubelet            Pulling image "vllm/vllm-openai:v0.99.0"\n'
        '  Warning  Failed     49s (x4 over 2m)   kubelet            Failed to pull image "vllm/vllm-openai:v0.99.0": rpc error: code = NotFound desc = failed to pull and unpack image "docker.io/vllm/vllm-openai:v0.99.0": failed to resolve reference "docker.io/vllm/vllm-openai:v0.99.0": docker.io/vllm/vllm-openai:v0.99.0: not found\n'
        "  Warning  Failed     49s (x4 over 2m)   kubelet            Error: ErrImagePull\n"
        '  Normal   BackOff    35s (x6 over 2m)   kubelet            Back-off pulling image "vllm/vllm-openai:v0.99.0"\n'
        "  Warning  Failed     35s (x6 over 2m)   kubelet            Error: ImagePullBackOff\n")),
    # kubernetes v1.29.0 pkg/scheduler/framework/plugins/nodeaffinity + tainttoleration
    'k8s-unschedulable': ('config-invalid', _EVENTS + (
        "  Warning  FailedScheduling  2m    default-scheduler  0/4 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 3 node(s) didn't match Pod's node affinity/selector. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.\n")),
    # kubernetes v1.29.0 pkg/kubelet/eviction/helpers.go; https://github.com/kubernetes/kubernetes/issues/112927
    'k8s-evicted-memory': ('out-of-memory', _VLLM_LOADING + _EVENTS + (
        "  Warning  Evicted  1m    kubelet  The node was low on resource: memory. Container vllm was using 61234560Ki, which exceeds its request of 16Gi.\n"
        "  Normal   Killing  1m    kubelet  Stopping container vllm\n")),
    # Slurm slurm-23-11-10-1 src/plugins/task/cgroup/task_cgroup_memory.c
    'slurm-oom-kill': ('out-of-memory', (
        "srun: job 123456 queued and waiting for resources\n"
        "srun: job 123456 has been allocated resources\n") + _VLLM_LOADING + (
        "slurmstepd: error: Detected 1 oom_kill event in StepId=123456.0. Some of the step tasks have been OOM Killed.\n"
        "srun: error: gpu-node-1: task 0: Out Of Memory\n")),
    # Slurm slurm-23-11-10-1 src/slurmd/slurmstepd/req.c
    'slurm-time-limit': ('timeout-too-short', _VLLM_LOADING + (
        "slurmstepd: error: *** JOB 123456 ON gpu-node-1 CANCELLED AT 2025-05-16T15:12:45 DUE TO TIME LIMIT ***\n")),
    # Slurm slurm-21-08-8-2 src/plugins/task/cgroup/task_cgroup_memory.c (the older wording)
    'slurm-oom-kill-old-wording': ('out-of-memory', _VLLM_LOADING + (
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=7.batch. Some of your processes may have been killed by the cgroup out-of-memory handler.\n")),
    # docker/compose v2.29.7 pkg/compose/convergence.go (depends_on: condition: service_healthy)
    'compose-unhealthy-loading': ('timeout-too-short', (
        "$ docker compose up -d\n"
        " Container stack-vllm-1  Created\n"
        " Container stack-vllm-1  Started\n"
        " Container stack-vllm-1  Waiting\n"
        " Container stack-vllm-1  Error\n"
        "dependency failed to start: container stack-vllm-1 is unhealthy\n"
        "$ docker compose logs vllm\n") + "".join("vllm-1  | " + ln + "\n" for ln in _VLLM_LOADING.splitlines())),
    # DeepSpeed v0.14.4 deepspeed/launcher/launch.py (sigkill_handler); https://github.com/microsoft/DeepSpeed/issues/4181
    # with the kernel's OOM record beside it (mm/oom_kill.c); without one it is rank-crashed
    # (known-launchers.toml, tests/diagnose/test_known_messages_launchers.py)
    'deepspeed-sigkill': ('out-of-memory', _DS + (
        "[2024-03-01 10:05:00,000] [ERROR] [launch.py:322:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', '--local_rank=3'] exits with return code = -9\n"
        "$ dmesg -T | grep -i oom\n"
        "[Fri Mar  1 10:04:59 2024] Out of memory: Killed process 51234 (python) total-vm:98765432kB, anon-rss:61234567kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:123456kB oom_score_adj:0\n")),
    # DeepSpeed v0.14.4 deepspeed/launcher/launch.py (sigkill_handler)
    'deepspeed-sigsegv': ('rank-crashed', _DS + (
        "[2024-03-01 10:05:00,000] [ERROR] [launch.py:322:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', '--local_rank=3'] exits with return code = -11\n")),
}

HEALTHY: dict[str, str] = {
    # a TGI start through warmup to the router's "Connected" (router/src/server.rs)
    'tgi-start': _TGI + _TGI_READY + (
        "2024-09-25T15:00:25.100000Z  INFO text_generation_launcher: Cuda Graphs are enabled for sizes [32, 16, 8, 4, 2, 1]\n"
        "2024-09-25T15:00:28.100000Z  INFO text_generation_router_v3: backends/v3/src/lib.rs:137: Setting max batch total tokens to 123456\n"
        "2024-09-25T15:00:28.200000Z  INFO text_generation_router_v3: backends/v3/src/lib.rs:166: Using backend V3\n"
        "2024-09-25T15:00:28.300000Z  INFO text_generation_router::server: router/src/server.rs:2393: Connected\n"),
    # a readiness probe fails twice while the pod starts (prober.go), then the server serves
    'k8s-readiness-while-starting': _VLLM_READY + _EVENTS + (
        "  Normal   Scheduled  3m                 default-scheduler  Successfully assigned default/vllm-7d9c8b6f5-abcde to gpu-node-1\n"
        '  Normal   Pulled     3m                 kubelet            Container image "vllm/vllm-openai:v0.8.5" already present on machine\n'
        "  Normal   Created    3m                 kubelet            Created container vllm\n"
        "  Normal   Started    3m                 kubelet            Started container vllm\n"
        '  Warning  Unhealthy  2m30s (x2 over 2m40s)  kubelet        Readiness probe failed: Get "http://10.244.1.7:8000/health": dial tcp 10.244.1.7:8000: connect: connection refused\n'),
    # a Ray Serve app whose replica initialises slowly (the PENDING_INITIALIZATION warning) and deploys
    'ray-serve-deployed': _SERVE + (
        "WARNING 2025-04-02 10:00:35,100 controller 456 -- Deployment 'VLLMDeployment' in application 'default' has 1 replicas that have taken more than 30s to initialize.\n"
        "This may be caused by a slow __init__ or reconfigure method.\n"
        "(ServeReplica:default:VLLMDeployment pid=789) INFO 04-02 10:02:00 model_runner.py:1115] Loading model weights took 14.2 GB\n"
        "INFO 2025-04-02 10:02:30,000 serve 123 -- Application 'default' is ready at http://0.0.0.0:8000/.\n"),
    # the scheduling warning while an autoscaler adds a GPU node, then the app is ready
    'ray-serve-scheduled-late': _SERVE + (
        "WARNING 2025-04-02 10:00:35,100 controller 456 -- Deployment 'VLLMDeployment' in application 'default' has 1 replicas that have taken more than 30s to be scheduled. This may be due to waiting for the cluster to auto-scale or for a runtime environment to be installed. Resources required for each replica: {\"CPU\": 1, \"GPU\": 1}, total resources available: {\"CPU\": 8.0}. Use `ray status` for more details.\n"
        "(ServeReplica:default:VLLMDeployment pid=789) INFO 04-02 10:04:00 model_runner.py:1115] Loading model weights took 14.2 GB\n"
        "INFO 2025-04-02 10:04:30,000 serve 123 -- Application 'default' is ready at http://0.0.0.0:8000/.\n"),
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_supervisor_message_names_its_cause(name: str, tmp_path: Path) -> None:
    expected, text = FIXED[name]
    assert_named(KNOWN, name, expected, text, tmp_path)


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_supervised_healthy_run_stays_exit_0(name: str, tmp_path: Path) -> None:
    assert_healthy(name, HEALTHY[name], tmp_path)


def test_sglang_teardown_kill_is_not_an_oom_kill(tmp_path: Path) -> None:
    """SGLang's launcher SIGKILLs its own process tree after a child's SIGQUIT
    (sglang v0.4.10.post2 python/sglang/srt/utils.py kill_process_tree), so the shell prints
    "Killed": that line is the teardown (an entry of known-supervisors.toml), not the host OOM
    killer, and the child's own error stays the first finding."""
    log = tmp_path / "sglang.log"
    log.write_text(_SGLANG + (
        "[2025-03-10 11:02:40 TP2] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 2570, in run_scheduler_process\n'
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)\n"
        '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/configs/model_config.py", line 120, in __init__\n'
        "ValueError: User-specified context_length (200000) is greater than the derived context_length (131072).\n"
        "\n"
        "[2025-03-10 11:02:40] Received sigquit from a child process. It usually means the child failed.\n"
        "Killed\n"))
    res = diagnose([log])
    assert res.exit_code == 1 and res.findings, res.verdict
    assert res.findings[0].category == "config-invalid", [(f.category, f.rule) for f in res.findings]
    assert all(f.rule != "host-oom-killed" and f.category != "out-of-memory" for f in res.findings), \
        [(f.category, f.rule) for f in res.findings]
    assert "sglang-launcher-self-kill" in {f.rule for f in res.findings}
    assert "sglang-launcher-self-kill" in entry_ids(KNOWN)


def test_probe_kill_without_progress_is_not_called_a_slow_start(tmp_path: Path) -> None:
    """A liveness kill with no engine line at all says nothing about a slow start: the
    timeout-too-short entry needs the engine's progress beside it (its `when`)."""
    log = tmp_path / "events.log"
    log.write_text(_EVENTS + (
        '  Warning  Unhealthy  2m (x3 over 2m40s) kubelet  Liveness probe failed: Get "http://10.244.1.7:8000/health": dial tcp 10.244.1.7:8000: connect: connection refused\n'
        "  Normal   Killing    2m                 kubelet  Container vllm failed liveness probe, will be restarted\n"))
    res = diagnose([log])
    assert all(f.rule not in ("k8s-probe-killed-slow-start", "k8s-liveness-killed-serving")
               for f in res.findings), [(f.category, f.rule) for f in res.findings]


def test_tgi_download_error_detail_is_named_by_the_message_index(tmp_path: Path) -> None:
    # with the server's own exception under the launcher's line, the message index (TGI's
    # text_generation_server sources) names it: a stronger answer than the launcher's position
    text = (
        "2024-08-11T08:31:20.364603Z ERROR download: text_generation_launcher: Download encountered an error: \n"
        "Traceback (most recent call last):\n"
        '  File "/opt/conda/lib/python3.11/site-packages/text_generation_server/utils/hub.py", line 139, in weight_files\n'
        "    raise FileNotFoundError(\n"
        "FileNotFoundError: No local weights found in /data/someorg--some-model with extension .safetensors\n"
        "Error: DownloadError\n")
    log = tmp_path / "tgi.log"
    log.write_text(text, encoding="utf-8")
    res = diagnose([log])
    top = res.findings[0]
    assert (top.category, top.rule) == ("checkpoint-config", "index-match"), (top.category, top.rule)
    assert "text_generation_server" in top.summary + " ".join(e.text for e in top.evidence)
