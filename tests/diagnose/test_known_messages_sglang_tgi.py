"""Start-up failures of SGLang, text-generation-inference (TGI) and torchrun-launched jobs that
known-sglang-tgi.toml names. Each log is the message in the shape its software prints it (wording
from the source named in the comment: SGLang 0.4.10.post2 / 0.5.3 wheels, TGI v2.4.1 / v3.3.6
launcher, torch.distributed.elastic), inside the lines an SGLang start ("[... TP0] ..."), a TGI
start ("...Z ERROR shard-manager: text_generation_launcher: ...") or torchrun prints around it;
the top finding names the category and rests on an entry of known-sglang-tgi.toml.

What `diagnose` answered for these logs before the entries (main at 8f21da80):

* SGLang head count not divisible by --tp (the bare ``assert self.total_num_heads % tp_size``):
  checkpoint-config 0.40 (traceback-frames): wrong.
* SGLang DP attention sizes (``Please set a dp-size > 1``, the bare ``tp_size % dp_size`` assert):
  config-invalid 0.40 (traceback-frames): weak.
* SGLang ``PP is not compatible with MTP models``, ``Dual chunk attention is enabled, but ...``,
  ``Chat template ... is not a built-in template name``, ``The host memory should be larger than
  the device memory``: rank-crashed 0.55 (first-dead-rank).
* SGLang ``Memory pool size is too small`` / ``max_running_request is zero``: rank-crashed 0.55.
* SGLang ``Not enough space for mamba cache``: kv-cache-insufficient 0.40 (traceback-frames): weak.
* SGLang ``NCCL version 2.27.3 or higher is required for NCCL symmetric memory``: cudagraph-capture
  0.70 (capture-stall): wrong.
* SGLang ``Rank 0 scheduler is dead`` + ``Exit code: -9``: rank-crashed 0.55.
* TGI ``text-generation-server|router not found in PATH``: library-version 0.45 (index): weak.
* TGI ``Cannot get the number of key/value heads``: rank-crashed 0.55 (first-dead-rank).
* torchrun ``Signal 7 (SIGBUS)`` / ``Signal 4 (SIGILL)``: rank-crashed 0.50 (torchrun-failure).

Messages that were already named right (SGLang's "Not enough memory. Please try to increase
--mem-fraction-static", "Capture cuda graph failed: CUDA out of memory", "Model architectures
[...] are not supported for now", the sgl_kernel "Could not load any common_ops library", most
server-argument checks; TGI's "Sharded X requires Flash Attention enabled models", "Not enough
memory to handle N prefill tokens", "Unsupported model type"; torchrun's exit codes -9/-11/-6/1)
have no entry here. Healthy SGLang and TGI starts, with the warnings they print, stay exit 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose import catalogue as C
from sm120kit.diagnose.engine import diagnose
from tests.diagnose.known_checks import assert_healthy, assert_named

KNOWN = Path(C.__file__).resolve().parent / "known-sglang-tgi.toml"
SP = "/usr/local/lib/python3.10/dist-packages"


def _tb(frames: list[tuple[str, int, str, str]], last: str) -> str:
    """A Python traceback as the interpreter prints it."""
    out = "Traceback (most recent call last):\n"
    for path, line, fn, code in frames:
        out += f'  File "{path}", line {line}, in {fn}\n    {code}\n'
    return out + last + "\n"


_SGL = (
    "[2025-03-01 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct', "
    "tp_size=3, mem_fraction_static=0.88, attention_backend='flashinfer')\n"
    "[2025-03-01 10:00:05 TP0] Init torch distributed begin.\n"
    "[2025-03-01 10:00:06 TP0] Init torch distributed ends. mem usage=0.12 GB\n"
    "[2025-03-01 10:00:06 TP0] Load weight begin. avail mem=78.50 GB\n"
)
_SCHED = [
    (f"{SP}/sglang/srt/managers/scheduler.py", 2566, "run_scheduler_process",
     "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, "
     "dp_rank)"),
    (f"{SP}/sglang/srt/managers/scheduler.py", 312, "__init__", "self.tp_worker = TpWorkerClass("),
    (f"{SP}/sglang/srt/managers/tp_worker.py", 84, "__init__", "self.model_runner = ModelRunner("),
]
_MR = f"{SP}/sglang/srt/model_executor/model_runner.py"


def _sched_exc(frames: list[tuple[str, int, str, str]], last: str) -> str:
    """SGLang's scheduler process: its exception (scheduler.py), then the launcher's teardown."""
    return ("[2025-03-01 10:00:12 TP0] Scheduler hit an exception: " + _tb(_SCHED + frames, last)
            + "\n[2025-03-01 10:00:12] Received sigquit from a child process. It usually means "
            "the child failed.\nKilled\n")


def _sched_dead(code: int) -> str:
    """engine.py's wait for the schedulers: the pipe closed, the launcher logs the exit code."""
    return (_SGL
            + "[2025-03-01 10:00:40] Rank 0 scheduler is dead. Please check if there are "
            "relevant logs.\n"
            f"[2025-03-01 10:00:40] Exit code: {code}\n"
            + _tb([(f"{SP}/sglang/launch_server.py", 14, "<module>", "launch_server(server_args)"),
                   (f"{SP}/sglang/srt/entrypoints/engine.py", 800, "_launch_subprocesses",
                    "data = scheduler_pipe_readers[i].recv()"),
                   ("/usr/lib/python3.10/multiprocessing/connection.py", 383, "_recv",
                    "raise EOFError")], "EOFError"))


