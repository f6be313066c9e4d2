"""What vLLM (V0 and V1 engines), SGLang and TGI print after the server is ready, while it serves
(catalogue file known-serving.toml, the cue `request-error` of cues.toml and the serving-stall
rule). Each log is a start that reaches the API server, a few served requests and metrics lines,
then the message in the shape its software prints it (wording from the source named in the
comment, shapes from the public threads cited in the catalogue).

Before this file, on main: a vLLM 0.8.5 context-length 400 ("Error in preprocessing prompt
inputs" + the ValueError's traceback) was exit 1, rank-crashed; an unknown-model 404 ("Error
with model ...") and vLLM 0.6's "error in chat completion stream generator: <ValueError>" were
exit 1, unknown; so were TGI's one-line refusals at ERROR (a validation error, "no permits
available"); "Engine loop has died" (the V0 MQ engine's heartbeat: a hung step) was
rank-crashed; a server whose requests queue with nothing running and 0.0 tokens/s
(Pending/Waiting growing) was exit 0 (a false all-clear). The capacity lines (V0 preemption,
SGLang retraction), aborts, ignored request fields and the tokenizer's long-sequence warning
were exit 0 already; their advice entries keep them out of the evidence (explain-line named the
preemption warning kv-cache-insufficient). A CUDA fault in the decode step (kernel-hang, phase
serving), an OOM under load (vLLM, SGLang, a TGI shard) and an NCCL watchdog while serving were
named right already and are kept here as checks; SGLang's scheduler watchdog is left to
known-engines.toml (kernel-hang).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose import catalogue as C
from sm120kit.diagnose.engine import diagnose
from tests.diagnose.known_checks import assert_healthy, assert_named

KNOWN = Path(C.__file__).resolve().parent / "known-serving.toml"
SP = "/usr/local/lib/python3.12/dist-packages"


def _tb(prefix: str, frames: list[tuple[str, int, str, str]], last: str) -> str:
    """A Python traceback as vLLM's logger prints it: every line under the record's prefix."""
    out = prefix + "Traceback (most recent call last):\n"
    for path, line, fn, code in frames:
        out += f'{prefix}  File "{path}", line {line}, in {fn}\n{prefix}    {code}\n'
    return out + "".join(prefix + x + "\n" for x in last.split("\n"))


# --- vLLM V1 (0.8.5): start, requests, metrics (v1/metrics/loggers.py) ----------------------
V1_START = (
    "INFO 05-01 10:00:00 [__init__.py:239] Automatically detected platform cuda.\n"
    "INFO 05-01 10:00:02 [api_server.py:1043] vLLM API server version 0.8.5\n"
    "INFO 05-01 10:00:40 [gpu_model_runner.py:1347] Model loading took 15.27 GiB and 25.1 "
    "seconds\n"
    "INFO 05-01 10:01:10 [kv_cache_utils.py:634] GPU KV cache size: 301,216 tokens\n"
    "INFO 05-01 10:01:30 [core.py:159] init engine (profile, create kv cache, warmup model) took "
    "50.12 seconds\n"
    "INFO 05-01 10:01:31 [api_server.py:1090] Starting vLLM API server on http://0.0.0.0:8000\n"
    "INFO:     Started server process [5012]\n"
    "INFO:     Waiting for application startup.\n"
    "INFO:     Application startup complete.\n")


def _v1_req(t: str, rid: str, code: str = "200 OK") -> str:
    return (f"INFO 05-01 {t} [async_llm.py:252] Added request chatcmpl-{rid}.\n"
            f'INFO:     10.0.0.5:5{rid[:4]} - "POST /v1/chat/completions HTTP/1.1" {code}\n')


def _v1_metrics(t: str, p: str, g: str, r: int, w: int, kv: str = "1.2") -> str:
    return (f"INFO 05-01 {t} [loggers.py:111] Engine 000: Avg prompt throughput: {p} tokens/s, "
            f"Avg generation throughput: {g} tokens/s, Running: {r} reqs, Waiting: {w} reqs, "
            f"GPU KV cache usage: {kv}%, Prefix cache hit rate: 0.0%\n")


V1_SERVE = (_v1_req("10:02:00", "1a2b3c4d") + _v1_metrics("10:02:10", "52.3", "88.0", 2, 0)
            + _v1_req("10:02:12", "5e6f7a8b") + _v1_metrics("10:02:20", "0.0", "91.4", 1, 0))
V1_TAIL = _v1_req("10:03:00", "9c0d1e2f") + _v1_metrics("10:03:10", "40.1", "85.2", 1, 0)

# --- vLLM V0 (0.6.3): start, requests, metrics (engine/metrics.py) ---------------------------
V0_START = (
    "INFO 10-17 09:58:00 api_server.py:528] vLLM API server version 0.6.3\n"
    "INFO 10-17 09:58:01 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: "
    "model='meta-llama/Meta-Llama-3-8B-Instruct', tensor_parallel_size=1\n"
    "INFO 10-17 09:58:30 model_runner.py:1067] Loading model weights took 14.9888 GB\n"
    "INFO 10-17 09:58:35 gpu_executor.py:122] # GPU blocks: 27838, # CPU blocks: 2048\n"
    "INFO 10-17 09:58:50 model_runner.py:1523] Graph capturing finished in 14 secs.\n"
    "INFO:     Started server process [4021]\n"
    "INFO:     Waiting for application startup.\n"
    "INFO:     Application startup complete.\n"
    "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)\n")


def _v0_metrics(t: str, p: str, g: str, r: int, w: int, kv: str = "4.2") -> str:
    return (f"INFO 10-17 {t} metrics.py:345] Avg prompt throughput: {p} tokens/s, Avg generation "
            f"throughput: {g} tokens/s, Running: {r} reqs, Swapped: 0 reqs, Pending: {w} reqs, "
            f"GPU KV cache usage: {kv}%, CPU KV cache usage: 0.0%.\n")


def _v0_req(t: str, rid: str, code: str = "200 OK") -> str:
    return (f"INFO 10-17 {t} engine.py:290] Added request chat-{rid}.\n"
            f'INFO:     10.0.0.7:4{rid[:4]} - "POST /v1/chat/completions HTTP/1.1" {code}\n')


V0_SERVE = _v0_req("10:00:01", "3f2a9c10") + _v0_metrics("10:00:06", "310.2", "40.5", 12, 0)
V0_TAIL = _v0_req("10:00:30", "0a1b2c3d") + _v0_metrics("10:00:36", "120.0", "580.7", 40, 0)

# vLLM v0.8.5 entrypoints/openai/serving_chat.py (logger.exception on a refused request) and
# serving_engine.py (_validate_input); shape from vllm-project/vllm#20409
_PRE = "ERROR 05-01 10:02:30 [serving_chat.py:200] "
CONTEXT_400 = _PRE + "Error in preprocessing prompt inputs\n" + _tb(_PRE, [
    (f"{SP}/vllm/entrypoints/openai/serving_chat.py", 183, "create_chat_completion",
     ") = await self._preprocess_chat("),
    (f"{SP}/vllm/entrypoints/openai/serving_engine.py", 835, "_preprocess_chat",
     "prompt_inputs = await self._tokenize_prompt_input_async("),
    (f"{SP}/vllm/entrypoints/openai/serving_engine.py", 260, "_validate_input",
     "raise ValueError(")],
    "ValueError: This model's maximum context length is 16384 tokens. However, you requested "
    "122946 tokens (112946 in the messages, 10000 in the completion). Please reduce the length "
    "of the messages or completion.") + \
    'INFO:     10.0.0.5:51990 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request\n'

# vLLM v0.8.5 v1/engine/core.py (run_engine_core: "EngineCore encountered a fatal error.") and
# v1/engine/exceptions.py (EngineDeadError); shape from vllm-project/vllm#25032
_CE = "(EngineCore_0 pid=612) ERROR 05-01 10:02:31 [core.py:398] "
_DEAD = ("ERROR 05-01 10:02:31 [async_llm.py:399] AsyncLLM output_handler failed.\n"
         "ERROR 05-01 10:02:31 [async_llm.py:399] vllm.v1.engine.exceptions.EngineDeadError: "
         "EngineCore encountered an issue. See stack trace (above) for the root cause.\n")
V1_FATAL_IMA = _CE + "EngineCore encountered a fatal error.\n" + _tb(_CE, [
    (f"{SP}/vllm/v1/engine/core.py", 389, "run_engine_core", "engine_core.run_busy_loop()"),
    (f"{SP}/vllm/v1/engine/core.py", 413, "run_busy_loop", "self._process_engine_step()"),
    (f"{SP}/vllm/v1/worker/gpu_model_runner.py", 1140, "execute_model",
     "valid_sampled_token_ids = sampled_token_ids.tolist()")],
    "RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors "
    "might be asynchronously reported at some other API call, so the stacktrace below might be "
    "incorrect.") + _DEAD + \
    'INFO:     10.0.0.5:52011 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error\n'

# vLLM v0.6.3 engine/async_llm_engine.py (_log_task_completion, start_background_loop);
# shape from vllm-project/vllm#1001 and #5060
_EP = "ERROR 10-17 10:00:20 async_llm_engine.py:64] "
V0_DEAD_IMA = _EP + "Engine background task failed\n" + _tb(_EP, [
    (f"{SP}/vllm/engine/async_llm_engine.py", 54, "_log_task_completion",
     "return_value = task.result()"),
    (f"{SP}/vllm/engine/async_llm_engine.py", 845, "run_engine_loop", "result = task.result()"),
    (f"{SP}/vllm/worker/model_runner.py", 1618, "execute_model",
     "output: SamplerOutput = self.model.sample(")],
    "RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors "
    "might be asynchronously reported at some other API call, so the stacktrace below might be "
    "incorrect.") + (
    'INFO:     10.0.0.7:41822 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error\n'
    "ERROR:    Exception in ASGI application\n") + _tb("", [
        (f"{SP}/vllm/engine/async_llm_engine.py", 726, "start_background_loop",
         "raise AsyncEngineDeadError(")],
        "vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop has errored already.")

# vLLM v0.6.3 engine/multiprocessing/engine.py (_heartbeat) and client.py (run_heartbeat_loop,
# logger.exception(repr(e))), launcher.py; shape from vllm-project/vllm#10024
_CP = "ERROR 11-05 12:03:00 client.py:250] "
V0_LOOP_DIED = ("INFO 11-05 12:03:00 engine.py:290] Added request chat-58cc8fe8.\n"
                + _CP + "RuntimeError('Engine loop has died')\n" + _tb(_CP, [
                    (f"{SP}/vllm/engine/multiprocessing/client.py", 150, "run_heartbeat_loop",
                     "await self._check_success("),
                    (f"{SP}/vllm/engine/multiprocessing/client.py", 314, "_check_success",
                     "raise response")], "RuntimeError: Engine loop has died")
                + "INFO 11-05 12:03:01 metrics.py:349] Avg prompt throughput: 6.5 tokens/s, Avg "
                "generation throughput: 0.0 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: "
                "0 reqs, GPU KV cache usage: 5.0%, CPU KV cache usage: 0.0%.\n"
                "CRITICAL 11-05 12:03:03 launcher.py:99] MQLLMEngine is already dead, terminating "
                "server process\n"
                'INFO:     10.12.17.5:58489 - "POST /v1/chat/completions HTTP/1.1" 500 Internal '
                "Server Error\n")

# vLLM v0.6.3 core/scheduler.py (_preempt, every 50th preemption)
PREEMPT = ("WARNING 10-17 10:00:09 scheduler.py:1481] Sequence group chat-7c41d0e2 is preempted "
           "by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can "
           "affect the end-to-end performance. Increase gpu_memory_utilization or "
           "tensor_parallel_size to provide more KV cache memory. "
           "total_num_cumulative_preemption=51\n")

# SGLang v0.4.10.post2 managers/scheduler.py and scheduler_metrics_mixin.py
SGLANG = (
    "[2025-08-01 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct', "
    "tp_size=1)\n"
    "[2025-08-01 10:00:30 TP0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, "
    "avail mem=61.20 GB, mem usage=14.38 GB.\n"
    "[2025-08-01 10:00:31 TP0] KV Cache is allocated. #tokens: 863212, K size: 23.05 GB, V size: "
    "23.05 GB\n"
    "[2025-08-01 10:00:40] INFO:     Started server process [812]\n"
    "[2025-08-01 10:00:40] INFO:     Waiting for application startup.\n"
    "[2025-08-01 10:00:40] INFO:     Application startup complete.\n"
    "[2025-08-01 10:00:40] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to "
    "quit)\n"
    "[2025-08-01 10:00:42] The server is fired up and ready to roll!\n"
    "[2025-08-01 10:01:00 TP0] Prefill batch. #new-seq: 8, #new-token: 8192, #cached-token: 0, "
    "token usage: 0.62, #running-req: 120, #queue-req: 40\n"
    "[2025-08-01 10:01:02 TP0] Decode batch. #running-req: 128, #token: 840112, token usage: "
    "0.97, cuda graph: True, gen throughput (token/s): 4210.55, #queue-req: 40, \n"
    "[2025-08-01 10:01:03 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, "
    "#new_token_ratio: 0.4120 -> 0.8000\n"
    "[2025-08-01 10:01:05 TP0] Decode batch. #running-req: 125, #token: 801500, token usage: "
    "0.93, cuda graph: True, gen throughput (token/s): 4101.20, #queue-req: 43, \n"
    '[2025-08-01 10:01:06] INFO:     10.0.0.9:40112 - "POST /v1/chat/completions HTTP/1.1" 200 '
    "OK\n")

# TGI: launcher and router lines (router/src/server.rs, backends/v3), as in
# huggingface/text-generation-inference#3301
TGI = (
    '2025-07-21T16:05:00.000000Z  INFO text_generation_launcher: Args { model_id: '
    '"meta-llama/Meta-Llama-3-8B-Instruct", num_shard: Some(1) }\n'
    "2025-07-21T16:05:59.967500Z  INFO text_generation_launcher: Cuda Graphs are enabled for "
    "sizes [32, 16, 8, 4, 2, 1]\n"
    "2025-07-21T16:06:01.378169Z  INFO text_generation_router_v3: backends/v3/src/lib.rs:137: "
    "Setting max batch total tokens to 115200\n"
    "2025-07-21T16:06:01.561332Z  INFO text_generation_router::server: router/src/server.rs:2341: "
    "Serving revision 5f0b02c75b57c5855da9ae460ce51323ea669d8a of model "
    "meta-llama/Meta-Llama-3-8B-Instruct\n"
    "2025-07-21T16:06:02.000000Z  INFO text_generation_router::server: router/src/server.rs:2437: "
    "Connected\n")
TGI_OK = ('2025-07-21T16:07:00.000000Z  INFO chat_completions{total_time="1.2s" '
          'validation_time="1ms" queue_time="0.1ms" inference_time="1.19s" '
          'time_per_token="20ms" seed="None"}: text_generation_router::server: '
          "router/src/server.rs:637: Success\n")
_GP = ("GenerateParameters { best_of: None, temperature: Some(0.7), repetition_penalty: None, "
       "top_k: None, top_p: None, typical_p: None, do_sample: false, max_new_tokens: Some(1024), "
       "return_full_text: Some(false), stop: [], truncate: None, watermark: false, details: true, "
       "decoder_input_details: false, seed: None, top_n_tokens: None }")
# TGI router/src/infer.rs (Infer::generate_stream: tracing::error!("{err}")) with the
# ValidationError text of router/src/validation.rs; shape from bionic-gpt/bionic-gpt#154 and
# vllm-project/vllm#4936 (the overload line)
TGI_REFUSED = (
    "2023-12-07T13:57:23.464203Z ERROR generate_stream{parameters=" + _GP + "}:async_stream:"
    "generate_stream: text_generation_router::infer: router/src/infer.rs:110: `inputs` tokens + "
    "`max_new_tokens` must be <= 2048. Given: 1235 `inputs` tokens and 1024 `max_new_tokens`\n"
    "2023-12-07T13:57:24.101002Z ERROR compat_generate{default_return_full_text=true}:"
    "generate_stream{parameters=" + _GP + "}:async_stream:generate_stream: "
    "text_generation_router::infer: router/src/infer.rs:130: no permits available\n")

# name -> (category, log): the top finding rests on an entry of known-serving.toml
FIXED: dict[str, tuple[str, str]] = {
    "v0-mq-engine-loop-died": ("serving-stall", V0_START + V0_SERVE + V0_LOOP_DIED),
    "v0-mq-engine-loop-died-after-preemption": (
        "serving-stall", V0_START + V0_SERVE + PREEMPT + V0_LOOP_DIED),
}

# name -> (category, log): faults while serving that the older rules name, with phase serving
SERVING_FAULTS: dict[str, tuple[str, str]] = {
    # device-fault: kernel-hang (a kernel faulted), the run's phase serving
    "v1-illegal-memory-access-in-decode": ("kernel-hang", V1_START + V1_SERVE + V1_FATAL_IMA),
    "v0-illegal-memory-access-then-engine-dead": ("kernel-hang",
                                                  V0_START + V0_SERVE + V0_DEAD_IMA),
    # a refused request earlier does not hide the engine's later fault
    "v1-context-400-then-illegal-memory-access": (
        "kernel-hang", V1_START + V1_SERVE + CONTEXT_400 + V1_FATAL_IMA),
    # nothing admitted, the queue grows, 0.0 tokens/s up to the end (vllm-project/vllm#39863)
    "v0-pending-grows-none-running": ("serving-stall", V0_START + V0_SERVE + "".join(
        _v0_metrics(f"10:00:{s}", "0.0", "0.0", 0, w, "0.0")
        for s, w in (("11", 4), ("16", 9), ("21", 15), ("26", 22)))),
    "v1-waiting-grows-none-running": ("serving-stall", V1_START + V1_SERVE + "".join(
        _v1_metrics(f"10:02:{s}", "0.0", "0.0", 0, w, "0.0")
        for s, w in (("30", 3), ("40", 7), ("50", 12)))),
    # torch c10/cuda OOM raised in the V1 engine core's step under load
    "v1-oom-under-load": ("out-of-memory", V1_START + V1_SERVE
                          + _v1_metrics("10:02:30", "9120.4", "310.2", 64, 12, "97.3")
                          + _CE + "EngineCore encountered a fatal error.\n" + _tb(_CE, [
                              (f"{SP}/vllm/v1/engine/core.py", 389, "run_engine_core",
                               "engine_core.run_busy_loop()"),
                              (f"{SP}/vllm/v1/worker/gpu_model_runner.py", 1090, "execute_model",
                               "logits = self.model.compute_logits(sample_hidden_states, None)")],
                              "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 "
                              "GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is "
                              "free.") + _DEAD),
    # TGI: a shard's CUDA OOM in prefill after refused requests (client error text from
    # huggingface/text-generation-inference#1374)
    "tgi-refused-then-shard-oom": ("out-of-memory", TGI + TGI_OK + TGI_REFUSED + (
        "2023-12-22T00:21:35.318928Z ERROR batch{batch_size=1}:prefill:prefill{id=1 size=1}:"
        "prefill{id=1 size=1}: text_generation_client: router/client/src/lib.rs:33: Server error: "
        "CUDA out of memory. Tried to allocate 222.00 MiB. GPU 0 has a total capacty of 39.39 GiB "
        "of which 217.94 MiB is free.\n")),
    # SGLang v0.4.10.post2 managers/scheduler.py (run_scheduler_process: "Scheduler hit an
    # exception: <traceback>", then SIGQUIT to the parent: entrypoints/engine.py)
    "sglang-scheduler-oom-while-serving": ("out-of-memory", SGLANG + (
        "[2025-08-01 10:06:12 TP0] Scheduler hit an exception: Traceback (most recent call "
        "last):\n"
        f'  File "{SP}/sglang/srt/managers/scheduler.py", line 2561, in run_scheduler_process\n'
        "    scheduler.event_loop_overlap()\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.19 GiB of which 1.10 GiB is free.\n\n"
        "[2025-08-01 10:06:12] Received sigquit from a child process. It usually means the child "
        "failed.\n")),
    # torch ProcessGroupNCCL.cpp watchdog on a TP rank while serving
    "v1-nccl-watchdog-while-serving": ("collective-desync", V1_START + V1_SERVE + (
        "[rank1]:[E501 10:12:31.123456 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=4821, OpType=ALLREDUCE, NumelIn=8192, "
        "NumelOut=8192, Timeout(ms)=600000) ran for 600031 milliseconds before timing out.\n"
        "[rank1]:[E501 10:12:31.123600 ProcessGroupNCCL.cpp:630] [Rank 1] Some NCCL operations "
        "have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU "
        "operations might run on corrupted/incomplete data.\n"
        "terminate called after throwing an instance of 'c10::DistBackendError'\n")),
}

# name -> a serving log with request-level errors or capacity lines that must stay exit 0
HEALTHY: dict[str, str] = {
    "v1-context-length-400": V1_START + V1_SERVE + CONTEXT_400 + V1_TAIL,
    "v1-context-length-400-at-end": V1_START + V1_SERVE + CONTEXT_400,
    # vLLM v0.8.5 serving_chat.py create_chat_completion (_check_model -> 404)
    "v1-unknown-model-404": V1_START + V1_SERVE + (
        "ERROR 05-01 10:02:40 [serving_chat.py:136] Error with model object='error' message='The "
        "model `gpt-4o` does not exist.' type='NotFoundError' param=None code=404\n"
        'INFO:     10.0.0.5:51999 - "POST /v1/chat/completions HTTP/1.1" 404 Not Found\n')
    + V1_TAIL,
    # vLLM v0.8.5 entrypoints/openai/protocol.py (OpenAIBaseModel) and transformers v4.46.0
    # tokenization_utils_base.py
    "v1-ignored-fields-and-long-prompt": V1_START + V1_SERVE + (
        "WARNING 05-01 10:02:40 [protocol.py:71] The following fields were present in the "
        "request but ignored: {'reasoning_effort'}\n"
        "Token indices sequence length is longer than the specified maximum sequence length for "
        "this model (140211 > 131072). Running this sequence through the model will result in "
        "indexing errors\n"
        "INFO 05-01 10:02:44 [async_llm.py:411] Aborted request chatcmpl-5e6f7a8b.\n") + V1_TAIL,
    # vLLM v0.6.3: preemption at full KV cache, a client abort, then recovery
    "v0-preemption-and-abort": V0_START + V0_SERVE + PREEMPT + (
        "INFO 10-17 10:00:10 engine.py:308] Aborted request chat-9d2e7a11.\n")
    + _v0_metrics("10:00:11", "0.0", "610.3", 48, 3, "99.1") + V0_TAIL,
    # vLLM v0.6.3 serving_chat.py (chat_completion_stream_generator: except ValueError)
    "v0-stream-valueerror": V0_START + V0_SERVE + (
        "ERROR 10-17 10:00:09 serving_chat.py:637] error in chat completion stream generator: "
        "Expecting value: line 1 column 1 (char 0)\n") + V0_TAIL,
    # one interval with requests queued and none running, then recovery (a burst arriving)
    "v0-one-queued-interval-then-serving": V0_START + V0_SERVE
    + _v0_metrics("10:00:11", "0.0", "0.0", 0, 4, "0.0") + V0_TAIL,
    "sglang-retraction": SGLANG,
    "tgi-validation-and-overload": TGI + TGI_OK + TGI_REFUSED + TGI_OK,
    "tgi-validation-at-end": TGI + TGI_OK + TGI_REFUSED,
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_serving_fault_names_its_cause(name: str, tmp_path: Path) -> None:
    cat, text = FIXED[name]
    assert_named(KNOWN, name, cat, text, tmp_path)
    assert diagnose([tmp_path / f"{name}.log"]).findings[0].phase == "serving"


@pytest.mark.parametrize("name", sorted(SERVING_FAULTS))
def test_serving_fault_of_other_rules(name: str, tmp_path: Path) -> None:
    cat, text = SERVING_FAULTS[name]
    log = tmp_path / f"{name}.log"
    log.write_text(text)
    res = diagnose([log])
    assert res.exit_code == 1 and res.findings, res.verdict
    top = res.findings[0]
    assert (top.category, res.phase) == (cat, "serving"), (top.category, res.phase, top.rule)


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_request_level_errors_stay_exit_0(name: str, tmp_path: Path) -> None:
    assert_healthy(name, HEALTHY[name], tmp_path)


def test_every_entry_has_a_case() -> None:
    """Each entry of known-serving.toml matches a line of the logs above: cause entries in a
    fault log, advice entries in a healthy one."""
    from sm120kit.diagnose.catalogue.schema import parse_file
    faults = "\n".join(t for _c, t in FIXED.values()).splitlines()
    healthy = "\n".join(HEALTHY.values()).splitlines()
    missing = [e.id for e in parse_file(KNOWN)
               if not any(e.match(ln) for ln in (healthy if e.role == "advice" else faults))]
    assert not missing, missing
