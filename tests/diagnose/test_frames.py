"""Frames are evidence (issue 29 item 2): traceback frames as typed facts, the frame map
(catalogue/frames/frames.toml) and the rule that names phase and category from where the first
traceback ends, on real public logs."""

from __future__ import annotations

from pathlib import Path

from sm120kit.diagnose.catalogue.frames import frame_rules, place
from sm120kit.diagnose.engine import diagnose
from sm120kit.evidence.logs.analyze import LogAnalysis
from sm120kit.evidence.logs.frames import Frame
from sm120kit.evidence.logs.records import Evidence

DATA = Path(__file__).resolve().parents[1] / "data"


def _fr(path: str, func: str) -> Frame:
    return Frame(path, 1, func, Evidence("x", 1, path))


def test_frame_map_loads_and_places_innermost_frames() -> None:
    assert len(frame_rules()) >= 8
    outer = _fr("/usr/lib/python3.12/site-packages/vllm/v1/engine/core.py", "__init__")
    cases = {
        "/x/vllm/model_executor/model_loader/default_loader.py": ("weight-load", "checkpoint-config"),
        "/x/vllm/distributed/device_communicators/pynccl.py": ("startup", "p2p-transport"),
        "/x/vllm/distributed/device_communicators/shm_broadcast.py": ("startup", "shared-memory"),
        "/x/flashinfer/jit/core.py": ("autotune", "library-version"),
        "/x/torch/distributed/distributed_c10d.py": ("startup", "collective-desync"),
        "/x/vllm/v1/core/kv_cache_utils.py": ("startup", "kv-cache-insufficient"),
        "/x/sglang/srt/model_executor/cuda_graph_runner.py": ("capture", "cudagraph-capture"),
    }
    for path, want in cases.items():
        hit = place([outer, _fr(path, "f")])
        assert hit is not None and (hit[0].phase, hit[0].category) == want, path
    hit = place([_fr("/x/vllm/v1/worker/gpu_worker.py", "determine_available_memory")])
    assert hit is not None and hit[0].category == "kv-cache-insufficient"
    assert place([outer, _fr("/home/me/train.py", "main")]) is None


def test_traceback_frames_are_facts_per_process() -> None:
    an = LogAnalysis()
    an.feed_lines("l", [
        "(Worker pid=7) Traceback (most recent call last):",
        '(Worker pid=7)   File "/x/vllm/v1/worker/gpu_worker.py", line 10, in load_model',
        '(Worker pid=7)   File "/x/vllm/model_executor/model_loader/weight_utils.py", line 99, in '
        "safetensors_weights_iterator",
        "(Worker pid=7) OSError: [Errno 5] Input/output error"])
    tb = an.tracebacks.first()
    assert tb is not None and [(f.function, f.line) for f in tb.frames] == [
        ("load_model", 10), ("safetensors_weights_iterator", 99)]


def test_real_logs_get_the_phase_of_their_frames() -> None:
    """vllm-logs/log09 (a crash in process_weights_after_loading, model_loader/utils.py) and
    field-logs-b/sglang-7918 (SGLang's cuda_graph_runner.capture)."""
    res = diagnose([DATA / "vllm-logs" / "log09.txt"])
    f = next(f for f in res.findings if f.rule == "traceback-frames")
    assert (f.phase, f.category) == ("weight-load", "checkpoint-config")
    assert "process_weights_after_loading" in f.summary and f.evidence[0].line > 0
    res = diagnose([DATA / "field-logs-b" / "sglang-7918.txt"])
    f = next(f for f in res.findings if f.rule == "traceback-frames")
    assert (f.phase, f.category) == ("capture", "cudagraph-capture")