_TGI = (
    '2024-05-01T10:00:00.000000Z  INFO text_generation_launcher: Args { model_id: '
    '"bigscience/bloom-560m", sharded: None, num_shard: None, quantize: None }\n'
)
_TGI_READY = (
    "2024-05-01T10:00:25.000000Z  INFO shard-manager: text_generation_launcher: Shard ready in "
    "19.9s rank=0\n"
    "2024-05-01T10:00:25.200000Z  INFO text_generation_launcher: Starting Webserver\n"
)

_TR = (
    "W0301 10:00:00.000000 140 torch/distributed/run.py:793] \n"
    "W0301 10:00:00.000000 140 torch/distributed/run.py:793] *****************************************\n"
    "W0301 10:00:00.000000 140 torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment "
    "variable for each process to be 1 in default, to avoid your system being overloaded, please "
    "further tune the variable for optimal performance in your application as needed. \n"
    "W0301 10:00:00.000000 140 torch/distributed/run.py:793] *****************************************\n"
)


def _torchrun_failed(code: int, sig: str) -> str:
    """torch.distributed.elastic: the agent's failed line and ChildFailedError's summary."""
    return (
        _TR
        + "W0301 10:05:00.000000 140 torch/distributed/elastic/multiprocessing/api.py:897] Sending "
        "process 1235 closing signal SIGTERM\n"
        f"E0301 10:05:01.000000 140 torch/distributed/elastic/multiprocessing/api.py:869] failed "
        f"(exitcode: {code}) local_rank: 0 (pid: 1234) of binary: /usr/bin/python3\n"
        + _tb([("/usr/local/bin/torchrun", 8, "<module>", "sys.exit(main())"),
               (f"{SP}/torch/distributed/launcher/api.py", 263, "launch_agent",
                "raise ChildFailedError(")],
              "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ")
        + "============================================================\ntrain.py FAILED\n"
        "------------------------------------------------------------\nFailures:\n"
        "  <NO_OTHER_FAILURES>\n------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n[0]:\n  time      : 2025-03-01_10:05:00\n"
        "  host      : node-a\n  rank      : 0 (local_rank: 0)\n"
        f"  exitcode  : {code} (pid: 1234)\n  error_file: <N/A>\n"
        f"  traceback : Signal {-code} ({sig}) received by PID 1234\n"
        "============================================================\n")


