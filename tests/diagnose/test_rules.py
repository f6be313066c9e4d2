"""Every rule on real-format log lines (tests/diagnose/lines.py), through ``diagnose()``.

Scenario logs are assembled from the exact message formats of vLLM/torch/NCCL; each test also
checks that the rule stays quiet where its mechanism is absent.
"""

from __future__ import annotations

from pathlib import Path

from sm120kit.diagnose.engine import DiagnoseResult, diagnose
from sm120kit.diagnose.rules import RULES
from sm120kit.diagnose.rules.base import CATEGORIES

from . import lines as L


def _run(tmp_path: Path, rows: list[str], name: str = "vllm.log") -> DiagnoseResult:
    p = tmp_path / name
    p.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return diagnose([p])


def _rules(res: DiagnoseResult) -> list[str]:
    return [f.rule for f in res.findings]


def test_registry_is_consistent() -> None:
    assert len(RULES) >= 15
    for r in RULES:
        assert r.category in CATEGORIES and r.fix and r.needs
        # a rule cites a page only when it is about this mechanism (never a generic link)
        assert r.link is None or r.link.startswith(("https://", "docs/"))


def test_first_dead_rank_beats_later_timeouts(tmp_path: Path) -> None:
    rows = L.startup(4, 1)
    # rank 2 dies with OOM at t=100; later, the others time out in the watchdog
    rows.append(f"(Worker_TP2 pid=402) ERROR {L.ts(100)} [multiproc_executor.py:650] WorkerProc hit an exception.")
    rows.append("(Worker_TP2 pid=402) Traceback (most recent call last):")
    rows.append('(Worker_TP2 pid=402)   File "/usr/lib/python3/site-packages/vllm/v1/worker/gpu_worker.py", line 312, in execute_model')
    rows.append(f"(Worker_TP2 pid=402) {L.OOM.format(r=2)}")
    rows.append(L.DIED.format(pid=300, ts=L.ts(101), r=2, code=1))
    for r in (0, 1, 3):
        rows.append(L.WD_24.format(r=r, seq=812, op="ALLREDUCE", nin=7340032, nout=7340032,
                                   tmo=600000, ran=600051))
    res = _run(tmp_path, rows)
    assert res.exit_code == 1
    top = res.findings[0]
    assert top.category in ("out-of-memory", "rank-crashed")
    # the crash of rank 2 is folded into its cause (the OOM line it raised): one finding that
    # names the cause, the rank and the process that failed first
    assert not any(f.rule == "first-dead-rank" for f in res.findings)
    oom = next(f for f in res.findings if f.category == "out-of-memory")
    assert oom.rule == "cuda-oom"  # the catalogue entry (catalogue/memory.toml)
    assert oom.ranks == [2] and "Worker_TP2" in oom.summary and "failed first" in oom.summary
    assert any(e.line > 0 and "OutOfMemoryError" in e.text for e in oom.evidence)
    rank2 = next(r for r in res.ranks if r["rank"] == 2)
    assert rank2["exception"].startswith("torch.OutOfMemoryError")
    assert rank2["died"] is not None and rank2["exit_code"] == 1


def test_watchdog_disagreement_names_the_lagging_rank(tmp_path: Path) -> None:
    rows = L.startup(4, 1)
    for r in (0, 1, 3):
        rows.append(L.WD_22.format(r=r, seq=158046, op="ALLREDUCE", nin=2867200, nout=2867200,
                                   tmo=600000, ran=600027))
        rows.append(L.WD_22_STATUS.format(r=r, seq=158046, enq=158046, done=158045))
    rows.append(L.WD_22.format(r=2, seq=158045, op="ALLREDUCE", nin=2867200, nout=2867200,
                               tmo=600000, ran=600020))
    rows.append(L.WD_22_STATUS.format(r=2, seq=158045, enq=158045, done=158044))
    res = _run(tmp_path, rows)
    f = next(f for f in res.findings if f.rule == "watchdog-desync")
    assert f.category == "collective-desync" and f.ranks == [2]
    assert "158045" in f.summary


def test_watchdog_size_mismatch(tmp_path: Path) -> None:
    rows = [L.WD_24.format(r=0, seq=5730, op="BROADCAST", nin=64, nout=64, tmo=600000, ran=600100),
            L.WD_24.format(r=1, seq=5730, op="BROADCAST", nin=24084544, nout=24084544, tmo=600000,
                           ran=600100)]
    res = _run(tmp_path, rows)
    f = next(f for f in res.findings if "mismatch" in f.summary)
    assert f.rule == "watchdog-desync" and f.ranks == [0, 1]


