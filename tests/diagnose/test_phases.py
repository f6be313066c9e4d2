"""Phase classification and stall signals on the real public vLLM logs (tests/data/vllm-logs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sm120kit.evidence.phases import PHASES, PhaseTracker, classify_line, stall_signal

from .conftest import manifest

MANIFEST = manifest()


def _lines(path: Path) -> list[str]:
    # split on \n only: bare CRs from tqdm stay inside the line, as a live pipe delivers them
    return path.read_bytes().decode("utf-8", "replace").split("\n")


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["id"] for e in MANIFEST])
def test_phases_seen_match_manifest(entry: dict[str, Any], log_dir: Path) -> None:
    tr = PhaseTracker()
    for i, line in enumerate(_lines(log_dir / f"{entry['id']}.txt")):
        tr.feed(line, float(i), "stdout")
    assert tr.phases_seen() == entry["phases_seen"]
    # where the run ended up agrees with the manifest's outcome
    if entry["outcome"] == "crashed":
        assert tr.current in ("error", "shutdown")
    elif entry["outcome"] == "started":
        assert tr.current in ("api-server-ready", "serving", "shutdown", "cuda-graph-capture")
    assert [p for p, _t, _s in tr.timeline] == tr.phases_seen()
    assert all(s == "stdout" for _p, _t, s in tr.timeline)


def test_phase_names_are_the_readme_names() -> None:
    assert PHASES == (
        "engine-init", "nccl-init", "model-load", "torch-compile", "kv-cache-profile",
        "kernel-warmup", "autotune", "cuda-graph-capture", "engine-ready", "api-server-ready",
        "serving", "shutdown", "error",
    )


@pytest.mark.parametrize(
    ("line", "phase"),
    [
        ("(Worker_TP3_DCP3 pid=353) INFO 05-15 05:34:09 [gpu_model_runner.py:5333] Starting to load model x...", "model-load"),
        ("\x1b[0;36m(EngineCore_DP0 pid=77352)\x1b[0;0m INFO 10-22 09:43:49 [core.py:299] init engine (profile, create kv cache, warmup model) took 148.17 s", "engine-ready"),
        ("(VllmWorker rank=0 pid=85) ERROR 03-20 23:26:06 [multiproc_executor.py:375] WorkerProc failed to start.", "error"),
        ("node-01:3873285:3873285 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM", "nccl-init"),
        ("(Worker_TP0 pid=189) INFO 07-18 13:33:42 [flashinfer_sparse_mla_warmup.py:124] Autotuning FlashInfer SM120 sparse MLA DSv4 decode with cache: /c", "autotune"),
        ("(APIServer pid=1) INFO:     127.0.0.1:50334 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK", "serving"),
        ("(APIServer pid=1) INFO:     127.0.0.1:50334 - \"GET /health HTTP/1.1\" 200 OK", None),
        ("Traceback (most recent call last):", "error"),
        # SGLang's cuda_graph_runner.py tqdm bar (field-logs-e sglang-18263, a start in capture)
        ("Capturing batches (bs=496 avail_mem=20.14 GB):   2%|\u258a        | 1/52 [00:03<03:17,  3.88s/it]", "cuda-graph-capture"),
        ("[2025-08-04 10:10:36 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=17.21 GB", "cuda-graph-capture"),
        ("", None),
        ("just some application print", None),
    ],
)
def test_classify_examples(line: str, phase: str | None) -> None:
    assert classify_line(line) == phase


@pytest.mark.parametrize(
    ("line", "sig"),
    [
        ("(EngineCore pid=308) INFO 08-12 07:49:06 [shm_broadcast.py:801] No available shared memory broadcast block found in 60 seconds. This typically happens when some processes are hanging", "shm-broadcast-wait"),
        ("(VllmWorkerProcess pid=3106) WARNING 10-12 22:31:22 shm_broadcast.py:396] No available block found in 60 second. ", "shm-broadcast-wait"),
        ("[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=158046, OpType=GATHER, NumelIn=2867200, NumelOut=0, Timeout(ms)=600000) ran for 600027 milliseconds before timing out.", "watchdog-timeout"),
        ("[PG ID 2 PG GUID 3 Rank 7]  failure detected by watchdog at work sequence id: 40231 PG status: last enqueued work: 40267, last completed work: 40230", "watchdog-timeout"),
        ("(EngineCore_DP0 pid=1) ERROR 10-22 09:43:49 [core.py:1] TimeoutError: RPC call to sample_tokens timed out.", "rpc-timeout"),
        ("(EngineCore_DP0 pid=1) ERROR 10-22 09:43:49 [multiproc_executor.py:381] Worker proc VllmWorker-3 died unexpectedly (exit code: -9), shutting down executor.", "worker-died"),
        ("(VllmWorker rank=0 pid=85) ERROR 03-20 23:26:06 [multiproc_executor.py:375] WorkerProc failed to start.", "worker-died"),
        ("(Worker_TP0 pid=5) INFO 05-15 05:34:09 [gpu_model_runner.py:5333] Starting to load model", None),
    ],
)
def test_stall_signals(line: str, sig: str | None) -> None:
    assert stall_signal(line) == sig


def test_tracker_never_goes_back_from_serving() -> None:
    tr = PhaseTracker()
    assert tr.feed("Starting to load model m", 1.0) == "model-load"
    assert tr.feed("Capturing CUDA graphs (PIECEWISE): 1/7", 2.0) == "cuda-graph-capture"
    # V2 runner: KV sizing after a capture is a real (sideways) move inside warmup
    assert tr.feed("Available KV cache memory: 11.47 GiB", 3.0) == "kv-cache-profile"
    assert tr.feed("(APIServer pid=1) INFO x [api_server.py:1] Starting vLLM server on http://0.0.0.0:8000", 4.0) == "api-server-ready"
    assert tr.feed("(APIServer pid=1) INFO x [loggers.py:1] Engine 000: Avg prompt throughput: 1.0 tokens/s", 5.0) == "serving"
    # late startup lines after serving: recorded in the timeline, current stays
    assert tr.feed("Autotuning FlashInfer SM120 sparse MLA decode with cache: /x", 6.0) is None
    assert tr.feed("Application startup complete.", 7.0) is None
    assert tr.current == "serving"
    assert "autotune" in tr.phases_seen()
    assert tr.feed("Traceback (most recent call last):", 8.0) == "error"
    assert tr.feed("x:1:2 [0] NCCL INFO Init COMPLETE", 9.0) is None
    assert tr.current == "error"
    assert tr.feed("Shutting down", 10.0) == "shutdown"


def test_tracker_records_stalls() -> None:
    tr = PhaseTracker()
    tr.feed("(EngineCore pid=3) INFO 1 [shm_broadcast.py:1] No available shared memory broadcast block found in 60 seconds.", 61.0, "stderr")
    assert tr.stalls == [("shm-broadcast-wait", 61.0, "stderr")]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_classify_never_raises(s: str) -> None:
    p = classify_line(s)
    assert p is None or p in PHASES
    sig = stall_signal(s)
    assert sig is None or isinstance(sig, str)
    tr = PhaseTracker()
    tr.feed(s, 0.0)
    assert tr.current is None or tr.current in PHASES


@pytest.mark.parametrize(("line", "phase"), [
    # SGLang's scheduler and server (lines of tests/data/engine-logs and sgl-project threads)
    ("[2025-07-16 05:13:20] Init torch distributed begin.", "nccl-init"),
    ("[2025-03-27 21:33:30 TP0] Load weight end. type=Gemma3ForConditionalGeneration", "model-load"),
    ("[2025-03-27 21:33:31 TP0] KV Cache is allocated. #tokens: 834615, K size: 54.12 GB",
     "kv-cache-profile"),
    ("[2025-03-27 21:33:31 TP0] Capture cuda graph begin. This can take up to several minutes.",
     "cuda-graph-capture"),
    ("The server is fired up and ready to roll!", "api-server-ready"),
    # TGI's launcher (after the envelope rewrite of its tracing stamp)
    ("INFO 05-01 01:17:02 [shard-manager] text_generation_launcher: Waiting for shard to be "
     "ready... rank=1", "model-load"),
    ("INFO 05-01 01:17:02 [shard-manager] text_generation_launcher: Shard ready in 12.4s rank=0",
     "engine-ready"),
])
def test_other_engines_phases(line: str, phase: str) -> None:
    assert classify_line(line) == phase
