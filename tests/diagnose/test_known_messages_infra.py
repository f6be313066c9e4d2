"""What the layers around a multi-GPU / multi-node run say (catalogue file known-infra.toml):
NCCL's network transports and init, torch.distributed's TCP store, Gloo, the container runtime,
the Kubernetes scheduler, HAMi's GPU-sharing layer and CUDA's compute modes. Each log is the
message in the shape its software prints it (wording from the source named in the comment),
inside the lines a vLLM / torchrun / nccl-tests / docker run prints around it; the top finding
names the category an engineer who knows that software names, and it rests on an entry of
known-infra.toml (without those entries these logs were exit 0, `unknown` or `rank-crashed`).
The NCCL INFO lines and c10d socket warnings of a working run stay exit 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose import catalogue as C
from tests.diagnose.known_checks import assert_healthy, assert_named

KNOWN = Path(C.__file__).resolve().parent / "known-infra.toml"

_VLLM = (
    "INFO 03-10 11:02:00 api_server.py:712] vLLM API server version 0.8.5\n"
    "INFO 03-10 11:02:01 config.py:1005] Defaulting to use ray for distributed inference\n"
    "INFO 03-10 11:02:02 llm_engine.py:240] Initializing a V0 LLM engine (v0.8.5) with config: "
    "model='meta-llama/Llama-3.1-70B-Instruct', tensor_parallel_size=8, pipeline_parallel_size=2\n"
)
_NCCL_INIT = (
    "node-b:20311:20311 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>\n"
    "node-b:20311:20311 [0] NCCL INFO cudaDriverVersion 12040\n"
    "NCCL version 2.21.5+cuda12.4\n"
    "node-b:20311:20398 [0] NCCL INFO NET/IB : No device found.\n"
    "node-b:20311:20398 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>\n"
    "node-b:20311:20398 [0] NCCL INFO Using network Socket\n"
)

# name -> (expected top category, log text); source of the message in the comment above each
FIXED: dict[str, tuple[str, str]] = {
    # NCCL v2.21.5-1 src/transport/net_socket.cc; https://github.com/NVIDIA/nccl/issues/626
    'nccl-socket-truncated': ('collective-desync', _VLLM + _NCCL_INIT + (
        "node-b:20311:20398 [0] NCCL INFO comm 0x5581 rank 8 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0\n"
        "node-b:20311:20402 [0] transport/net_socket.cc:424 NCCL WARN NET/Socket : peer 10.0.0.1<59210> message truncated : receiving 1048576 bytes instead of 65536\n"
        "node-b:20311:20402 [0] NCCL INFO proxy.cc:520 -> 5\n"
        "node-b:20311:20402 [0] NCCL INFO proxy.cc:684 -> 5 [Proxy Thread]\n")),
    # NCCL v2.21.5-1 src/transport/net_ib.cc; https://github.com/NVIDIA/nccl/issues/969
    'nccl-ib-collective-mismatch': ('collective-desync', (
        "10.10.23.10: so-10-10-23-10:1307367:1307367 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.10.23.10<0>\n"
        "10.10.23.10: so-10-10-23-10:1307367:1307586 [0] transport/net_ib.cc:1038 NCCL WARN NET/IB : req 0/1 tag 0 peer 10.10.23.6<58683> collective mismatch error, local size 496640 remote size 65536\n"
        "10.10.23.10: so-10-10-23-10:1307367:1307586 [0] NCCL INFO include/net.h:32 -> 5\n"
        "10.10.23.10: so-10-10-23-10:1307367:1307586 [0] NCCL INFO proxy.cc:684 -> 5 [Proxy Thread]\n")),
    # NCCL v2.21.5-1 src/init.cc (initTransportsRank, the first all-gather)
    'nccl-version-mismatch': ('library-version', _VLLM + _NCCL_INIT + (
        "node-b:20311:20398 [0] init.cc:651 NCCL WARN Mismatched NCCL version detected : rank 8 version 22005 rank 0 version 21805\n"
        "node-b:20311:20398 [0] NCCL INFO init.cc:1501 -> 5\n"
        "(RayWorkerWrapper pid=20311, ip=10.0.0.2) ERROR 03-10 11:03:10 worker_base.py:620] Error executing method 'init_device'. This might cause deadlock in distributed execution.\n")),
    # torch v2.5.1 torch/csrc/distributed/c10d/TCPStore.cpp; https://github.com/OpenRLHF/OpenRLHF/issues/1040
    'tcpstore-clients': ('config-invalid', (
        "[2025-05-29 10:00:01] INFO torchrun: Starting elastic_operator with launch configs: nnodes 2, nproc_per_node 8\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/rendezvous.py", line 189, in _create_c10d_store\n'
        "    return TCPStore(\n"
        "torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 1/3 clients joined.\n")),
    # moby v24.0.7 daemon/devices.go; https://github.com/NVIDIA/nvidia-docker/issues/1034
    'docker-no-gpu-driver': ('config-invalid', (
        "$ docker run --gpus all --ipc=host -p 8000:8000 vllm/vllm-openai:v0.8.5 --model Qwen/Qwen2.5-7B-Instruct\n"
        'docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].\n')),
    # libnvidia-container v1.14.3 (nvc init); https://github.com/NVIDIA/libnvidia-container/issues/231
    'container-no-nvml': ('config-invalid', (
        "$ docker run --gpus all vllm/vllm-openai:v0.8.5 --model Qwen/Qwen2.5-7B-Instruct\n"
        "docker: Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime create failed: "
        "runc create failed: unable to start container process: error during container init: error running hook #0: error running hook: "
        "exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'\n"
        "nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot open shared object file: no such file or directory: unknown.\n")),
    # kubernetes v1.29.0 pkg/scheduler/framework/plugins/noderesources/fit.go; https://github.com/NVIDIA/k8s-device-plugin/issues/430
    'k8s-no-gpu': ('config-invalid', (
        "Events:\n"
        "  Type     Reason            Age   From               Message\n"
        "  ----     ------            ----  ----               -------\n"
        "  Warning  FailedScheduling  2m    default-scheduler  0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.\n")),
    # pytorch/gloo gloo/transport/tcp/pair.cc (GLOO_ENFORCE_LE in prepareRead)
    'gloo-size-mismatch': ('collective-desync', _VLLM + (
        "INFO 03-10 11:05:00 api_server.py:937] Starting vLLM API server on http://0.0.0.0:8000\n"
        "INFO:     Application startup complete.\n"
        "terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
        "  what():  [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:446] op.preamble.length <= op.nbytes. 3096 vs 16\n"
        "*** SIGABRT received at time=1741604710 on cpu 12 ***\n")),
    # HAMi-core src/allocator/allocator.c (oom_check); https://github.com/Project-HAMi/HAMi/issues/1003
    'hami-quota': ('out-of-memory', _VLLM + (
        "[HAMI-core Msg(1046:140457967137280:libvgpu.c:855)]: Initialized\n"
        "INFO 03-10 11:02:30 model_runner.py:1110] Starting to load model meta-llama/Llama-3.1-70B-Instruct...\n"
        "[HAMI-core ERROR (pid:1046 thread=140457967137280 allocator.c:49)]: Device 0 OOM 21244149760 / 20971520000\n")),
    # torch v2.5.1 c10/cuda/CUDAException.cpp with cudaErrorDevicesUnavailable; https://github.com/pytorch/pytorch/issues/3871
    'cuda-busy': ('config-invalid', _VLLM + (
        "(VllmWorkerProcess pid=2417) ERROR 03-10 11:02:30 multiproc_worker_utils.py:233] Exception in worker VllmWorkerProcess while processing method init_device.\n"
        "RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable\n")),
    # NCCL v2.18.3-1 src/misc/ibvwrap.cc; https://github.com/NVIDIA/nccl-tests/issues/185
    'nccl-ibv-modify-qp': ('p2p-transport', (
        "dgxh100-3:225140:225140 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE ; OOB eth0:10.0.0.3<0>\n"
        "dgxh100-3:225140:225355 [0] misc/ibvwrap.cc:187 NCCL WARN Call to ibv_modify_qp failed with error Network is unreachable\n"
        "dgxh100-3:225140:225355 [0] NCCL INFO transport/net_ib.cc:579 -> 2\n"
        "dgxh100-3:225140:225355 [0] NCCL INFO transport/net.cc:728 -> 2\n")),
    # NCCL v2.21.5-1 src/transport/net_socket.cc (init); https://github.com/NVIDIA/nccl/issues/210
    'nccl-socket-no-interface': ('p2p-transport', _VLLM + (
        "node-b:20311:20311 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>\n"
        "node-b:20311:20398 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ib0\n"
        "node-b:20311:20398 [0] NCCL INFO NET/IB : No device found.\n"
        "node-b:20311:20398 [0] transport/net_socket.cc:56 NCCL WARN NET/Socket : no interface found\n"
        "node-b:20311:20398 [0] NCCL INFO net.cc:38 -> 3\n")),
    # torch v2.5.1 torch/distributed/distributed_c10d.py; https://github.com/pytorch/pytorch/issues/159742
    'torch-no-nccl': ('library-version', (
        "Traceback (most recent call last):\n"
        '  File "C:\\Python39\\lib\\site-packages\\torch\\distributed\\distributed_c10d.py", line 1750, in _new_process_group_helper\n'
        '    raise RuntimeError("Distributed package doesn\'t have NCCL built in")\n'
        "RuntimeError: Distributed package doesn't have NCCL built in\n")),
}

HEALTHY: dict[str, str] = {
    # NCCL init.cc / transport INFO lines of a two-node start that completes (NCCL_DEBUG=INFO)
    'nccl-info-working': _VLLM + _NCCL_INIT + (
        "node-b:20311:20398 [0] NCCL INFO comm 0x5581 rank 8 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0\n"
        "node-b:20311:20398 [0] NCCL INFO Channel 00/02 :    0   1   2   3   4   5   6   7   8   9  10  11  12  13  14  15\n"
        "node-b:20311:20398 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [receive] via NET/Socket/0\n"
        "node-b:20311:20398 [0] NCCL INFO Connected all rings\n"
        "node-b:20311:20398 [0] NCCL INFO Connected all trees\n"
        "node-b:20311:20398 [0] NCCL INFO comm 0x5581 rank 8 nranks 16 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x9f2b - Init COMPLETE\n"
        "INFO 03-10 11:05:00 api_server.py:937] Starting vLLM API server on http://0.0.0.0:8000\n"
        "INFO:     Application startup complete.\n"),
    # torch c10d socket.cpp warnings on a host without IPv6: it falls back to IPv4 and goes on
    'c10d-ipv6-warn': _VLLM + (
        "[W socket.cpp:464] [c10d] The server socket cannot be initialized on [::]:29500 (errno: 97 - Address family not supported by protocol).\n"
        "[W socket.cpp:697] [c10d] The client socket cannot be initialized to connect to [localhost]:29500 (errno: 97 - Address family not supported by protocol).\n"
        "INFO 03-10 11:05:00 api_server.py:937] Starting vLLM API server on http://0.0.0.0:8000\n"
        "INFO:     Application startup complete.\n"),
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_infra_message_names_its_cause(name: str, tmp_path: Path) -> None:
    expected, text = FIXED[name]
    assert_named(KNOWN, name, expected, text, tmp_path)


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_infra_healthy_run_stays_exit_0(name: str, tmp_path: Path) -> None:
    assert_healthy(name, HEALTHY[name], tmp_path)