def test_matching_watchdogs_point_at_transport_or_kernel(tmp_path: Path) -> None:
    rows = L.startup(2, 1)
    for r in (0, 1):
        rows.append(L.WD_27_STATUS.format(r=r, seq=40231, enq=40231, done=40230))
    res = _run(tmp_path, rows)
    assert "watchdog-desync" not in _rules(res)
    f = next(f for f in res.findings if f.rule == "all-ranks-in-collective")
    assert f.category == "kernel-hang"


def test_nccl_opcount_desync(tmp_path: Path) -> None:
    rows = L.startup(4, 1)
    for r in range(4):
        rows.append(L.NCCL_COMM.format(pid=400 + r, tid=500 + r, r=r, n=4))
    for op in range(200):
        for r in range(4):
            if r == 3 and op > 150:
                continue  # rank 3 never launched the ops after 150
            rows.append(L.NCCL_COLL.format(pid=400 + r, tid=500 + r, r=r, op=op, n=4))
    rows.append(L.SHM_WAIT.format(pid=300, ts=L.ts(400)))
    rows.append(L.SHM_WAIT.format(pid=300, ts=L.ts(460)))
    res = _run(tmp_path, rows)
    f = next(f for f in res.findings if f.rule == "nccl-opcount-desync")
    assert f.ranks == [3] and "0x96" in f.summary


def test_dcp_unsupported_both_messages(tmp_path: Path) -> None:
    for msg in (L.DCP_LSE, L.DCP_REJECT):
        rows = L.startup(8, 8)
        rows += [f"(Worker_TP0_DCP0 pid=400) ERROR {L.ts(30)} [multiproc_executor.py:898] WorkerProc failed to start.",
                 "(Worker_TP0_DCP0 pid=400) Traceback (most recent call last):",
                 f"(Worker_TP0_DCP0 pid=400) {msg}"]
        res = _run(tmp_path, rows)
        top = res.findings[0]
        assert top.rule == "dcp-unsupported" and top.category == "dcp-unsupported", res.findings
        assert "sm120kit apply" in top.fix
        assert res.config["dcp"] == 8 and res.config["tp"] == 8


def test_dcp_warmup_stall(tmp_path: Path) -> None:
    rows = L.startup(8, 8)
    for r in range(8):
        rows.append(L.KERNEL_WARMUP.format(name=L.worker(r, 8), pid=400 + r, ts=L.ts(200)))
    rows.append(L.AUTOTUNE_LEADER.format(name=L.worker(0, 8), pid=400, ts=L.ts(201)))
    for r in (1, 2, 3, 5, 6, 7):  # ranks 0 and 4 never got past the autotune barrier
        rows.append(L.AUTOTUNE_LOADED.format(name=L.worker(r, 8), pid=400 + r, ts=L.ts(230), r=r))
    for k in range(5):
        rows.append(L.SHM_WAIT.format(pid=300, ts=L.ts(300 + 60 * k)))
    res = _run(tmp_path, rows)
    top = res.findings[0]
    assert top.rule == "dcp-warmup-stall" and top.category == "dcp-warmup"
    assert top.ranks == [0, 4] and "DCP=8" in top.summary
    # the same log with DCP=1 is not a DCP warmup problem
    rows1 = [r.replace("decode_context_parallel_size=8", "decode_context_parallel_size=1")
             .replace("_DCP", "_XX") for r in rows]
    res1 = _run(tmp_path, rows1, "dcp1.log")
    assert "dcp-warmup-stall" not in _rules(res1)
    # without DCP it is still a per-rank autotune divergence (some ranks loaded a cache)
    assert res1.findings and res1.findings[0].category == "autotune-deadlock"
    assert res1.findings[0].ranks == [0, 4]


def test_healthy_startup_with_warmup_shm_waits_is_clean(tmp_path: Path) -> None:
    rows = L.startup(2, 1)
    rows.append(L.SHM_WAIT.format(pid=300, ts=L.ts(100)))
    for r in range(2):
        rows.append(L.GRAPH_DONE.format(name=L.worker(r), pid=400 + r, ts=L.ts(150)))
    rows.append(f"(EngineCore_DP0 pid=300) INFO {L.ts(151)} [core.py:299] init engine (profile, create kv cache, warmup model) took 148.17 s")
    res = _run(tmp_path, rows)
    assert res.findings == [] and res.exit_code == 0
    assert res.verdict.startswith(("healthy", "progressing"))


