"""Real log lines of known failures, in the exact formats vLLM/torch/NCCL print them.

The texts come from public reports quoted in shared/reference/hang-diagnostics.md (§2.2-2.3) and
doctor-checks.md (§4), and from the message strings in the vLLM/torch/NCCL sources; pids, ranks
and times are filled in per scenario by ``scenario()``.
"""

from __future__ import annotations

# torch ProcessGroupNCCL watchdog, three eras
WD_22 = ("[rank{r}]:[E ProcessGroupNCCL.cpp:563] [Rank {r}] Watchdog caught collective operation "
         "timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={nin}, NumelOut={nout}, "
         "Timeout(ms)={tmo}) ran for {ran} milliseconds before timing out.")
WD_22_STATUS = ("[rank{r}]:[E ProcessGroupNCCL.cpp:1537] [PG 1 Rank {r}] Timeout at NCCL work: "
                "{seq}, last enqueued NCCL work: {enq}, last completed NCCL work: {done}.")
WD_24 = ("[rank{r}]:[E1012 22:31:22.267261276 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught "
         "collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={nin}, "
         "NumelOut={nout}, Timeout(ms)={tmo}) ran for {ran} milliseconds before timing out.")
WD_24_STATUS = ("[rank{r}]:[E1012 22:31:22.267870 ProcessGroupNCCL.cpp:1664] [PG 3 Rank {r}] "
                "Exception (either an error or timeout) detected by watchdog at work: {seq}, last "
                "enqueued NCCL work: {enq}, last completed NCCL work: {done}.")
WD_27_STATUS = ("[rank{r}]:[E1012 22:31:22.267870 ProcessGroupNCCL.cpp:2057] [PG ID 2 PG GUID 3 "
                "Rank {r}]  failure detected by watchdog at work sequence id: {seq} PG status: last "
                "enqueued work: {enq}, last completed work: {done}")
WD_TEARDOWN = ("[rank{r}]:[E1012 22:31:22.268 ProcessGroupNCCL.cpp:630] [Rank {r}] Some NCCL "
               "operations have failed or timed out. Due to the asynchronous nature of CUDA "
               "kernels, subsequent GPU operations might run on corrupted/incomplete data.")
WD_FR_OFF = ("[rank{r}]:[E1012 22:31:22.268 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0 Rank {r}] "
             "Stack trace of the failed collective not found, potentially because FlightRecorder "
             "is disabled. You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero "
             "value.")

# vLLM (0.2x-0.33 formats)
SHM_WAIT = ("(EngineCore_DP0 pid={pid}) INFO {ts} [shm_broadcast.py:698] No available shared memory "
            "broadcast block found in 60 seconds. This typically happens when some processes are "
            "hanging or doing some time-consuming work (e.g. compilation, weight/kv cache "
            "quantization).")
SHM_WAIT_V0 = ("(VllmWorkerProcess pid={pid}) WARNING {ts} shm_broadcast.py:396] No available block "
               "found in 60 second. ")
RPC_TIMEOUT = ("(EngineCore_DP0 pid={pid}) ERROR {ts} [core.py:1586] TimeoutError: RPC call to "
               "sample_tokens timed out.")
DIED = ("(EngineCore_DP0 pid={pid}) ERROR {ts} [multiproc_executor.py:381] Worker proc "
        "VllmWorker-{r} died unexpectedly (exit code: {code}), shutting down executor.")
WORKER_FAILED = "({name} pid={pid}) ERROR {ts} [multiproc_executor.py:898] WorkerProc failed to start."
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {r} has a total "
       "capacity of 94.97 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process "
       "has 93.90 GiB memory in use.")
DCP_LSE = ("AssertionError: Decode Context Parallelism (DCP) requires attention implementations to "
           "return the softmax LSE during decode, but the impl FlashInferMLASparseSM120Impl does "
           "not return the softmax LSE for decode.")
DCP_REJECT = ("ValueError: Selected backend AttentionBackendEnum.FLASHINFER_MLA_SPARSE_SM120 is not "
              "valid for this configuration. Reason: ['DCP not supported']")
AUTOTUNE_LEADER = ("({name} pid={pid}) INFO {ts} [flashinfer_sparse_mla_warmup.py:124] Autotuning "
                   "FlashInfer SM120 sparse MLA decode with cache: /root/.cache/vllm/flashinfer_sm120.json")
AUTOTUNE_LOADED = ("({name} pid={pid}) INFO {ts} [flashinfer_sparse_mla_warmup.py:160] FlashInfer "
                   "SM120 sparse MLA decode autotune cache loaded on rank {r} from "
                   "/root/.cache/vllm/flashinfer_sm120.json.")
KERNEL_WARMUP = ("({name} pid={pid}) INFO {ts} [kernel_warmup.py:109] Warming up FlashInfer SM120 "
                 "sparse MLA decode kernels.")
GRAPH_DONE = ("({name} pid={pid}) INFO {ts} [gpu_model_runner.py:6707] Graph capturing finished in "
              "13 secs, took 1.11 GiB")