# name -> (category, log text); the source that prints the message in the comment above each
FIXED: dict[str, tuple[str, str]] = {
    # sglang v0.4.10.post2 python/sglang/srt/models/qwen2.py (Qwen2Attention.__init__)
    "sglang-tp-heads-indivisible": ("config-invalid", _SGL + _sched_exc(
        [(f"{SP}/sglang/srt/models/qwen2.py", 116, "__init__",
          "assert self.total_num_heads % tp_size == 0")], "AssertionError")),
    # sglang v0.4.10.post2 python/sglang/srt/server_args.py (__post_init__, DP attention)
    "sglang-dp-attention-dp-size-1": ("config-invalid", (
        "[2025-03-01 10:00:00] server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-V2-Lite', "
        "tp_size=2, dp_size=1, enable_dp_attention=True)\n" + _tb(
            [(f"{SP}/sglang/launch_server.py", 11, "<module>",
              "server_args = prepare_server_args(sys.argv[1:])"),
             (f"{SP}/sglang/srt/server_args.py", 459, "__post_init__", "assert (")],
            "AssertionError: Please set a dp-size > 1. You can use 1 < dp-size <= tp-size "))),
    "sglang-dp-attention-tp-not-divisible": ("config-invalid", (
        "[2025-03-01 10:00:00] server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-V2-Lite', "
        "tp_size=8, dp_size=3, enable_dp_attention=True)\n" + _tb(
            [(f"{SP}/sglang/launch_server.py", 11, "<module>",
              "server_args = prepare_server_args(sys.argv[1:])"),
             (f"{SP}/sglang/srt/server_args.py", 462, "__post_init__",
              "assert self.tp_size % self.dp_size == 0")], "AssertionError"))),
    # sglang v0.4.10.post2 python/sglang/srt/model_executor/model_runner.py (initialize)
    "sglang-pp-with-mtp-model": ("config-invalid", _SGL + _sched_exc(
        [(_MR, 309, "initialize", "assert (")], "AssertionError: PP is not compatible with MTP "
         "models.")),
    # sglang v0.5.3 python/sglang/srt/model_executor/model_runner.py (model_specific_adjustment)
    "sglang-dual-chunk-backend": ("config-invalid", _SGL + _sched_exc(
        [(_MR, 499, "model_specific_adjustment", "raise ValueError(")],
        "ValueError: Dual chunk attention is enabled, but attention backend is set to flashinfer. "
        "Please set it to 'dual_chunk_flash_attn'.")),
    # sglang v0.4.10.post2 python/sglang/srt/managers/template_manager.py
    "sglang-chat-template-not-found": ("config-invalid", _SGL + _tb(
        [(f"{SP}/sglang/launch_server.py", 14, "<module>", "launch_server(server_args)"),
         (f"{SP}/sglang/srt/managers/template_manager.py", 120, "_load_explicit_chat_template",
          "raise RuntimeError(")],
        "RuntimeError: Chat template configs/chat_templates/zephyr.jinja is not a built-in "
        "template name or a valid chat template file path.")),
    # sglang v0.4.10.post2 python/sglang/srt/managers/tp_worker.py (TpModelWorker.__init__)
    "sglang-kv-pool-too-small": ("kv-cache-insufficient", _SGL
        + "[2025-03-01 10:00:20 TP0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, "
        "avail mem=9.80 GB, mem usage=68.70 GB.\n"
        "[2025-03-01 10:00:20 TP0] KV Cache is allocated. #tokens: 4, K size: 0.00 GB, V size: "
        "0.00 GB\n"
        + _sched_exc([(f"{SP}/sglang/srt/managers/tp_worker.py", 146, "__init__", "assert (")],
                     "AssertionError: Memory pool size is too small")),
    "sglang-max-running-requests-zero": ("config-invalid", _SGL + _sched_exc(
        [(f"{SP}/sglang/srt/managers/tp_worker.py", 136, "__init__",
          'assert self.max_running_requests > 0, "max_running_request is zero"')],
        "AssertionError: max_running_request is zero")),
    # sglang v0.5.3 python/sglang/srt/mem_cache/memory_pool.py (HybridReqToTokenPool.alloc)
    "sglang-mamba-cache-full": ("kv-cache-insufficient", _SGL
        + "[2025-03-01 10:00:30] The server is fired up and ready to roll!\n"
        "[2025-03-01 10:01:00 TP0] Prefill batch. #new-seq: 40, #new-token: 8192, #cached-token: "
        "0, token usage: 0.10, #running-req: 0, #queue-req: 10\n"
        "[2025-03-01 10:01:00 TP0] Scheduler hit an exception: " + _tb(
            [(f"{SP}/sglang/srt/managers/scheduler.py", 2650, "run_scheduler_process",
              "scheduler.event_loop_overlap()"),
             (f"{SP}/sglang/srt/mem_cache/memory_pool.py", 279, "alloc",
              "assert len(select_index) == len(")],
            "AssertionError: Not enough space for mamba cache, try to increase "
            "--max-mamba-cache-size.")
        + "[2025-03-01 10:01:00] Received sigquit from a child process. It usually means the "
        "child failed.\n"),
    # sglang v0.4.10.post2 python/sglang/srt/mem_cache/memory_pool_host.py (HostKVCache)
    "sglang-hicache-host-smaller": ("config-invalid", _SGL
        + "[2025-03-01 10:00:20 TP0] KV Cache is allocated. #tokens: 600000, K size: 20.00 GB, "
        "V size: 20.00 GB\n"
        + _sched_exc([(f"{SP}/sglang/srt/mem_cache/hiradix_cache.py", 50, "__init__",
                       "self.token_to_kv_pool_host = MHATokenToKVPoolHost("),
                      (f"{SP}/sglang/srt/mem_cache/memory_pool_host.py", 82, "__init__",
                       "assert (")],
                     "AssertionError: The host memory should be larger than the device memory "
                     "with the current protocol")),
    # sglang v0.4.10.post2 .../distributed/device_communicators/pynccl_allocator.py
    "sglang-symm-mem-nccl-too-old": ("library-version", _SGL
        + "[2025-03-01 10:00:25 TP0] Capture cuda graph begin. This can take up to several "
        "minutes. avail mem=20.00 GB\n"
        + _sched_exc([(f"{SP}/sglang/srt/model_executor/cuda_graph_runner.py", 380, "capture",
                       "with use_symmetric_memory(get_tp_group()):"),
                      (f"{SP}/sglang/srt/distributed/device_communicators/pynccl_allocator.py",
                       87, "__enter__", "assert (")],
                     "AssertionError: NCCL version 2.27.3 or higher is required for NCCL "
                     "symmetric memory")),
    # sglang v0.4.10.post2 python/sglang/srt/entrypoints/engine.py (_launch_subprocesses)
    "sglang-scheduler-sigkill": ("out-of-memory", _sched_dead(-9)),
    # TGI v2.4.1 launcher/src/main.rs (shard_manager: spawn, ErrorKind::NotFound)
    "tgi-server-not-in-path": ("library-version", _TGI
        + "2024-05-01T10:00:02.000000Z  INFO shard-manager: text_generation_launcher: Starting "
        "shard rank=0\n"
        "2024-05-01T10:00:02.000000Z ERROR shard-manager: text_generation_launcher: "
        "text-generation-server not found in PATH rank=0\n"
        "2024-05-01T10:00:02.000000Z ERROR shard-manager: text_generation_launcher: Please install "
        "it with `make install-server` rank=0\n"
        "2024-05-01T10:00:02.000000Z ERROR shard-manager: text_generation_launcher: No such file "
        "or directory (os error 2) rank=0\n"
        "2024-05-01T10:00:02.100000Z ERROR text_generation_launcher: Shard 0 failed to start\n"
        "2024-05-01T10:00:02.100000Z  INFO text_generation_launcher: Shutting down shards\n"
        "Error: ShardCannotStart\n"),
    # TGI v3.3.6 launcher/src/main.rs (spawn_webserver)
    "tgi-router-not-in-path": ("library-version", _TGI + _TGI_READY
        + "2024-05-01T10:00:25.300000Z ERROR text_generation_launcher: Failed to start webserver: "
        "No such file or directory (os error 2)\n"
        "2024-05-01T10:00:25.300000Z ERROR text_generation_launcher: text-generation-router not "
        "found in PATH\n"
        "2024-05-01T10:00:25.300000Z ERROR text_generation_launcher: Please install it with "
        "`make install-router`\nError: WebserverCannotStart\n"),
    # TGI v2.4.1 server/text_generation_server/models/flash_causal_lm.py (FlashCausalLM.__init__)
    "tgi-kv-heads-unknown": ("checkpoint-config", _TGI
        + "2024-05-01T10:00:02.000000Z  INFO shard-manager: text_generation_launcher: Starting "
        "shard rank=0\n"
        "2024-05-01T10:00:09.000000Z ERROR text_generation_launcher: Error when initializing "
        "model\n"
        + _tb([("/opt/conda/bin/text-generation-server", 8, "<module>", "sys.exit(app())"),
               ("/opt/conda/lib/python3.11/site-packages/text_generation_server/models/"
                "flash_causal_lm.py", 1309, "__init__",
                'raise ValueError("Cannot get the number of key/value heads")')],
              "ValueError: Cannot get the number of key/value heads")
        + "2024-05-01T10:00:10.000000Z ERROR shard-manager: text_generation_launcher: Shard "
        "complete standard error output:\n\n"
        "2024-05-01T10:00:10.200000Z ERROR text_generation_launcher: Shard 0 failed to start\n"
        "Error: ShardCannotStart\n"),
    # torch.distributed.elastic.multiprocessing.errors (ProcessFailure) and .api (failed line)
    "torchrun-rank-sigbus": ("shared-memory", _torchrun_failed(-7, "SIGBUS")),
    "torchrun-rank-sigill": ("library-version", _torchrun_failed(-4, "SIGILL")),
}