def test_shared_memory(tmp_path: Path) -> None:
    rows = L.startup(2, 1) + [L.NCCL_SHM_WARN.format(pid=400, tid=410, r=0)]
    res = _run(tmp_path, rows)
    f = next(f for f in res.findings if f.category == "shared-memory")
    assert f.rule == "shm-segment" and "--ipc=host" in f.fix


def test_p2p_transport(tmp_path: Path) -> None:
    rows = L.startup(2, 1) + [L.NCCL_P2P_WARN.format(pid=401, tid=411, r=1)]
    res = _run(tmp_path, rows)
    assert next(f for f in res.findings if f.rule == "p2p-transport").category == "p2p-transport"
    # stall right after NCCL init on P2P
    rows = L.startup(2, 1)[:3] + [L.NCCL_P2P.format(pid=400 + r, tid=410 + r, r=r, peer=1 - r)
                                  for r in (0, 1)]
    rows += [L.SHM_WAIT.format(pid=300, ts=L.ts(100 + 60 * k)) for k in range(3)]
    res = _run(tmp_path, rows, "p2p2.log")
    assert "p2p-transport" in _rules(res)


def test_library_version_kwarg(tmp_path: Path) -> None:
    rows = L.startup(2, 1) + ["(Worker_TP0 pid=400) Traceback (most recent call last):",
                              f"(Worker_TP0 pid=400) {L.KWARG}"]
    res = _run(tmp_path, rows)
    f = next(f for f in res.findings if f.category == "library-version")
    assert f.rule == "flashinfer-sparse-mla-api" and "FlashInfer" in f.summary  # catalogue entry


def test_device_fault(tmp_path: Path) -> None:
    rows = L.startup(2, 1) + ["(Worker_TP1 pid=401) Traceback (most recent call last):"]
    rows += [f"(Worker_TP1 pid=401) {x}" for x in L.ILLEGAL.split("\n")]
    res = _run(tmp_path, rows)
    f = next(f for f in res.findings if f.rule == "device-fault")
    assert f.category == "kernel-hang"


def test_config_invalid(tmp_path: Path) -> None:
    rows = [f"(APIServer pid=1) INFO {L.ts(0)} [utils.py:240] non-default args: {{'tensor_parallel_size': 6, 'decode_context_parallel_size': 4}}",
            "(APIServer pid=1) Traceback (most recent call last):",
            f"(APIServer pid=1) {L.DIVISIBLE}"]
    res = _run(tmp_path, rows)
    assert res.findings[0].category == "config-invalid"
    # known-dcp-mla.toml's entry names the pair (config.toml's generic config-rejected names no flag)
    assert res.findings[0].rule == "dcp-size-not-dividing-tp" and "divisible" in res.findings[0].summary
    assert res.config["tp"] == 6 and res.config["dcp"] == 4


def test_timeouts_too_short(tmp_path: Path) -> None:
    rows = L.startup(2, 1) + [L.JIT.format(name="Worker_TP1", pid=401, ts=L.ts(900)),
                              L.RPC_TIMEOUT.format(pid=300, ts=L.ts(1200))]
    res = _run(tmp_path, rows)
    f = next(f for f in res.findings if f.rule == "timeout-too-short")
    assert "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS" in f.fix
    rows = L.startup(2, 1) + [L.ENGINE_READY_TIMEOUT.format(pid=1)]
    res = _run(tmp_path, rows, "ready.log")
    f = next(f for f in res.findings if f.rule == "cold-start-timeout")
    assert f.category == "cold-start-timeout" and f.phase == "weight-load"
    assert "VLLM_ENGINE_READY_TIMEOUT_S" in f.fix and "weight-load" in f.summary


def test_interposer_only_on_failed_runs(tmp_path: Path) -> None:
    healthy = [L.PRELOAD.format(pid=1, ts=L.ts(0))] + L.startup(2, 1)
    assert "interposer" not in {f.category for f in _run(tmp_path, healthy).findings}
    stalled = healthy + [L.SHM_WAIT.format(pid=300, ts=L.ts(100 + 60 * k)) for k in range(3)]
    res = _run(tmp_path, stalled, "stalled.log")
    f = next(f for f in res.findings if f.category == "interposer")  # catalogue/interposer.toml
    assert f.rule == "nccl-library-replaced" and f.confidence <= 0.5