LOAD = "({name} pid={pid}) INFO {ts} [gpu_model_runner.py:5333] Starting to load model zai-org/GLM-5.1..."
ENGINE_INIT = ("(EngineCore_DP0 pid={pid}) INFO {ts} [core.py:109] Initializing a V1 LLM engine "
               "(v0.33.0) with config: model='zai-org/GLM-5.1', speculative_config=None, "
               "tensor_parallel_size={tp}, pipeline_parallel_size=1, data_parallel_size=1, "
               "decode_context_parallel_size={dcp}, kv_cache_dtype=fp8_ds_mla, "
               "compilation_config={{'cudagraph_mode': {cg}}}")
WORLD = ("(Worker pid={pid}) INFO {ts} [parallel_state.py:1427] world_size={w} rank={r} "
         "local_rank={r} distributed_init_method=tcp://127.0.0.1:42985 backend=nccl")
BACKEND = "({name} pid={pid}) INFO {ts} [cuda.py:313] Using AttentionBackendEnum.FLASHINFER_MLA_SPARSE_SM120 backend."

# NCCL
NCCL_VERSION = "node-01:{pid}:{pid} [{r}] NCCL INFO NCCL version 2.30.7+cuda13.0"
NCCL_COMM = ("node-01:{pid}:{tid} [{r}] NCCL INFO comm 0x5581d0a0 rank {r} nRanks {n} nNodes 1 "
             "localRanks {n} localRank {r} MNNVL 0")
NCCL_P2P = "node-01:{pid}:{tid} [{r}] NCCL INFO Channel 00/0 : {r}[{r}] -> {peer}[{peer}] via P2P/CUMEM"
NCCL_COLL = ("node-01:{pid}:{tid} [{r}] NCCL INFO AllReduce: opCount {op:x} sendbuff 0x7f3a00000000 "
             "recvbuff 0x7f3a00000000 count 4096 datatype 7 op 0 root 0 comm 0x5581d0a0 "
             "[nranks={n}] stream 0x5581d0f0")
NCCL_SHM_WARN = ("node-01:{pid}:{tid} [{r}] include/shm.h:28 NCCL WARN Error while creating shared "
                 "memory segment /dev/shm/nccl-Xk3Pq2 (size 9637888), error: No space left on device (28)")
NCCL_P2P_WARN = ("node-01:{pid}:{tid} [{r}] transport/p2p.cc:277 NCCL WARN Cuda failure 'peer access "
                 "is not supported between these two devices'")
CUSTOM_AR_P2P = ("({name} pid={pid}) WARNING {ts} [custom_all_reduce.py:144] Custom allreduce is "
                 "disabled because your platform lacks GPU P2P capability or P2P test failed. To "
                 "silence this warning, specify disable_custom_all_reduce=True explicitly.")
ILLEGAL = ("RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors "
           "might be asynchronously reported at some other API call, so the stacktrace below might "
           "be incorrect.")
KWARG = ("TypeError: trtllm_batch_decode_with_kv_cache_mla() got an unexpected keyword argument "
         "'kv_scale_format'")
DIVISIBLE = "ValueError: tp_size=6 must be divisible by dcp_size=4."
ENGINE_READY_TIMEOUT = ("(APIServer pid={pid}) TimeoutError: Timed out waiting for engine core "
                        "processes to start. This is often caused by slow weight loading for large "
                        "models. Waited 600s (configured by VLLM_ENGINE_READY_TIMEOUT_S).")
JIT = ("({name} pid={pid}) WARNING {ts} [jit_monitor.py:126] Triton kernel JIT compilation during "
       "inference: _compute_slot_mapping_kernel (constexprs={{BLOCK_SIZE: 1024}})")
PRELOAD = ("(APIServer pid={pid}) INFO {ts} [nccl.py:24] Found nccl from environment variable "
           "VLLM_NCCL_SO_PATH=/opt/libnccl-local-inference.so.2.30.4")


def ts(sec: int) -> str:
    """A vLLM timestamp ``MM-DD HH:MM:SS`` ``sec`` seconds after 05-15 05:00:00."""
    h, rem = divmod(sec, 3600)
    return f"05-15 {5 + h:02d}:{rem // 60:02d}:{rem % 60:02d}"


def worker(r: int, dcp: int = 1) -> str:
    return f"Worker_TP{r}" + (f"_DCP{r % dcp}" if dcp > 1 else "")


def startup(tp: int, dcp: int, t0: int = 0, cg: str = "PIECEWISE") -> list[str]:
    """A minimal real-format startup up to model load on every rank."""
    out = [ENGINE_INIT.format(pid=300, ts=ts(t0), tp=tp, dcp=dcp, cg=cg)]
    for r in range(tp):
        out.append(WORLD.format(pid=400 + r, ts=ts(t0 + 2), w=tp, r=r))
    for r in range(tp):
        out.append(LOAD.format(name=worker(r, dcp), pid=400 + r, ts=ts(t0 + 5)))
        out.append(BACKEND.format(name=worker(r, dcp), pid=400 + r, ts=ts(t0 + 5)))
    return out