# healthy starts: the warnings they print must not become findings
HEALTHY: dict[str, str] = {
    # SGLang with DP attention: server_args.py warns that it adjusted the chunked prefill size
    "sglang-dp-attention-start": (
        "[2025-03-01 10:00:00] server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-V2-Lite', "
        "tp_size=2, dp_size=2, enable_dp_attention=True)\n"
        "[2025-03-01 10:00:00] WARNING server_args.py:465: DP attention is enabled. The chunked "
        "prefill size is adjusted to 4096 to avoid MoE kernel issues. \n"
        "[2025-03-01 10:00:05 DP0 TP0] Init torch distributed begin.\n"
        "[2025-03-01 10:00:06 DP0 TP0] Init torch distributed ends. mem usage=0.12 GB\n"
        "[2025-03-01 10:00:06 DP0 TP0] Load weight begin. avail mem=78.50 GB\n"
        "[2025-03-01 10:00:20 DP0 TP0] Load weight end. type=DeepseekV2ForCausalLM, "
        "dtype=torch.bfloat16, avail mem=62.10 GB, mem usage=16.40 GB.\n"
        "[2025-03-01 10:00:21 DP0 TP0] KV Cache is allocated. #tokens: 600000, KV size: 39.00 GB\n"
        "[2025-03-01 10:00:21 DP0 TP0] Memory pool end. avail mem=22.00 GB\n"
        "[2025-03-01 10:00:22 DP0 TP0] Capture cuda graph begin. This can take up to several "
        "minutes. avail mem=21.50 GB\n"
        "[2025-03-01 10:00:28 DP0 TP0] Capture cuda graph end. Time elapsed: 6.02 s. mem "
        "usage=0.80 GB. avail mem=20.70 GB.\n"
        "[2025-03-01 10:00:29 DP0 TP0] max_total_num_tokens=600000, chunked_prefill_size=4096, "
        "max_prefill_tokens=16384, max_running_requests=2048, context_len=163840, "
        "available_gpu_mem=20.70 GB\n"
        "[2025-03-01 10:00:30] INFO:     Started server process [4410]\n"
        "[2025-03-01 10:00:30] INFO:     Application startup complete.\n"
        "[2025-03-01 10:00:32] The server is fired up and ready to roll!\n"),
    # SGLang with EAGLE speculative decoding: the overlap scheduler is turned off with a warning
    "sglang-eagle-start": (
        "[2025-03-01 10:00:00] server_args=ServerArgs(model_path='meta-llama/Llama-2-7b-chat-hf', "
        "speculative_algorithm='EAGLE', speculative_draft_model_path='lmsys/sglang-EAGLE-llama2-"
        "chat-7B', speculative_num_steps=3, speculative_eagle_topk=4, "
        "speculative_num_draft_tokens=16)\n"
        "[2025-03-01 10:00:00] WARNING server_args.py:560: Overlap scheduler is disabled because "
        "of using eagle speculative decoding.\n"
        "[2025-03-01 10:00:06 TP0] Load weight begin. avail mem=78.50 GB\n"
        "[2025-03-01 10:00:15 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.float16, "
        "avail mem=65.80 GB, mem usage=12.70 GB.\n"
        "[2025-03-01 10:00:16 TP0] KV Cache is allocated. #tokens: 90000, K size: 22.00 GB, V "
        "size: 22.00 GB\n"
        "[2025-03-01 10:00:17 TP0] Capture cuda graph begin. This can take up to several minutes. "
        "avail mem=20.80 GB\n"
        "[2025-03-01 10:00:25 TP0] Capture cuda graph end. Time elapsed: 8.10 s. mem usage=0.60 "
        "GB. avail mem=20.20 GB.\n"
        "[2025-03-01 10:00:26 TP0] Capture draft cuda graph begin. This can take up to several "
        "minutes. avail mem=20.20 GB. mem usage=0.00 GB.\n"
        "[2025-03-01 10:00:30 TP0] Capture draft cuda graph end. Time elapsed: 4.00 s. mem "
        "usage=0.30 GB. avail mem=19.90 GB.\n"
        "[2025-03-01 10:00:31 TP0] max_total_num_tokens=90000, chunked_prefill_size=8192, "
        "max_prefill_tokens=16384, max_running_requests=48, context_len=4096, "
        "available_gpu_mem=19.90 GB\n"
        "[2025-03-01 10:00:32] INFO:     Application startup complete.\n"
        "[2025-03-01 10:00:33] The server is fired up and ready to roll!\n"),
    # TGI on a GPU without flash-attn: the models module warns and serves the AutoModel path
    # (server/text_generation_server/models/__init__.py, log_master(logger.warning, ...))
    "tgi-no-flash-attention-start": (
        _TGI
        + "2024-05-01T10:00:02.000000Z  INFO shard-manager: text_generation_launcher: Starting "
        "shard rank=0\n"
        "2024-05-01T10:00:08.000000Z  WARN text_generation_launcher: Could not import Flash "
        "Attention enabled models: CUDA capability 7.5 is not supported\n"
        + _TGI_READY
        + "2024-05-01T10:00:25.300000Z  INFO text_generation_router_v3: backends/v3/src/lib.rs:125: "
        "Warming up model\n"
        "2024-05-01T10:00:27.500000Z  INFO text_generation_router_v3: backends/v3/src/lib.rs:137: "
        "Setting max batch total tokens to 40000\n"
        "2024-05-01T10:00:27.600000Z  INFO text_generation_router::server: "
        "router/src/server.rs:2302: Connected\n"),
    # TGI v3's launcher estimate (launcher/src/main.rs, compute_max_prefill: a warning) and a
    # start that goes on
    "tgi-vram-estimate-warning": (
        _TGI
        + "2024-05-01T10:00:01.000000Z  WARN text_generation_launcher: Not enough VRAM to run the "
        "model: Available: 22.5 GB - Model 28.3 GB.\n"
        "2024-05-01T10:00:02.000000Z  INFO shard-manager: text_generation_launcher: Starting "
        "shard rank=0\n"
        + _TGI_READY
        + "2024-05-01T10:00:27.600000Z  INFO text_generation_router::server: "
        "router/src/server.rs:2302: Connected\n"),
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_start_failure_names_its_cause(name: str, tmp_path: Path) -> None:
    category, text = FIXED[name]
    assert_named(KNOWN, name, category, text, tmp_path)


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_healthy_start_stays_exit_0(name: str, tmp_path: Path) -> None:
    assert_healthy(name, HEALTHY[name], tmp_path)


def test_scheduler_crash_signal_is_not_called_oom(tmp_path: Path) -> None:
    """Exit code -11 (SIGSEGV) after 'Rank 0 scheduler is dead' is a crash, not the OOM killer:
    the SIGKILL entry names -9 only."""
    log = tmp_path / "sglang-sigsegv.log"
    log.write_text(_sched_dead(-11))
    res = diagnose([log])
    assert res.findings and res.findings[0].category == "rank-crashed", res.verdict
    assert all(f.rule != "sglang-scheduler-sigkill" for f in res.findings)


def test_exit_code_line_of_another_program_is_not_sglang(tmp_path: Path) -> None:
    """'Exit code: -9' without SGLang's dead-scheduler line does not name this entry."""
    log = tmp_path / "other.log"
    log.write_text("[2025-03-01 10:00:00] starting job\n[2025-03-01 10:00:40] Exit code: -9\n")
    res = diagnose([log])
    assert all(f.rule != "sglang-scheduler-sigkill" for f in res.findings)


def test_every_entry_has_a_case() -> None:
    """Each entry of known-sglang-tgi.toml is exercised by at least one log above."""
    from sm120kit.diagnose.catalogue.schema import parse_file
    lines = [ln for _, t in FIXED.values() for ln in t.splitlines()]
    missing = [e.id for e in parse_file(KNOWN) if not any(e.match(ln) for ln in lines)]
    assert not missing, missing