def test_dcp_full_cudagraph(tmp_path: Path) -> None:
    rows = L.startup(4, 4, cg="'FULL_AND_PIECEWISE'")
    rows.append(f"(APIServer pid=1) INFO {L.ts(300)} [api_server.py:603] Starting vLLM server on http://0.0.0.0:8000")
    rows.append('(APIServer pid=1) INFO:     127.0.0.1:50334 - "POST /v1/chat/completions HTTP/1.1" 200 OK')
    for r in range(4):
        rows.append(f"({L.worker(r, 4)} pid={400 + r}) INFO {L.ts(301)} [loggers.py:1] Engine 000: Avg prompt throughput: 1.0 tokens/s")
    rows += [L.SHM_WAIT.format(pid=300, ts=L.ts(400 + 60 * k)) for k in range(3)]
    rows.append(L.RPC_TIMEOUT.format(pid=300, ts=L.ts(700)))
    res = _run(tmp_path, rows)
    f = next(f for f in res.findings if f.rule == "dcp-full-cudagraph")
    assert "PIECEWISE" in f.fix


def test_v0_shm_wait_and_worker_death(tmp_path: Path) -> None:
    rows = [L.SHM_WAIT_V0.format(pid=3106, ts="10-12 22:31:22"),
            "ERROR 10-12 22:32:22 multiproc_worker_utils.py:116] Worker VllmWorkerProcess pid 3107 died, exit code: -6"]
    res = _run(tmp_path, rows)
    assert res.stalls["shm_broadcast_waits"] == 1
    assert res.stalls["worker_deaths"][0]["exit_code"] == -6
    assert res.findings and res.findings[0].category == "rank-crashed"


def test_findings_sorted_and_json_shape(tmp_path: Path) -> None:
    rows = L.startup(4, 1) + ["(Worker_TP1 pid=401) Traceback (most recent call last):",
                              f"(Worker_TP1 pid=401) {L.OOM.format(r=1)}",
                              L.SHM_WAIT.format(pid=300, ts=L.ts(200))]
    d = _run(tmp_path, rows).to_dict()
    confs = [f["confidence"] for f in d["findings"]]
    assert confs == sorted(confs, reverse=True)
    for f in d["findings"]:
        assert set(f) >= {"rule", "category", "confidence", "summary", "evidence", "fix"}
        assert 0 <= f["confidence"] <= 1 and f["category"] in CATEGORIES
        for e in f["evidence"]:
            assert set(e) == {"source", "line", "text"}


def test_dcp_warmup_stall_followed_by_nccl_timeouts(tmp_path: Path) -> None:
    """The motivating hang: TP8/DCP8 stuck in the sparse-MLA warmup, then (600 s later) every
    rank's watchdog fires on the same collective. The cause stays the warmup stage."""
    rows = L.startup(8, 8)
    rows += [L.KERNEL_WARMUP.format(name=L.worker(r, 8), pid=400 + r, ts=L.ts(200)) for r in range(8)]
    rows.append(L.AUTOTUNE_LEADER.format(name=L.worker(0, 8), pid=400, ts=L.ts(201)))
    rows += [L.SHM_WAIT.format(pid=300, ts=L.ts(260 + 60 * k)) for k in range(10)]
    rows += [L.WD_24.format(r=r, seq=57, op="BROADCAST", nin=1, nout=1, tmo=600000, ran=600090)
             for r in range(8)]
    res = _run(tmp_path, rows)
    assert res.findings[0].rule == "dcp-warmup-stall", [(f.rule, f.confidence) for f in res.findings]
    assert sorted(res.findings[0].ranks) == list(range(8))
    assert all(r["phase"] == "error" for r in res.ranks if r["rank"] is not None)


