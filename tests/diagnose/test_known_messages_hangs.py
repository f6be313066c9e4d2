"""What the software says when a multi-GPU run waits for something that never comes (catalogue
file known-hangs.toml): torch.distributed's NCCL watchdog, TCP store and rendezvous, Gloo, vLLM's
Ray executor, Ray's GCS, SGLang's launcher, NCCL's sockets and proxy thread, HAMi-core's vGPU
hook. Each log is the message in the shape its software prints it (wording from the source named
in the comment, lines from the public thread named there), inside the lines a vLLM / torchrun /
SGLang / NCCL run prints around it; the top finding names the category an engineer who knows that
software names, and it rests on an entry of known-hangs.toml (without those entries these logs
were exit 0 or `unknown`, or named by no entry). A timeout is named as the effect it is; the
waits and warnings of runs that go on (a placement group placed after a short wait, the TCPStore
warning of a finished job, HAMi's init lock taken after a few tries) stay exit 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose import catalogue as C
from tests.diagnose.known_checks import assert_healthy, assert_named

KNOWN = Path(C.__file__).resolve().parent / "known-hangs.toml"

_VLLM_RAY = (
    "INFO 04-01 02:45:40 api_server.py:1043] vLLM API server version 0.8.2\n"
    "INFO 04-01 02:45:44 config.py:1477] Defaulting to use ray for distributed inference\n"
    "INFO 04-01 02:45:44 llm_engine.py:241] Initializing a V0 LLM engine (v0.8.2) with config: "
    "model='Qwen/Qwen2.5-7B-Instruct', tensor_parallel_size=2, pipeline_parallel_size=1\n"
    "2025-04-01 02:45:45,120 INFO worker.py:1654 -- Connecting to existing Ray cluster at address: 10.163.194.101:6379...\n"
)
_TORCHRUN = (
    "W0601 10:00:00.000000 140 torch/distributed/run.py:793] *****************************************\n"
    "W0601 10:00:00.000000 140 torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment variable for each process to be 1 in default\n"
)

# name -> (expected top category, log text); source of the message in the comment above each
FIXED: dict[str, tuple[str, str]] = {
    # torch v2.5.1 ProcessGroupNCCL.cpp (watchdog checkTimeout); https://github.com/snowflakedb/ArcticTraining/issues/219
    'nccl-collective-timeout': ('collective-desync', _TORCHRUN + (
        "[rank2]:[E626 05:06:30.929096625 ProcessGroupNCCL.cpp:632] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=120049, OpType=_ALLGATHER_BASE, NumelIn=16384000, NumelOut=131072000, Timeout(ms)=1800000) ran for 1800065 milliseconds before timing out.\n"
        "[rank2]:[E626 05:06:30.929300000 ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID 0(default_pg) Rank 2]  failure detected by watchdog at work sequence id: 120049 PG status: last enqueued work: 120049, last completed work: 120048\n")),
    # torch v2.5.1 ProcessGroupNCCL.cpp (HeartbeatMonitor); https://github.com/om-ai-lab/VLM-R1/issues/257
    'nccl-watchdog-stuck': ('kernel-hang', _TORCHRUN + (
        "[rank6]:[E429 13:55:49.384372190 ProcessGroupNCCL.cpp:1743] [PG ID 0 PG GUID 0(default_pg) Rank 6] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives. This typically indicates a NCCL/CUDA API (e.g., CudaEventDestroy) hang blocking the watchdog, and could be triggered by another thread holding the GIL inside a CUDA api (for example, CudaEventDestroy), or other deadlock-prone behaviors.If you suspect the watchdog is not actually stuck and a longer timeout would help, you can either increase the timeout (TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC) to a larger value or disable the heartbeat monitor (TORCH_NCCL_ENABLE_MONITORING=0).\n"
        "[rank6]:[E429 13:55:49.384620373 ProcessGroupNCCL.cpp:1533] [PG ID 0 PG GUID 0(default_pg) Rank 6] ProcessGroupNCCL preparing to dump debug info. Include stack trace: 1\n"
        "[rank6]:[F429 14:03:49.385461578 ProcessGroupNCCL.cpp:1554] [PG ID 0 PG GUID 0(default_pg) Rank 6] [PG ID 0 PG GUID 0(default_pg) Rank 6] Terminating the process after attempting to dump debug info, due to ProcessGroupNCCL watchdog hang.\n")),
    # torch v2.2-era wording of the same monitor; https://github.com/Intellindust-AI-Lab/DEIM/issues/105 style
    'nccl-heartbeat-timed-out': ('kernel-hang', (
        "[rank25]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 25] Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=2\n"
        "[rank25]:[E ProcessGroupNCCL.cpp:1153] [PG 0 Rank 25] ProcessGroupNCCL preparing to dump debug info.\n")),
    # torch v2.5.1 c10d socket.cpp; https://github.com/vllm-project/vllm/issues/19670
    'store-connect-timeout': ('config-invalid', (
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.11/site-packages/torch/distributed/rendezvous.py", line 189, in _create_c10d_store\n'
        "    return TCPStore(\n"
        "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to connect to (172.17.0.9, 46229).\n")),
    # torch v2.5.1 c10d TCPStore.cpp (doWait), through vLLM's StatelessProcessGroup; https://github.com/modelscope/ms-swift/issues/4906
    'store-key-wait-timeout': ('collective-desync', (
        '[rank0]:   File "/home/tiger/.local/lib/python3.11/site-packages/vllm/distributed/utils.py", line 197, in broadcast_obj\n'
        "[rank0]:     recv_obj = pickle.loads(self.store.get(key))\n"
        "[rank0]:                             ^^^^^^^^^^^^^^^^^^^\n"
        "[rank0]: torch.distributed.DistStoreError: wait timeout after 300000ms, keys: /broadcast_from/0/75465\n")),
    # torch v2.5.1 distributed_c10d.py (_store_based_barrier); https://github.com/NVIDIA/Megatron-LM/issues/782
    'store-barrier-timeout': ('config-invalid', (
        '  File "/usr/local/lib/python3.8/dist-packages/torch/distributed/distributed_c10d.py", line 350, in _store_based_barrier\n'
        "    raise RuntimeError(\n"
        "RuntimeError: Timed out initializing process group in store based barrier on rank: 0, for key: store_based_barrier_key:1 (world_size=2, worker_count=1, timeout=0:10:00)\n")),
    # torch v2.5.1 ProcessGroupGloo.cpp (monitoredBarrier, rank 0's view); torch distributed docs
    'monitored-barrier-missing': ('collective-desync', (
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 4500, in monitored_barrier\n'
        "[rank0]:     return group_to_use.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)\n"
        "[rank0]: RuntimeError: Rank 1 failed to pass monitoredBarrier in 2000 ms\n")),
    # torch v2.5.1 ProcessGroupGloo.cpp (the other ranks' view); https://github.com/sgl-project/sglang/issues/5602
    'monitored-barrier-peer': ('rank-crashed', (
        "[2025-04-21 04:13:40 TP3] Load weight begin. avail mem=78.52 GB\n"
        "[rank3]:[E421 04:13:43.426633564 ProcessGroupGloo.cpp:143] Rank 3 successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank.\n")),
    # torch v2.5.1 elastic/rendezvous/dynamic_rendezvous.py; https://github.com/ymcui/Chinese-LLaMA-Alpaca-2/issues/274
    'rendezvous-timeout': ('config-invalid', (
        "WARNING:torch.distributed.launcher.api:config has no run_id, generated a random run_id: 174580650467654300307713793029077439978\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", line 1032, in next_rendezvous\n'
        "    self._op_executor.run(join_op, deadline, self._get_deadline)\n"
        "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n")),
    # torch v2.5.1 ProcessGroupNCCL.cpp (heartbeat: the store host is gone), on a run that failed
    'store-server-gone': ('rank-crashed', (
        "(EngineCore_DP0 pid=311) INFO 09-01 07:37:10 [shm_broadcast.py:466] No available shared memory broadcast block found in 60 seconds. This typically happens when some processes are hanging or doing some time-consuming work (e.g. compilation, weight/kv cache quantization).\n"
        "[rank1]:[W901 07:40:19.971184476 ProcessGroupNCCL.cpp:1826] [PG ID 0 PG GUID 0 Rank 1] Failed to check the \"should dump\" flag on TCPStore, (maybe TCPStore server has shut down too early), with error: Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?\n")),
    # torch v2.5.1 ProcessGroupNCCL.cpp (getNCCLWatchdogTimeoutErrorMsg): rank 7 timed out first
    'dump-signal-from-peer': ('collective-desync', (
        "[rank6]:[E703 21:51:54.112142364 ProcessGroupNCCL.cpp:1987] [PG ID 0 PG GUID 0(default_pg) Rank 6] Received a dump signal due to a collective timeout from  rank 7 and we will try our best to dump the debug info. Last enqueued NCCL work: 56116, last completed NCCL work: 56116.This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, the order of collectives is not same for all ranks or the scheduled collective, for some reason, didn't run.\n")),
    # gloo tcp/unbound_buffer.cc; https://github.com/meta-pytorch/torchtune/issues/2676
    'gloo-recv-timeout': ('collective-desync', (
        "[rank2]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete\n")),
    # vLLM v0.8.2 vllm/executor/ray_utils.py (_wait_until_pg_ready); https://github.com/vllm-project/aibrix/issues/927
    'ray-placement-group-wait': ('config-invalid', _VLLM_RAY + (
        "INFO 04-01 02:46:00 ray_utils.py:214] Waiting for creating a placement group of specs for 10 seconds. specs=[{'node:10.163.194.101': 0.001, 'GPU': 1.0}, {'GPU': 1.0}]. Check `ray status` to see if you have enough resources, and make sure the IP addresses used by ray cluster are the same as VLLM_HOST_IP environment variable specified in each node if you are running on a multi-node.\n"
        "INFO 04-01 02:46:20 ray_utils.py:214] Waiting for creating a placement group of specs for 30 seconds. specs=[{'node:10.163.194.101': 0.001, 'GPU': 1.0}, {'GPU': 1.0}]. Check `ray status` to see if you have enough resources, and make sure the IP addresses used by ray cluster are the same as VLLM_HOST_IP environment variable specified in each node if you are running on a multi-node.\n"
        "INFO 04-01 02:47:00 ray_utils.py:214] Waiting for creating a placement group of specs for 70 seconds. specs=[{'node:10.163.194.101': 0.001, 'GPU': 1.0}, {'GPU': 1.0}]. Check `ray status` to see if you have enough resources, and make sure the IP addresses used by ray cluster are the same as VLLM_HOST_IP environment variable specified in each node if you are running on a multi-node.\n")),
    # vLLM v0.10.0 vllm/executor/ray_utils.py (PG_WAIT_TIMEOUT); https://github.com/vllm-project/vllm/pull/11138
    'ray-placement-group-timeout': ('config-invalid', _VLLM_RAY + (
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/executor/ray_utils.py", line 247, in _wait_until_pg_ready\n'
        "    raise ValueError(\n"
        "ValueError: Cannot provide a placement group of placement_group_specs=[{'GPU': 1.0, 'node:10.0.0.1': 0.001}, {'GPU': 1.0}] within 1800 seconds. See `ray status` and `ray list nodes` to make sure the cluster has enough resources.\n")),
    # vLLM v0.6.0 vllm/executor/ray_gpu_executor.py; https://github.com/vllm-project/vllm/issues/12983
    'ray-no-gpu-on-driver': ('config-invalid', _VLLM_RAY + (
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/executor/ray_distributed_executor.py", line 248, in _init_workers_ray\n'
        "    raise ValueError(\n"
        "ValueError: Ray does not allocate any GPUs on the driver node. Consider adjusting the Ray placement group or running the driver on a GPU node.\n")),
    # vLLM v0.10.0 vllm/executor/ray_distributed_executor.py; https://github.com/vllm-project/vllm/pull/7756
    'ray-duplicate-node-ip': ('config-invalid', _VLLM_RAY + (
        "RuntimeError: Every node should have a unique IP address. Got 2 nodes with node ids ['3d1f0a8c', '9b2e4c71'] and 1 unique IP addresses {'10.0.0.5'}. Please check your network configuration. If you set `VLLM_HOST_IP` environment variable, make sure it is unique for each node.\n")),
    # ray-2.40.0 python/ray/_private/utils.py (connect_error); https://github.com/ray-project/ray/issues/37107
    'ray-gcs-unreachable': ('config-invalid', (
        "2023-07-05 16:46:49 2023-07-05 21:46:49,643     INFO worker.py:1429 -- Connecting to existing Ray cluster at address: 172.17.0.2:6379...\n"
        "2023-07-05 16:46:54 2023-07-05 21:46:54,656     ERROR utils.py:1395 -- Failed to connect to GCS. Please check `gcs_server.out` for more details.\n"
        "2023-07-05 16:46:54 2023-07-05 21:46:54,656     WARNING utils.py:1401 -- Unable to connect to GCS (ray head) at 172.17.0.2:6379. Check that (1) Ray with matching version started successfully at the specified address, (2) this node can reach the specified address, and (3) there is no firewall setting preventing access.\n")),
    # Ray src/ray/gcs/gcs_client/global_state_accessor.cc; https://github.com/ray-project/ray/issues/29756
    'ray-node-not-joined': ('config-invalid', (
        "2022-10-27 16:11:06,190 INFO worker.py:1333 -- Connecting to existing Ray cluster at address: 172.23.56.190:6379...\n"
        "[2022-10-27 16:11:06,199 W 27238 27238] global_state_accessor.cc:390: Some processes that the driver needs to connect to have not registered with GCS, so retrying. Have you run 'ray start' on this node?\n"
        "[2022-10-27 16:11:07,201 W 27238 27238] global_state_accessor.cc:390: Some processes that the driver needs to connect to have not registered with GCS, so retrying. Have you run 'ray start' on this node?\n")),
    # NCCL v2.21.5-1 src/transport/net_ib.cc (async event thread); https://github.com/NVIDIA/nccl/issues/905
    'nccl-ib-port-error': ('p2p-transport', (
        "iter 83593: loss 2.6294, time: 6669.64ms, speed: - toks/s/device\n"
        "node-48:34050:34121 [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : port error\n"
        "\n"
        "node-48:34052:34141 [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : port error\n")),
    # SGLang v0.4.10.post2 srt/entrypoints/engine.py; https://github.com/gpustack/gpustack/issues/3848
    'sglang-scheduler-dead': ('rank-crashed', (
        "[12-11 17:47:40] Loading FluxTransformer2DModel, default_dtype: torch.bfloat16\n"
        "[12-11 17:52:52] Rank 0 scheduler is dead. Please check if there are relevant logs.\n")),
    # NCCL v2.21.5-1 src/misc/socket.cc (socketProgress); https://github.com/NVIDIA/nccl/issues/1232
    'nccl-socket-peer-closed': ('rank-crashed', (
        "node0:13571:13571 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n"
        "node0:13571:13571 [0] NCCL INFO Connected all rings\n"
        "\n"
        "node0:13571:13586 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer node2<42830>\n"
        "node0:13571:13586 [0] NCCL INFO misc/socket.cc:749 -> 6\n")),
    # HAMi-core 8b9d5234 src/multiprocess/multiprocess_memory_limit.c; https://github.com/Project-HAMi/HAMi-core/issues/86
    'hami-shrreg-lock': ('interposer', _VLLM_RAY + (
        "[HAMI-core Warn(60:139713597019904:multiprocess_memory_limit.c:552)]: Fail to lock shrreg in 300 seconds\n"
        "[HAMI-core Warn(60:139713597019904:multiprocess_memory_limit.c:541)]: Lock shrreg timeout, try fix (60:161)\n"
        "[HAMI-core Warn(60:139717623192448:multiprocess_memory_limit.c:552)]: Fail to lock shrreg in 300 seconds\n")),
}

HEALTHY: dict[str, str] = {
    # vLLM's Ray executor waits once while a worker node joins, then loads weights and serves
    'ray-placement-group-placed': _VLLM_RAY + (
        "INFO 04-01 02:46:00 ray_utils.py:214] Waiting for creating a placement group of specs for 10 seconds. specs=[{'node:10.163.194.101': 0.001, 'GPU': 1.0}, {'GPU': 1.0}]. Check `ray status` to see if you have enough resources, and make sure the IP addresses used by ray cluster are the same as VLLM_HOST_IP environment variable specified in each node if you are running on a multi-node.\n"
        "INFO 04-01 02:46:25 ray_distributed_executor.py:176] use_ray_spmd_worker: False\n"
        "INFO 04-01 02:46:40 model_runner.py:1110] Starting to load model Qwen/Qwen2.5-7B-Instruct...\n"
        "INFO 04-01 02:47:20 model_runner.py:1115] Loading model weights took 7.1 GiB\n"
        "INFO 04-01 02:47:40 api_server.py:1090] Starting vLLM API server on http://0.0.0.0:8000\n"
        "INFO:     Application startup complete.\n"),
    # a torchrun job that finished: the heartbeat thread's store warning while the ranks exit
    'store-warning-at-clean-exit': _TORCHRUN + (
        "[rank0]: epoch 3 done, saving checkpoint to /ckpt/final\n"
        "[rank3]:[W825 07:38:02.806977494 ProcessGroupNCCL.cpp:1662] [PG ID 0 PG GUID 0(default_pg) Rank 3] Failed to check the \"should dump\" flag on TCPStore, (maybe TCPStore server has shut down too early), with error: failed to recv, got 0 bytes\n"
        "I0825 07:38:03.000000 140 torch/distributed/elastic/agent/server/api.py:879] [default] worker group successfully finished. Waiting 300 seconds for other agents to finish.\n"),
    # HAMi-core's init lock taken after a short wait while several processes start; vLLM serves
    'hami-lock-then-serves': (
        "[HAMI-core Msg(29:129516285003584:libvgpu.c:836)]: Initializing.....\n"
        "[HAMI-core Msg(29:129516285003584:utils.c:27)]: unified_lock locked, waiting 1 second...\n"
        "INFO 05-02 10:00:10 [api_server.py:1043] vLLM API server version 0.8.5\n"
        "INFO 05-02 10:01:40 [gpu_model_runner.py:1329] Model loading took 14.99 GiB and 60.2 seconds\n"
        "INFO 05-02 10:02:30 [api_server.py:1090] Starting vLLM API server on http://0.0.0.0:8000\n"
        "INFO:     Application startup complete.\n"),
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_hang_message_names_its_cause(name: str, tmp_path: Path) -> None:
    expected, text = FIXED[name]
    assert_named(KNOWN, name, expected, text, tmp_path)


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_hang_healthy_run_stays_exit_0(name: str, tmp_path: Path) -> None:
    assert_healthy(name, HEALTHY[name], tmp_path)


def test_every_entry_of_the_file_answers_a_case(tmp_path: Path) -> None:
    """Each entry of known-hangs.toml is the top answer of at least one case above."""
    from sm120kit.diagnose.engine import diagnose
    from tests.diagnose.known_checks import entry_ids
    answered = set()
    for name, (_cat, text) in FIXED.items():
        log = tmp_path / f"{name}.log"
        log.write_text(text)
        res = diagnose([log])
        answered.add(res.findings[0].rule if res.findings else None)
    assert entry_ids(KNOWN) <= answered, sorted(entry_ids(KNOWN) - answered)
