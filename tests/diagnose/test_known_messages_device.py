"""What the GPU, its driver, the CUDA runtime and the network under NCCL say (catalogue file
known-device.toml): CUDA runtime / driver error strings (the wording libcudart's
cudaGetErrorString returns, printed by torch as "CUDA error: %s" and by NCCL as "Cuda failure
'%s'"), the kernel driver's NVRM Xid lines, NVML's errors, NCCL's socket / P2P / proxy WARN lines
and the mlx5 verbs provider's error completion. Each log is the message in the shape its
software prints it (wording from the source named in the comment), inside the lines a vLLM /
nccl-tests / dmesg excerpt prints around it; the top finding names the category an engineer who
knows that software names, and it rests on an entry of known-device.toml (without those entries
these logs were `rank-crashed`, `unknown`, exit 0, or an index match at 0.45). The NCCL INFO
lines of working runs (interfaces, NET/IB, P2P/IPC, a docker0 bootstrap on one node) stay exit 0.
No GPU fault can be raised on this machine: the logs are the lines the software prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose import catalogue as C
from tests.diagnose.known_checks import assert_healthy, assert_named

KNOWN = Path(C.__file__).resolve().parent / "known-device.toml"

_VLLM = (
    "INFO 05-12 09:14:02 [api_server.py:1043] vLLM API server version 0.9.1\n"
    "INFO 05-12 09:14:10 [config.py:1472] Using max model len 32768\n"
    "INFO 05-12 09:14:12 [core.py:69] Initializing a V1 LLM engine (v0.9.1) with config: "
    "model='Qwen/Qwen3-32B', tensor_parallel_size=4\n"
)
# a worker's start failing in torch.cuda.set_device, then the CUDA error line (torch
# c10/cuda/CUDAException.cpp: "CUDA error: " + cudaGetErrorString) and torch's hints
_TB = (
    "ERROR 05-12 09:15:01 [multiproc_executor.py:487] WorkerProc failed to start.\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/multiproc_executor.py", '
    "line 461, in worker_main\n"
    "    worker = WorkerProc(*args, **kwargs)\n"
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", line 160, '
    "in init_device\n"
    "    torch.cuda.set_device(self.device)\n"
)
_HINT = (
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)
_NCCL_INIT = (
    "gpu-node-1:20311:20311 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>\n"
    "gpu-node-1:20311:20311 [0] NCCL INFO cudaDriverVersion 12080\n"
    "NCCL version 2.26.2+cuda12.8\n"
)
_NCCL_TESTS = (
    "# nThread 1 nGpus 2 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 "
    "agg iters: 1 validation: 1 graph: 0\n"
    "#\n"
    "# Using devices\n"
    "#  Rank  0 Group  0 Pid  33207 on      node1 device  0 [0x1b] NVIDIA RTX PRO 6000 Blackwell "
    "Workstation Edition\n"
    "#  Rank  1 Group  0 Pid  33207 on      node1 device  1 [0x3b] NVIDIA RTX PRO 6000 Blackwell "
    "Workstation Edition\n"
)


def _cuda(msg: str) -> str:
    return _VLLM + _TB + f"RuntimeError: CUDA error: {msg}\n" + _HINT


# name -> (expected top category, log text); source of the message in the comment above each
FIXED: dict[str, tuple[str, str]] = {
    # CUDA runtime cudaErrorECCUncorrectable (libcudart 12.9 / 13.0 string); vllm-project/vllm#5222
    'cuda-ecc': ('kernel-hang', _cuda("uncorrectable ECC error encountered")),
    # open-gpu-kernel-modules nverror.h (Xid 94 contained ECC); the CUDA error comes first
    'xid-94-ecc': ('kernel-hang', _cuda("an illegal memory access was encountered") + (
        "$ dmesg | grep NVRM\n"
        "[ 9384.110287] NVRM: Xid (PCI:0000:9b:00): 94, pid=20311, name=python3, Contained ECC error\n")),
    # nverror.h ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS (79); NVIDIA/open-gpu-kernel-modules#507
    'xid-79': ('kernel-hang', _cuda("unspecified launch failure") + (
        "$ dmesg | grep -i nvrm\n"
        "[ 9384.110290] NVRM: Xid (PCI:0000:c1:00): 79, pid='<unknown>', name=<unknown>, GPU has "
        "fallen off the bus.\n"
        "[ 9384.110293] NVRM: GPU 0000:c1:00.0: GPU has fallen off the bus.\n")),
    # vLLM's bundled pynvml (vllm/third_party/pynvml.py, v0.10.0: NVMLError_<Name> classes)
    'nvml-gpu-lost': ('kernel-hang', _VLLM + (
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/platforms/cuda.py", line 487, in '
        "get_device_capability\n"
        "    handle = pynvml.nvmlDeviceGetHandleByIndex(physical_device_id)\n"
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/third_party/pynvml.py", line 2609, '
        "in nvmlDeviceGetHandleByIndex\n"
        "    _nvmlCheckReturn(ret)\n"
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/third_party/pynvml.py", line 1047, '
        "in _nvmlCheckReturn\n"
        "    raise NVMLError(ret)\n"
        "vllm.third_party.pynvml.NVMLError_GpuIsLost: GPU is lost\n")),
    # open-gpu-kernel-modules GSP RPC timeout (Xid 119)
    'xid-119-gsp': ('kernel-hang', _VLLM + (
        "INFO 05-12 09:20:31 [gpu_model_runner.py:1595] Starting to load model Qwen/Qwen3-32B...\n"
        "[ 1843.308145] NVRM: Xid (PCI:0000:01:00): 119, pid=20311, name=python3, Timeout after 6s "
        "of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) "
        "(0x20800a4c 0x4).\n")),
    # CUDA runtime cudaErrorHardwareStackError
    'cuda-hw-stack': ('kernel-hang', _cuda("hardware stack error")),
    # CUDA runtime cudaErrorNvlinkUncorrectable; pytorch/pytorch#58155
    'cuda-nvlink': ('p2p-transport', _cuda("uncorrectable NVLink error detected during the execution")),
    # CUDA runtime cudaErrorTooManyPeers; NVIDIA/nccl#51
    'cuda-too-many-peers': ('p2p-transport', _cuda("peer mapping resources exhausted")),
    # CUDA runtime cudaErrorContained
    'cuda-contained': ('p2p-transport', _cuda(
        "Invalid access of peer GPU memory over nvlink or a hardware error")),
    # NCCL v2.27.7-1 src/transport/p2p.cc (p2pMap: cudaDeviceEnablePeerAccess)
    'nccl-enable-peer': ('p2p-transport', _NCCL_TESTS + (
        "node1:33207:33207 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
        "NCCL version 2.27.7+cuda12.9\n"
        "node1:33207:33230 [1] transport/p2p.cc:333 NCCL WARN failed to peer with device 0(=1b000): "
        "217 peer access is not supported between these two devices\n"
        "node1:33207:33230 [1] NCCL INFO transport/p2p.cc:378 -> 3\n"
        "node1: Test NCCL failure common.cu:1027 'internal error - please report this issue to the "
        "NCCL developers / '\n")),
    # NCCL v2.27.7-1 src/transport/p2p.cc + include/checks.h (CUDACHECK of cudaIpcOpenMemHandle)
    'nccl-p2p-cuda': ('p2p-transport', _VLLM + _NCCL_INIT + (
        "gpu-node-1:20311:20398 [0] transport/p2p.cc:401 NCCL WARN Cuda failure 'invalid argument'\n"
        "gpu-node-1:20311:20398 [0] NCCL INFO transport/p2p.cc:409 -> 1\n"
        "gpu-node-1:20311:20398 [0] NCCL INFO transport.cc:183 -> 1\n")),
    # NCCL v2.27.7-1 src/misc/ipcsocket.cc and src/proxy.cc (cuMem fd exchange over UDS)
    'nccl-uds': ('p2p-transport', _VLLM + _NCCL_INIT + (
        "gpu-node-1:20311:20398 [0] misc/ipcsocket.cc:221 NCCL WARN UDS: Sending data over socket "
        "/tmp/nccl-socket-4-3a5f0c2d failed : Connection refused (111)\n"
        "gpu-node-1:20311:20398 [0] proxy.cc:1208 NCCL WARN ncclProxyClientGetFd call to tpRank 1 "
        "handle 0x7f3a00000012 failed : 2\n")),
    # NCCL v2.21.5-1 src/misc/socket.cc (ncclSocketInit); NVIDIA/nccl#210
    'nccl-af-unsupported': ('p2p-transport', _VLLM + _NCCL_INIT + (
        "gpu-node-1:20311:20398 [0] misc/socket.cc:728 NCCL WARN ncclSocketInit: Socket creation "
        "failed : Address family not supported by protocol\n"
        "gpu-node-1:20311:20398 [0] NCCL INFO misc/socket.cc:491 -> 2\n")),
    # NCCL v2.27.7-1 src/misc/socket.cc (socketConnectCheck, retries exhausted)
    'nccl-connect-retries': ('p2p-transport', _VLLM + _NCCL_INIT + (
        "gpu-node-1:20311:20398 [0] misc/socket.cc:578 NCCL WARN socketPollConnect: connect to "
        "10.0.0.3<35421> returned Connection refused, exceeded error retry count after 35 "
        "attempts\n"
        "gpu-node-1:20311:20398 [0] NCCL INFO misc/socket.cc:620 -> 6\n")),
    # NCCL's interface choice (misc/socket.cc) beside torch's watchdog timeout of the first
    # all-reduce (a stall): the bridge address does not route between the two nodes
    'nccl-bridge-stall': ('config-invalid', _VLLM + (
        "node1:2451:2451 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.1<0>\n"
        "node1:2451:2451 [0] NCCL INFO cudaDriverVersion 12080\n"
        "NCCL version 2.26.2+cuda12.8\n"
        "node1:2451:2510 [0] NCCL INFO NET/IB : No device found.\n"
        "node1:2451:2510 [0] NCCL INFO NET/Socket : Using [0]docker0:172.17.0.1<0>\n"
        "node1:2451:2510 [0] NCCL INFO Using network Socket\n"
        "node1:2451:2510 [0] NCCL INFO comm 0x5581 rank 0 nRanks 16 nNodes 2 localRanks 8 "
        "localRank 0 MNNVL 0\n"
        "[rank0]:[E ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
        "ran for 600010 milliseconds before timing out.\n")),
    # rdma-core v50.0 providers/mlx5/cq.c (error CQE dump)
    'mlx5-error-cqe': ('p2p-transport', _VLLM + _NCCL_INIT + (
        "gpu-node-1:20311:20402 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.2<0>\n"
        "mlx5: gpu-node-1: got completion with error:\n"
        "00000000 00000000 00000000 00000000\n"
        "00000000 00000000 00000000 00000000\n"
        "00000001 00000000 00000000 00000000\n"
        "00000000 00008914 100000f7 00005ad2\n")),
    # torch 1.x aten/src/THC/THCGeneral.cpp (THCudaCheck) with cudaErrorNoDevice; slczgwh/REDN#5
    'cuda-no-device': ('config-invalid', (
        "THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=50 error=100 : no "
        "CUDA-capable device is detected\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 67, in <module>\n'
        "    model = model.cuda()\n"
        "RuntimeError: cuda runtime error (100) : no CUDA-capable device is detected at "
        "/pytorch/aten/src/THC/THCGeneral.cpp:50\n")),
    # NCCL include/checks.h with cudaErrorStubLibrary (34); horovod/horovod#3831
    'cuda-stub': ('config-invalid', _NCCL_TESTS + (
        "node1:33207:33207 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
        "node1:33207:33207 [0] init.cc:1920 NCCL WARN Cuda failure 'CUDA driver is a stub library'\n"
        "node1: Test NCCL failure common.cu:1027 'unhandled cuda error (run with NCCL_DEBUG=INFO "
        "for details) / '\n")),
    # CUDA runtime cudaErrorCallRequiresNewerDriver (36); NVIDIA/nccl#955
    'cuda-newer-driver': ('library-version', _cuda(
        "API call is not supported in the installed CUDA driver")),
    # CUDA runtime cudaErrorDeviceNotLicensed (102)
    'cuda-grid-license': ('config-invalid', _cuda("device doesn't have valid Grid license")),
    # CUDA runtime cudaErrorMpsConnectionFailed (805)
    'cuda-mps': ('config-invalid', _cuda(
        "MPS client failed to connect to the MPS control daemon or the MPS server")),
    # vLLM's bundled pynvml (v0.10.0) with NVML_ERROR_LIB_RM_VERSION_MISMATCH; vllm-project/vllm#29737
    'nvml-rm-mismatch': ('library-version', _VLLM + (
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/third_party/pynvml.py", line 1047, '
        "in _nvmlCheckReturn\n"
        "    raise NVMLError(ret)\n"
        "vllm.third_party.pynvml.NVMLError_LibRmVersionMismatch: RM has detected an NVML/RM "
        "version mismatch.\n")),
    # vLLM's bundled pynvml (v0.10.0, _LoadNvmlLibrary) without libnvidia-ml.so.1
    'nvml-library-not-found': ('config-invalid', _VLLM + (
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/third_party/pynvml.py", line 2422, '
        "in _LoadNvmlLibrary\n"
        "    _nvmlCheckReturn(NVML_ERROR_LIBRARY_NOT_FOUND)\n"
        "vllm.third_party.pynvml.NVMLError_LibraryNotFound: NVML Shared Library Not Found\n")),
    # NVML in a container that lost its devices; NVIDIA/nvidia-container-toolkit#48
    'nvml-unknown': ('config-invalid', (
        "$ docker exec -it vllm-server nvidia-smi\n"
        "Failed to initialize NVML: Unknown Error\n")),
}

HEALTHY: dict[str, str] = {
    # nccl-tests all_reduce_perf over two nodes (NET/IB with GPUDirect RDMA, P2P/IPC inside a
    # node) that completes with no wrong values
    'nccl-tests-ib-pass': _NCCL_TESTS + (
        "node1:33207:33207 [0] NCCL INFO Bootstrap : Using bond0:10.0.0.1<0>\n"
        "node1:33207:33207 [0] NCCL INFO NET/Plugin: No plugin found (libnccl-net.so)\n"
        "node1:33207:33207 [0] NCCL INFO cudaDriverVersion 12080\n"
        "NCCL version 2.26.2+cuda12.8\n"
        "node1:33207:33230 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB "
        "bond0:10.0.0.1<0>\n"
        "node1:33207:33230 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'\n"
        "node1:33207:33230 [0] NCCL INFO Using network IB\n"
        "node1:33207:33230 [0] NCCL INFO comm 0x55d0 rank 0 nRanks 4 nNodes 2 localRanks 2 "
        "localRank 0 MNNVL 0\n"
        "node1:33207:33230 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read\n"
        "node1:33207:33230 [0] NCCL INFO Channel 00/0 : 3[1] -> 0[0] [receive] via NET/IB/0/GDRDMA\n"
        "node1:33207:33230 [0] NCCL INFO Connected all rings\n"
        "node1:33207:33230 [0] NCCL INFO Connected all trees\n"
        "node1:33207:33230 [0] NCCL INFO ncclCommInitRank comm 0x55d0 rank 0 nranks 4 cudaDev 0 "
        "nvmlDev 0 busId 1b000 commId 0x9f2b - Init COMPLETE\n"
        "#\n"
        "#                                                              out-of-place                       in-place\n"
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n"
        "           8             2     float     sum      -1    30.12    0.00    0.00      0    29.87    0.00    0.00      0\n"
        "   134217728      33554432     float     sum      -1   1402.3   95.71  143.57      0   1398.7   95.96  143.94      0\n"
        "# Out of bounds values : 0 OK\n"
        "# Avg bus bandwidth    : 62.1234\n"
        "#\n"),
    # one node, NCCL bootstrapping over docker0 (fine where every rank is on this host), a
    # vLLM start that reaches serving
    'docker0-single-node': _VLLM + (
        "node1:2451:2451 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.2<0>\n"
        "NCCL version 2.26.2+cuda12.8\n"
        "node1:2451:2510 [0] NCCL INFO NET/Socket : Using [0]docker0:172.17.0.2<0>\n"
        "node1:2451:2510 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
        "node1:2451:2510 [0] NCCL INFO comm 0x5581 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId "
        "1b000 commId 0x9f2b - Init COMPLETE\n"
        "INFO 05-12 09:16:00 [api_server.py:1090] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
        "INFO:     Application startup complete.\n"),
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_device_message_names_its_cause(name: str, tmp_path: Path) -> None:
    expected, text = FIXED[name]
    assert_named(KNOWN, name, expected, text, tmp_path)


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_device_healthy_run_stays_exit_0(name: str, tmp_path: Path) -> None:
    assert_healthy(name, HEALTHY[name], tmp_path)