def test_reported_hang_while_serving_is_a_serving_stall(tmp_path: Path) -> None:
    """A ticket whose author says the server gets stuck, above a log that ends in serving with no
    error recorded: the stall is placed in serving (weakly: 0.45, a position); the same log
    without the words stays healthy."""
    log = [
        "INFO 03-01 10:00:00 api_server.py:212] vLLM API server version 0.6.3",
        "INFO 03-01 10:02:10 launcher.py:19] Available routes are:",
        "INFO:     Started server process [1]",
        "INFO:     Application startup complete.",
        "INFO 03-01 10:05:00 metrics.py:351] Avg prompt throughput: 12.0 tokens/s, Avg generation "
        "throughput: 48.1 tokens/s, Running: 4 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV "
        "cache usage: 3.1%, CPU KV cache usage: 0.0%.",
        'INFO:     10.0.0.7:50312 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    ]
    said = ["We run vllm as a server and it gets stuck randomly after some minutes of work, "
            "sometimes after an hour; the last lines are:", "```", *log, "```"]
    res = _run(tmp_path, said, "ticket.txt")
    assert res.exit_code == 1 and res.findings[0].category == "serving-stall", res.verdict
    assert res.findings[0].confidence <= 0.5
    quiet = _run(tmp_path, log, "quiet.txt")
    assert quiet.exit_code == 0 and not quiet.findings, quiet.verdict


def test_reported_hang_where_the_excerpt_stops_names_that_step(tmp_path: Path) -> None:
    """The reporter says start-up hangs and the pasted log of a 4-GPU start stops inside the KV
    cache profiling run with no error: the step's kind of cause (its first tensor-parallel
    all-reduces: p2p-transport) at 0.45 instead of a bare 'unknown'; the same excerpt without the
    words stays the weak 0.3 reading of where it was cut."""
    log = [
        "INFO 05-02 09:00:00 [api_server.py:1043] vLLM API server version 0.29.0",
        "INFO 05-02 09:00:01 [config.py:1472] Defaulting to use mp for distributed inference",
        "INFO 05-02 09:00:02 [core.py:69] Initializing a V1 LLM engine (v0.29.0) with config: "
        "model='Qwen/Qwen3-32B', tensor_parallel_size=4, pipeline_parallel_size=1",
        "(VllmWorker rank=0 pid=301) INFO 05-02 09:01:10 [gpu_model_runner.py:1595] Model loading "
        "took 15.5 GiB and 60.2 s",
        "(VllmWorker rank=0 pid=301) INFO 05-02 09:01:20 [backends.py:462] Using cache directory: "
        "/root/.cache/vllm/torch_compile_cache/8a1c/rank_0_0 for vLLM's torch.compile",
        "(VllmWorker rank=0 pid=301) INFO 05-02 09:01:35 [monitor.py:33] torch.compile takes "
        "14.2 s in total",
        # vllm/v1/worker/gpu_model_runner.py (v0.29.0): the profiling run's first line
        "(VllmWorker rank=0 pid=301) INFO 05-02 09:01:36 [gpu_model_runner.py:6769] Profiling "
        "CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)",
    ]
    said = ["Startup hangs forever at this point, no error and nothing more is printed:",
            "```", *log, "```"]
    res = _run(tmp_path, said, "ticket.txt")
    top = res.findings[0] if res.findings else None
    assert res.exit_code == 1 and top is not None and top.rule == "stopped-excerpt", res.verdict
    assert top.confidence == 0.45, top
    cut = _run(tmp_path, ["```", *log, "```"], "cut.txt")  # the same paste, no words
    assert cut.findings and cut.findings[0].confidence == 0.3, cut.verdict
    assert cut.findings[0].category == top.category


def test_empty_failed_procs_after_a_crash_is_the_crash_not_a_cold_start(tmp_path: Path) -> None:
    """``Failed core proc(s): {}`` says an engine process ended before its exit code was read
    (vllm/v1/engine/utils.py wait_for_engine_startup), not that a wait ran out: after the engine
    core's own traceback the crash is the answer, even when its message names nvcc; only
    compile progress with no crash reads as a cold start that ended at the ready wait."""
    head = ["INFO 06-01 10:00:00 [api_server.py:1043] vLLM API server version 0.10.1",
            "(EngineCore_0 pid=88) INFO 06-01 10:00:20 [gpu_model_runner.py:1843] Starting to "
            "load model deepseek-ai/DeepSeek-V3.2-Exp..."]
    crash = ["(EngineCore_0 pid=88) ERROR 06-01 10:01:00 [core.py:700] EngineCore failed to start.",
             "(EngineCore_0 pid=88) ERROR 06-01 10:01:00 [core.py:700] Traceback (most recent "
             "call last):",
             '(EngineCore_0 pid=88) ERROR 06-01 10:01:00 [core.py:700]   File "/usr/lib/python3.12/'
             'site-packages/vllm/attention/ops/flashmla.py", line 30, in <module>',
             "(EngineCore_0 pid=88) ERROR 06-01 10:01:00 [core.py:700] ImportError: "
             "vllm._flashmla_C is not available, likely was not compiled due to insufficient nvcc "
             "version or a supported arch was not in the list of target arches to compile for."]
    tail = ["RuntimeError: Engine core initialization failed. See root cause above. Failed core "
            "proc(s): {}"]
    res = _run(tmp_path, head + crash + tail, "crash.log")
    assert res.findings and res.findings[0].category != "cold-start-timeout", res.verdict
    assert "cold-start-timeout" not in _rules(res)
    jit = ["(EngineCore_0 pid=88) INFO 06-01 10:00:40 [jit.py:120] FlashInfer JIT compiling "
           "module batch_mla_sparse_sm120 (this may take several minutes)"]
    cold = _run(tmp_path, head + jit + tail, "cold.log")
    assert cold.findings and cold.findings[0].category == "cold-start-timeout", cold.verdict
