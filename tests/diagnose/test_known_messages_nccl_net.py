"""What NCCL (its WARN lines and error strings, NVIDIA/nccl src/ at 2.18-2.28) and nccl-tests print
when the network or the bootstrap between the ranks fails or is misconfigured (catalogue file
known-nccl-net.toml). Each log is the message in the shape NCCL prints it (``host:pid:tid [dev]
file:line NCCL WARN ...``), inside the lines a torchrun / vLLM / nccl-tests start prints around
it; the top finding names the category and rests on an entry of known-nccl-net.toml.

Before these entries the same logs were: ``ncclSocketInit ... neither AF_INET``, "No usable
listening interface found", "no device found ... NCCL_OOB_NET_IFNAME", "Bootstrap Root : ...",
"socketStartConnect: exceeded retries", the IB incompatible-device lines, the 2.23+ "async fatal
event" lines and "ibv_reg_mr ... Bad address" `rank-crashed` (0.45, first-dead-rank) or `unknown`
(recorded-failure 0.35); "Invalid NCCL_COMM_ID", "error encountered when getting address info",
"Error: network X not found." and "Failed to initialize any NET plugin" a weak `p2p-transport`
index match (0.45) in the wrong category; nccl-tests' "'remote process exited or there was a
network error / '" `unknown` (0.30); an nccl-tests row with a non-zero #wrong count exit 0.
Messages other files already name (NET/IB completion errors, ibv_modify_qp, "Bootstrap : no
socket interface found", "Duplicate GPU detected", peer access, shared memory) are not repeated.
NCCL_DEBUG=INFO starts that serve, a clean nccl-tests run and the NET/IB "Using" lines stay exit 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose import catalogue as C
from tests.diagnose.known_checks import assert_healthy, assert_named

KNOWN = Path(C.__file__).resolve().parent / "known-nccl-net.toml"

_H = "gpu-node-1:20311:20311 [0] "
_T = "gpu-node-1:20311:20398 [0] "
_INIT = (
    _H + "NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
    + _H + "NCCL INFO cudaDriverVersion 12080\n"
    "NCCL version 2.27.7+cuda12.9\n"
)
_TORCH_FAIL = (
    "[rank0]: Traceback (most recent call last):\n"
    '[rank0]:   File "/workspace/train.py", line 21, in <module>\n'
    "[rank0]:     dist.all_reduce(t)\n"
    "[rank0]: torch.distributed.DistBackendError: NCCL error in: "
    "/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, {err}, NCCL version 2.27.7\n"
    "[rank0]: {name}: {desc}\n[rank0]: Last error:\n[rank0]: {last}\n"
)


def _torch(err: str, name: str, desc: str, last: str) -> str:
    return _TORCH_FAIL.format(err=err, name=name, desc=desc, last=last)


_INTERNAL = ("internal error - please report this issue to the NCCL developers", "ncclInternalError",
             "Internal check failed.")
_SYSTEM = ("unhandled system error (run with NCCL_DEBUG=INFO for details)", "ncclSystemError",
           "System call (e.g. socket, malloc) or external library call failed or device error.")
_USAGE = ("invalid usage (run with NCCL_DEBUG=WARN for details)", "ncclInvalidUsage",
          "This usually reflects invalid usage of NCCL library.")
_REMOTE = ("remote process exited or there was a network error", "ncclRemoteError",
           "A call failed possibly due to a network error or a remote process exiting prematurely.")

_NT_HEAD = (
    "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 134217728 step: 2(factor) warmup iters: 5 "
    "iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n"
    "#  Rank  0 Group  0 Pid  20311 on gpu-node-1 device  0 [0x1b] NVIDIA H100 80GB HBM3\n"
    "#  Rank  1 Group  0 Pid  20312 on gpu-node-2 device  0 [0x1b] NVIDIA H100 80GB HBM3\n#\n"
    "#                                                              out-of-place                 "
    "      in-place          \n"
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time"
    "   algbw   busbw #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)"
    "  (GB/s)  (GB/s)       \n"
)

# name -> (expected category, log text); the source that prints the message above each
FIXED: dict[str, tuple[str, str]] = {
    # nccl v2.27.7-1 src/misc/socket.cc (ncclSocketInit); NVIDIA/nccl#1837
    "socket-address-unset": ("config-invalid", (
        _H + "NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth2\n"
        + _H + "NCCL INFO NCCL_SOCKET_IFNAME set to eth2\n"
        + _T + "misc/socket.cc:815 NCCL WARN ncclSocketInit: connecting to address  with family "
        "59936 is neither AF_INET(2) nor AF_INET6(10)\n"
        + _T + "NCCL INFO misc/socket.cc:844 -> 3\n"
        + _torch(*_INTERNAL, "ncclSocketInit: connecting to address  with family 59936 is "
                 "neither AF_INET(2) nor AF_INET6(10)"))),
    # nccl v2.21.5-1 src/bootstrap.cc (bootstrapNetInit with NCCL_COMM_ID)
    "comm-id-no-local-subnet": ("config-invalid", (
        _H + "NCCL INFO NCCL_COMM_ID set by environment to 10.1.0.5:29500\n"
        + _H + "misc/socket.cc:238 NCCL WARN Net : No interface found in the same subnet as "
        "remote address 10.1.0.5<29500>\n"
        + _H + "bootstrap.cc:41 NCCL WARN NET/Socket : No usable listening interface found\n"
        + _torch(*_SYSTEM, "NET/Socket : No usable listening interface found"))),
    # nccl v2.24.3-1 src/bootstrap.cc (NCCL_OOB_NET_IFNAME)
    "oob-ifname-matches-nothing": ("config-invalid", (
        _INIT + _T + "bootstrap.cc:516 NCCL WARN no device found matching exactly mlx5_9, verify "
        "NCCL_OOB_NET_IFNAME\n"
        + _T + "NCCL INFO bootstrap.cc:540 -> 2\n"
        + _torch(*_SYSTEM, "no device found matching exactly mlx5_9, verify NCCL_OOB_NET_IFNAME"))),
    # nccl v2.27.7-1 src/bootstrap.cc + src/misc/socket.cc (ncclSocketGetAddrFromString)
    "comm-id-unparsable": ("config-invalid", (
        _H + "NCCL INFO NCCL_COMM_ID set by environment to master-0:29500\n"
        + _H + "misc/socket.cc:295 NCCL WARN Net : error encountered when getting address info : "
        "Name or service not known\n"
        + _H + "bootstrap.cc:101 NCCL WARN Invalid NCCL_COMM_ID, please use format: <ipv4>:<port> "
        "or [<ipv6>]:<port> or <hostname>:<port>\n"
        + _torch("invalid argument (run with NCCL_DEBUG=WARN for details)", "ncclInvalidArgument",
                 "Invalid value for an argument.",
                 "Invalid NCCL_COMM_ID, please use format: <ipv4>:<port> or [<ipv6>]:<port> or "
                 "<hostname>:<port>"))),
    # nccl v2.18.3-1 src/bootstrap.cc (bootstrapRoot); pytorch/pytorch#46248
    "bootstrap-rank-count": ("config-invalid", (
        _INIT + "taurusml26:67298:67330 [0] bootstrap.cc:190 NCCL WARN Bootstrap Root : mismatch "
        "in rank count from procs 6 : 3\n"
        + _torch(*_INTERNAL, "Bootstrap Root : mismatch in rank count from procs 6 : 3"))),
    # nccl v2.27.7-1 src/bootstrap.cc (bootstrapRoot): a rank number twice
    "bootstrap-rank-twice": ("config-invalid", (
        _INIT + _T + "bootstrap.cc:322 NCCL WARN Bootstrap Root : rank 3 of 16 ranks has already "
        "checked in\n" + _torch(*_INTERNAL, "Bootstrap Root : rank 3 of 16 ranks has already "
                                "checked in"))),
    # nccl v2.27.7-1 src/transport/net_ib.cc (ncclIbMakeVDeviceInternal)
    "ib-mixed-link-layers": ("config-invalid", (
        _INIT + _T + "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/RoCE "
        "[RO]; OOB eth0:10.0.0.1<0>\n"
        + _T + "transport/net_ib.cc:588 NCCL WARN NET/IB : Attempted to merge incompatible "
        "devices: [0]mlx5_0:1/IB and [2]mlx5_2:1/RoCE. Try selecting NICs of only one link type "
        "using NCCL_IB_HCA\n" + _torch(*_USAGE, "NET/IB : Attempted to merge incompatible "
                                       "devices"))),
    # nccl v2.21.5-1 src/net.cc (ncclNetInit); aws-ofi-nccl missing
    "net-plugin-not-found": ("library-version", (
        _H + "NCCL INFO NCCL_NET set by environment to AWS Libfabric\n"
        + _H + "NCCL INFO NET/Plugin: Could not find: libnccl-net-ofi.so. Using internal net "
        "plugin.\n" + _INIT
        + "nid006352:34157:34217 [1] net.cc:626 NCCL WARN Error: network AWS Libfabric not found.\n"
        + _torch(*_USAGE, "Error: network AWS Libfabric not found."))),
    # nccl v2.27.7-1 src/plugin/net.cc (ncclNetInit)
    "net-plugin-none-initialised": ("library-version", (
        _H + "NCCL INFO NCCL_NET set by environment to IBext\n" + _INIT
        + _T + "plugin/net.cc:278 NCCL WARN Failed to initialize any NET plugin\n"
        + _torch(*_USAGE, "Failed to initialize any NET plugin"))),
    # nccl v2.21.5-1 src/misc/socket.cc (socketStartConnect)
    "socket-retries-exhausted": ("p2p-transport", (
        _INIT + _T + "NCCL INFO Call to connect returned Connection refused, retrying\n"
        + _T + "misc/socket.cc:467 NCCL WARN socketStartConnect: exceeded retries (20)\n"
        + _T + "NCCL INFO misc/socket.cc:566 -> 6\n"
        + _torch(*_REMOTE, "socketStartConnect: exceeded retries (20)"))),
    # nccl v2.27.7-1 src/misc/socket.cc (socketTryAccept)
    "socket-accept-retries": ("p2p-transport", (
        _INIT + _T + "misc/socket.cc:449 NCCL WARN socketTryAccept: exceeded error retry count "
        "after 35 attempts, Connection timed out\n"
        + _torch(*_SYSTEM, "socketTryAccept: exceeded error retry count after 35 attempts"))),
    # nccl v2.27.7-1 src/transport/net_ib.cc (ncclIbAsyncThreadMain); NVIDIA/nccl#1905
    "ib-async-fatal-event": ("p2p-transport", (
        _INIT + "h100-28:238:1219 [0] transport/net_ib.cc:180 NCCL WARN NET/IB : mlx5_ib0:1 async "
        "fatal event on QP (0x7f69f01519a8): local access violation work queue error\n"
        "h100-28:238:1313 [0] transport/net_ib.cc:139 NCCL WARN communicator encountered a fatal "
        "error (detected in ncclIbTest)\n"
        + _torch(*_REMOTE, "communicator encountered a fatal error (detected in ncclIbTest)"))),
    # nccl v2.21.5-1 src/transport/net_ib.cc (2.19-2.22 wording); NVIDIA/nccl#1710
    "ib-async-wq-error-old": ("p2p-transport", (
        _INIT + "node201:127799:127863 [0] transport/net_ib.cc:101 NCCL WARN NET/IB : mlx5_0:1 Got "
        "async event : local access violation work queue error\n"
        "[rank0]:[E1216 10:02:11.123456 ProcessGroupNCCL.cpp:1595] [PG 0 Rank 0] Process group "
        "watchdog thread terminated with exception: NCCL error: remote process exited or there "
        "was a network error, NCCL version 2.21.5\n")),
    # nccl v2.27.7-1 src/misc/ibvwrap.cc (IBV_PTR_CHECK_ERRNO "ibv_reg_mr_iova2")
    "ib-gpu-buffer-registration": ("p2p-transport", (
        _INIT + _T + "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.1<0>\n"
        + _T + "misc/ibvwrap.cc:188 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Bad "
        "address\n" + _T + "NCCL INFO transport/net_ib.cc:1873 -> 2\n"
        + _torch(*_SYSTEM, "Call to ibv_reg_mr_iova2 failed with error Bad address"))),
    # nccl-tests v2.17.9 src/util.cu (writeBenchmarkLineBody): #wrong > 0 in a row, run cut off
    "nccl-tests-row-wrong": ("p2p-transport", (
        _NT_HEAD
        + "     1048576        262144     float     sum      -1    62.31   16.83   29.45      0"
          "    61.90   16.94   29.65      0\n"
        + "     2097152        524288     float     sum      -1    98.11   21.38   37.41   1024"
          "    97.52   21.50   37.63      0\n")),
    # nccl-tests v2.17.9 src/common.h (NCCLCHECK) with ncclRemoteError's string; nccl-tests#252
    "nccl-tests-remote-error": ("p2p-transport", (
        _NT_HEAD
        + "     1048576        262144     float     sum      -1    62.31   16.83   29.45      0"
          "    61.90   16.94   29.65      0\n"
        + "kolyoz2: Test NCCL failure common.cu:1005 'remote process exited or there was a network"
          " error / '\n .. kolyoz2 pid 25146: Test failure common.cu:1005\n")),
}

_SERVE = (
    "INFO 06-10 09:14:40 [api_server.py:1457] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
    "INFO:     Started server process [5012]\nINFO:     Waiting for application startup.\n"
    "INFO:     Application startup complete.\n"
)

# name -> log that must stay exit 0
HEALTHY: dict[str, str] = {
    # an NCCL_DEBUG=INFO start of a two-GPU vLLM that serves (sockets, P2P, no plugin found)
    "nccl-info-start-serves": (
        "INFO 06-10 09:12:03 [api_server.py:1395] vLLM API server version 0.9.1\n"
        + _INIT
        + _H + "NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.\n"
        + _T + "NCCL INFO Failed to open libibverbs.so[.1]\n"
        + _T + "NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n"
        + _T + "NCCL INFO Using network Socket\n"
        + _T + "NCCL INFO comm 0x55d1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId "
        "0x3f2a - Init START\n"
        + _T + "NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n"
        + _T + "NCCL INFO Connected all rings, use ring PXN 0 GDR 1\n"
        + _T + "NCCL INFO ncclCommInitRank comm 0x55d1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId "
        "1b000 commId 0x3f2a - Init COMPLETE\n" + _SERVE),
    # a two-node nccl-tests run: NET/IB Using lines, #wrong 0 everywhere, the summary OK
    "nccl-tests-clean": (
        _T + "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>\n"
        + _T + "NCCL INFO Using network IB\n"
        + _T + "NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA\n"
        + _NT_HEAD
        + "     1048576        262144     float     sum      -1    62.31   16.83   29.45      0"
          "    61.90   16.94   29.65      0\n"
        + "     2097152        524288     float     sum      -1    98.11   21.38   37.41      0"
          "    97.52   21.50   37.63      0\n"
        + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 33.535 \n#\n"),
    # NET/IB picks its ports over RoCE with a GID index and the job runs (INFO lines only)
    "net-ib-roce-using": (
        _H + "NCCL INFO NCCL_IB_GID_INDEX set by environment to 3.\n" + _INIT
        + _T + "NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB "
        "bond0:172.36.134.184<0>\n"
        + _T + "NCCL INFO Using network IB\n"
        + _T + "NCCL INFO ncclCommInitRank comm 0x55d1 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId "
        "1b000 commId 0x3f2a - Init COMPLETE\n"),
    # a port coming back (a non-fatal async event NCCL logs) in a run that keeps going
    "ib-port-active-event": (
        _INIT + _T + "transport/net_ib.cc:199 NCCL WARN NET/IB : mlx5_0:1 Got async error event: "
        "port active\n" + _T + "NCCL INFO ncclCommInitRank comm 0x55d1 rank 0 nranks 16 cudaDev 0 "
        "nvmlDev 0 busId 1b000 commId 0x3f2a - Init COMPLETE\n"),
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_nccl_net_message_names_its_cause(name: str, tmp_path: Path) -> None:
    expected, text = FIXED[name]
    assert_named(KNOWN, name, expected, text, tmp_path)


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_nccl_net_healthy_run_stays_exit_0(name: str, tmp_path: Path) -> None:
    assert_healthy(name, HEALTHY[name], tmp_path)


def test_every_entry_has_a_case() -> None:
    """Each entry of known-nccl-net.toml is exercised by at least one log above (the advice entry
    by a healthy one)."""
    from sm120kit.diagnose.catalogue.schema import parse_file
    texts = "\n".join([t for _, t in FIXED.values()] + list(HEALTHY.values()))
    missing = [e.id for e in parse_file(KNOWN) if not any(e.match(ln) for ln in texts.splitlines())]
    assert not missing, missing
