"""The interposer rule (a GPU-sharing hook named beside a failed multi-GPU start) and the
config-banner-only paste (not a position where a run stopped). Real line wordings, sources cited."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose import catalogue as C
from sm120kit.diagnose.engine import diagnose

# vLLM v1/engine/utils.py wait_for_engine_startup (0.10 .. 0.11): the API server's last words when
# an engine core process died during startup
ENGINE_FAILED = ("(APIServer pid=1) RuntimeError: Engine core initialization failed. See root "
                 "cause above. Failed core proc(s): {}")
# https://github.com/Project-HAMi/HAMi/issues/1479 (the report's first sentence, shortened)
HAMI_PROSE = ("When running vLLM 0.11.0 with tensor parallelism across two GPUs in a Kubernetes "
              "cluster managed by HAMi 2.7.0, initialization fails with NCCL / TCPStore "
              "connection errors, ending with:")
# vLLM 0.8.x llm_engine.py: the V0 engine's config echo (vllm-project/vllm#8031 pastes one)
BANNER = ("INFO 04-11 12:37:49 [llm_engine.py:242] Initializing a V0 LLM engine (v0.8.3) with "
          "config: model='mistralai/Mistral-Small-3.1-24B-Instruct-2503', tensor_parallel_size=2, "
          "pipeline_parallel_size=1, disable_custom_all_reduce=False, enforce_eager=False")


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "report.txt"
    p.write_text(text)
    return p


def test_gpu_sharing_layer_beside_a_failed_start_is_named(tmp_path: Path) -> None:
    p = _write(tmp_path, f"{HAMI_PROSE}\n\n```\n{ENGINE_FAILED}\n```\n")
    res = diagnose([p])
    assert res.exit_code == 1
    top = res.findings[0]
    assert top.category == "interposer" and 0.5 <= top.confidence < 0.8, top
    assert "HAMi 2.7.0" in top.evidence[0].text


def test_volcano_vgpu_plugin_is_a_gpu_sharing_layer(tmp_path: Path) -> None:
    # https://github.com/volcano-sh/volcano-vgpu-device-plugin/issues/108
    prose = ("When running vLLM 0.15.1 with tensor parallelism across two GPUs in a Kubernetes "
             "cluster managed by volcano 1.14.1 with volcano-vgpu-device-plugin 1.11.0, "
             "initialization fails")
    res = diagnose([_write(tmp_path, f"{prose}\n\n```\n{ENGINE_FAILED}\n```\n")])
    assert res.findings[0].category == "interposer"


def test_gpu_sharing_layer_on_a_healthy_run_is_not_a_cause(tmp_path: Path) -> None:
    """Named, but the server came up and served: no interposer finding at >= 0.5."""
    log = "\n".join([
        "[HAMI-core Msg(57:140198:libvgpu.c:836)]: Initializing.....",
        "INFO 05-01 10:00:00 [api_server.py:1024] Starting vLLM API server 0 on http://0.0.0.0:8000",
        "INFO:     Application startup complete.",
        "INFO 05-01 10:00:10 [loggers.py:122] Engine 000: Avg prompt throughput: 12.0 tokens/s, "
        "Avg generation throughput: 30.1 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV "
        "cache usage: 0.4%, Prefix cache hit rate: 0.0%",
    ])
    res = diagnose([_write(tmp_path, log + "\n")])
    assert not [f for f in res.findings if f.category == "interposer" and f.confidence >= 0.5]


def test_a_pasted_config_echo_alone_is_not_where_a_run_stopped(tmp_path: Path) -> None:
    res = diagnose([_write(tmp_path, f"This is the full log:\n\n```\n{BANNER}\n```\n")])
    assert res.exit_code == 0 and res.verdict.startswith("progressing"), res.verdict


def test_a_paste_that_stops_inside_nccl_init_is_still_reported(tmp_path: Path) -> None:
    """The banner test must not hide a real stop: NCCL init lines after it keep the finding."""
    # vllm-project/vllm#8058 (vLLM 0.5.x pynccl.py and NCCL 2.20 bootstrap lines)
    lines = [BANNER,
             "INFO 08-31 09:50:46 utils.py:975] Found nccl from library libnccl.so.2",
             "INFO 08-31 09:50:46 pynccl.py:63] vLLM is using nccl==2.20.5",
             "node1:820:820 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
             "node1:820:820 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
             "node1:820:820 [0] NCCL INFO Using network Socket",
             "node1:820:820 [0] NCCL INFO ncclCommInitRank comm 0x41f28e60 rank 0 nranks 2 "
             "cudaDev 0 nvmlDev 0 busId 1c0 commId 0x74ccea0716a093e1 - Init START"]
    res = diagnose([_write(tmp_path, "### Describe the bug\n\n```\n" + "\n".join(lines) + "\n```\n")])
    assert res.exit_code == 1 and "stops during nccl-init" in res.verdict, res.verdict


# --- what a report says about the multi-GPU path of a hang (rules/p2p_transport.py) ----------
def test_a_hang_only_with_tensor_parallel_on_geforce_boards_is_the_p2p_path(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/2466 (the report's words)
    text = ("I am trying to run inferece server on multi GPU using this on (4 * NVIDIA GeForce RTX "
            "3090) server.\n\n**python -u -m vllm.entrypoints.api_server --model "
            "mistralai/Mistral-7B-Instruct-v0.2 --tensor-parallel-size 4**\n\nwhile this works "
            "fine when using --tensor-parallel-size =1 , but on using tensor-parallel-size >1 it "
            "stuck on strat up.\n")
    f = diagnose([_write(tmp_path, text)]).findings[0]
    assert f.category == "p2p-transport" and 0.5 <= f.confidence < 0.8, f
    assert "works on one GPU" in f.summary and "GeForce" in f.summary


def test_works_on_one_gpu_without_a_hang_is_not_the_p2p_path(tmp_path: Path) -> None:
    """The same words beside a crash that is not a hang add nothing to a P2P reading."""
    text = ("It works fine with tensor-parallel-size=1 on 2 x NVIDIA GeForce RTX 4090, with 2 it "
            "fails:\n\n```\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
            "2.00 GiB. GPU 0 has a total capacity of 23.64 GiB of which 1.12 GiB is free.\n```\n")
    res = diagnose([_write(tmp_path, text)])
    assert "p2p-transport" not in [f.category for f in res.findings], res.findings


def test_cuda_driver_invalid_device_ordinal_is_a_peer_memory_failure(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/26525 (vLLM 0.11.0, symmetric-memory all-reduce)
    text = ("I'm running the new vllm v0.11.0 and getting following issue :\n"
            "RuntimeError: CUDA driver error: invalid device ordinal\n")
    f = diagnose([_write(tmp_path, text)]).findings[0]
    assert f.category == "p2p-transport" and f.rule == "peer-memory-map-failed"


def test_the_flashinfer_all_reduce_fallback_warning_is_not_that_failure() -> None:
    # vLLM 0.30 flashinfer_all_reduce.py: logged as a warning, then another all-reduce is used
    line = ("(Worker_TP0 pid=641) WARNING 09-17 18:12:38 [flashinfer_all_reduce.py:108] Failed to "
            "initialize FlashInfer All Reduce workspace: CUDA driver error: invalid device ordinal.")
    ids = [sid for sid, _m in C.load(environ={}).scan(line)]
    assert "cat:peer-memory-map-failed" not in ids
    assert "cat:peer-memory-map-failed" in [
        sid for sid, _m in C.load(environ={}).scan("RuntimeError: CUDA driver error: invalid device ordinal")]


# --- the engine-ready wait running out under a slow load (rules/timeout_too_short.py) ---------
# https://github.com/vllm-project/vllm/issues/35547 (vLLM 0.15, a 163-shard checkpoint): the API
# server process (which waits VLLM_ENGINE_READY_TIMEOUT_S for the engine) dies mid-load
_API_TB = ["(ApiServer_5 pid=463645) Process ApiServer_5:",
           "(ApiServer_5 pid=463645) Traceback (most recent call last):",
           '(ApiServer_5 pid=463645)   File "/usr/lib/python3.12/multiprocessing/process.py", '
           "line 314, in _bootstrap",
           "(ApiServer_5 pid=463645)     self.run()"]


def _load(elapsed: str) -> str:
    return (f"Loading safetensors checkpoint shards:  65% Completed | 106/163 [{elapsed}<05:20,  "
            "5.63s/it]")


def test_api_server_dying_late_in_a_slow_load_is_the_ready_wait(tmp_path: Path) -> None:
    text = "\n".join(["```", _load("09:36"), *_API_TB, "```"]) + "\n"
    f = diagnose([_write(tmp_path, text)]).findings[0]
    assert f.category == "timeout-too-short" and f.confidence < 0.8, f
    assert "VLLM_ENGINE_READY_TIMEOUT_S" in f.summary and "106/163" in f.summary


def test_api_server_dying_early_in_the_load_is_not_the_ready_wait(tmp_path: Path) -> None:
    """Two minutes into the load the 600 s wait cannot have run out."""
    text = "\n".join(["```", _load("02:01"), *_API_TB, "```"]) + "\n"
    res = diagnose([_write(tmp_path, text)])
    assert "timeout-too-short" not in [f.category for f in res.findings]
    assert res.exit_code == 1  # still a recorded failure


# --- NCCL WARNs that state a fault (evidence/logs/nccl_state.py) -------------------------------
def test_nccl_warns_that_state_a_fault_are_recorded_failures(tmp_path: Path) -> None:
    # NCCL misc/shmutils.cc (NVIDIA/nccl#1518) and misc/strongstream.cc (vllm-project/vllm#3069):
    # both WARNs are followed by an error return
    for line, cat in (
            ("node1:1234:1234 [0] misc/shmutils.cc:103 NCCL WARN Cuda failure 'invalid argument'",
             None),
            ("node1:1234:1234 [0] misc/strongstream.cc:53 NCCL WARN NCCL cannot be captured in a "
             "graph if either it wasn't built with CUDA runtime >= 11.3 or if the installed CUDA "
             "driver < R465.", "library-version")):
        res = diagnose([_write(tmp_path, "node1:1234:1234 [0] NCCL INFO NCCL version "
                               "2.19.3+cuda11.0\n" + line + "\n")])
        assert res.exit_code == 1, (line, res.verdict)
        if cat:
            assert res.findings[0].category == cat


# --- NCCL network transport / bootstrap failures (catalogue/transport.toml) --------------------
@pytest.mark.parametrize(("line", "entry"), [
    # https://github.com/gpustack/gpustack/issues/2275
    ("gpu:77952:77952 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
     "172.21.0.1<57093> failed : Software caused connection abort", "nccl-socket-connect-failed"),
    # https://github.com/sgl-project/sglang/issues/3820
    ("node5:240:240 [6] misc/socket.cc:533 NCCL WARN socketPollConnect: Connect to "
     "10.0.0.4<56849> returned 113(No route to host) errno 115(Operation now in progress)",
     "nccl-socket-connect-failed"),
    # NCCL bootstrap.cc (a public RDT fine-tuning log)
    ("rcvlab-A6000x4-0:223645:223645 [0] bootstrap.cc:45 NCCL WARN Bootstrap : no socket "
     "interface found", "nccl-no-socket-interface"),
    # https://github.com/NVIDIA/nccl/issues/1405
    ("kp-ddp-worker-0:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer "
     "10.216.210.236<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv)",
     "nccl-ib-completion-error"),
])
def test_nccl_transport_failures_are_p2p_transport(tmp_path: Path, line: str, entry: str) -> None:
    text = ("INFO 06-22 21:43:24 [pynccl.py:69] vLLM is using nccl==2.21.5\n" + line + "\n"
            "node5:240:240 [6] NCCL INFO init.cc:1534 -> 2\n")
    res = diagnose([_write(tmp_path, text)])
    assert res.exit_code == 1
    top = res.findings[0]
    assert top.category == "p2p-transport" and top.rule == entry and top.confidence < 0.8, top


def test_nccl_retry_and_plugin_lines_are_not_transport_failures() -> None:
    """NCCL INFO lines of a healthy start name sockets and missing plugins: no entry fires."""
    cat = C.load(environ={})
    for line in ("gpu:77952:77952 [0] NCCL INFO NET/Plugin: Plugin load returned 2 : "
                 "libnccl-net.so: cannot open shared object file: No such file or directory : "
                 "when loading libnccl-net.so",
                 "gpu:77952:77952 [0] NCCL INFO Bootstrap : Using ens3:172.16.0.16<0>",
                 "node1:1234:1234 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>"):
        assert not [s for s, _m in cat.scan(line) if s.startswith("cat:nccl-")], line


# --- one quoted shm_broadcast message is a minute of waiting, not a stall ----------------------
# vLLM's shm_broadcast.py message, quoted the way https://github.com/gpustack/gpustack/issues/3888
# quotes it in a report about a slow model load
SHM = ("No available shared memory broadcast block found in 60 seconds. This typically happens "
       "when some processes are hanging or doing some time-consuming work (e.g. compilation).")


def test_one_quoted_shm_wait_in_a_slow_load_report_is_not_a_stall(tmp_path: Path) -> None:
    text = ("### Steps to reproduce\n\nDeploy DeepSeek-V3.2 with vLLM v0.11.0\n\n### GPU\n\nNVIDIA H200\n\n"
            "### Actual result\n\nIt takes a long time to load the model, and the following logs "
            f"are printed during the process:\n\n```\n{SHM}\n```\n")
    res = diagnose([_write(tmp_path, text)])
    assert res.exit_code == 0, res.verdict


def test_the_same_wait_in_a_hang_report_is_still_a_stall(tmp_path: Path) -> None:
    text = ("### Steps to reproduce\n\nDeploy DeepSeek-V3.2 with vLLM v0.11.0\n\n### GPU\n\nNVIDIA H200\n\n"
            f"### Actual result\n\nThe server hangs forever after this:\n\n```\n{SHM}\n```\n")
    res = diagnose([_write(tmp_path, text)])
    assert res.exit_code == 1, res.verdict


def test_hami_core_limits_in_the_env_name_the_layer(tmp_path: Path) -> None:
    """The env the HAMi device plugin sets (HAMi-core README: CUDA_DEVICE_MEMORY_LIMIT,
    CUDA_DEVICE_SM_LIMIT) names the interposer even when the report does not."""
    text = ("Environment of the pod:\n\n```\nCUDA_DEVICE_MEMORY_LIMIT_0=24000m\n"
            "CUDA_DEVICE_SM_LIMIT=100\n```\n\n```\n" + ENGINE_FAILED + "\n```\n")
    res = diagnose([_write(tmp_path, text)])
    assert res.findings[0].category == "interposer", res.findings


def test_a_run_that_always_stops_is_a_described_stop(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/16772 (the report's words and first log line)
    text = ("### Describe the bug\n\nWhen I use two gpu to load the model, the vllm always stopped. "
            "But vllm works for one gpu inference.\n\nINFO 04-17 17:24:47 [core.py:61] "
            "Initializing a V1 LLM engine (v0.8.4) with config: model='Qwen2.5-VL-7b', "
            "tensor_parallel_size=2\n")
    res = diagnose([_write(tmp_path, text)])
    assert res.exit_code == 1 and "always stopped" in res.verdict, res.verdict


def test_stopping_the_server_on_purpose_is_not_a_symptom(tmp_path: Path) -> None:
    text = ("I just stopped the server after the benchmark.\n\nINFO 04-17 17:24:47 [core.py:61] "
            "Initializing a V1 LLM engine (v0.8.4) with config: model='Qwen2.5-VL-7b', "
            "tensor_parallel_size=2\n")
    assert diagnose([_write(tmp_path, text)]).exit_code == 0


@pytest.mark.parametrize("words", [
    "We just stopped vllm to change the flags, then started it again.",
    "You can just stop the container and restart it with --enforce-eager.",
    "The scheduler keeps stopping my job when the node is drained.",
])
def test_a_person_stopping_the_run_is_not_a_described_stop(tmp_path: Path, words: str) -> None:
    text = (words + "\n\nINFO 04-17 17:24:47 [core.py:61] Initializing a V1 LLM engine (v0.8.4) "
            "with config: model='Qwen2.5-VL-7b', tensor_parallel_size=2\n")
    assert diagnose([_write(tmp_path, text)]).exit_code == 0


def test_a_geforce_board_name_alone_adds_no_p2p_reason(tmp_path: Path) -> None:
    """nvidia-smi names the board on every GeForce box (the row below is nvidia-smi's format):
    with a hang at NCCL init and nothing said about the multi-GPU path it is no second reason
    for the PCIe P2P deadlock."""
    text = ("The server hangs at NCCL init, no error.\n\n"
            "|   0  NVIDIA GeForce RTX 5090        Off |   00000000:01:00.0 Off |"
            "                  N/A |\n"
            "|   1  NVIDIA GeForce RTX 5090        Off |   00000000:02:00.0 Off |"
            "                  N/A |\n")
    res = diagnose([_write(tmp_path, text)])
    assert "p2p-transport" not in [f.category for f in res.findings], res.findings


@pytest.mark.parametrize(("words", "said"), [
    ("It works fine with --tensor-parallel-size 1 and hangs with 2.", True),
    ("vllm works for one gpu inference", True),
    ("I fine-tuned the model on a single GPU and serve it with TP=2.", False),
    ("We fine-tune with tp 1 and serve with tp 4.", False),
])
def test_the_one_gpu_statement_is_about_running_not_training(words: str, said: bool) -> None:
    hit = C.load(environ={}).table.match("multi-gpu-only", words) is not None
    assert hit is said


def test_where_a_multi_gpu_excerpt_stops_names_the_kind_of_cause(tmp_path: Path) -> None:
    """catalogue/stops/stops.toml: a TP=2 start that stops in NCCL's setup is the transport's
    place (a weak finding); the same stop of a one-GPU start names nothing."""
    # vllm-project/vllm#8058 (vLLM 0.5.x pynccl.py and NCCL 2.20 bootstrap lines)
    nccl = ["INFO 08-31 09:50:46 pynccl.py:63] vLLM is using nccl==2.20.5",
            "node1:820:820 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
            "node1:820:820 [0] NCCL INFO ncclCommInitRank comm 0x41f28e60 rank 0 nranks 2 "
            "cudaDev 0 nvmlDev 0 busId 1c0 commId 0x74ccea0716a093e1 - Init START"]
    res = diagnose([_write(tmp_path, "```\n" + "\n".join([BANNER] + nccl) + "\n```\n")])
    top = res.findings[0]
    assert (top.rule, top.category, top.confidence) == ("stopped-excerpt", "p2p-transport", 0.3)
    assert "transports" in top.summary and res.exit_code == 1
    one = BANNER.replace("tensor_parallel_size=2", "tensor_parallel_size=1")
    res = diagnose([_write(tmp_path, "```\n" + "\n".join([one] + nccl[:2]) + "\n```\n")])
    assert [(f.rule, f.category) for f in res.findings] == [("stopped-excerpt", "unknown")]
