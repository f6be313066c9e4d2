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
        "/x/torch/distributed/distributed_c10d.py": ("startup", "p2p-transport"),
        "/x/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py":
            ("startup", "config-invalid"),
        "/x/vllm/config/parallel.py": ("startup", "config-invalid"),
        "/x/sglang/srt/server_args.py": ("startup", "config-invalid"),
        "/x/vllm/transformers_utils/config.py": ("startup", "checkpoint-config"),
        "/x/triton/backends/nvidia/compiler.py": ("autotune", "library-version"),
        "/x/vllm/v1/core/kv_cache_utils.py": ("startup", "kv-cache-insufficient"),
        "/x/sglang/srt/model_executor/cuda_graph_runner.py": ("capture", "cudagraph-capture"),
    }
    funcs = {"/x/sglang/srt/model_executor/cuda_graph_runner.py": "capture"}  # not its replay
    for path, want in cases.items():
        hit = place([outer, _fr(path, funcs.get(path, "f"))])
        assert hit is not None and (hit[0].phase, hit[0].category) == want, path
    hit = place([_fr("/x/vllm/v1/worker/gpu_worker.py", "determine_available_memory")])
    assert hit is not None and hit[0].category == "kv-cache-insufficient"
    assert place([outer, _fr("/home/me/train.py", "main")]) is None
    # functions decide where the file alone does not: a model's forward is not its construction
    model = "/x/vllm/model_executor/models/llama.py"
    assert place([outer, _fr(model, "__init__")])[0].category == "checkpoint-config"  # type: ignore[index]
    assert place([outer, _fr(model, "forward")]) is None
    hit = place([outer, _fr("/x/transformers/models/auto/configuration_auto.py", "__getitem__")])
    assert hit is not None and hit[0].category == "library-version"  # an unknown model_type
    hit = place([outer, _fr("/x/vllm/v1/worker/gpu_worker.py", "load_model")])
    assert hit is not None and hit[0].phase == "weight-load"


def test_import_time_failure_only_from_the_innermost_frame() -> None:
    """A module body that fails inside an installed package is an import failure; a `<module>`
    frame further out (the launcher script that started everything) is not."""
    pkg = "/env/lib/python3.10/site-packages"
    hit = place([_fr(f"{pkg}/app/cli.py", "main"), _fr(f"{pkg}/flash_attn/__init__.py", "<module>")])
    assert hit is not None and hit[0].category == "library-version"
    assert place([_fr(f"{pkg}/swift/cli/deploy.py", "<module>"),
                  _fr(f"{pkg}/swift/llm/deploy.py", "llm_deploy")]) is None


def test_headless_traceback_keeps_its_frames() -> None:
    """An excerpt that starts inside a traceback (its header cut off) still has frames."""
    an = LogAnalysis()
    an.feed_lines("l", [
        '(Worker pid=7)   File "/x/vllm/v1/worker/gpu_worker.py", line 10, in load_model',
        "(Worker pid=7)     self.model_runner.load_model()",
        "(Worker pid=7) RuntimeError: boom"])
    tb = an.tracebacks.first()
    assert tb is not None and [f.function for f in tb.frames] == ["load_model"]


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


def test_ipython_traceback_frames_are_read() -> None:
    """A traceback printed by IPython / Jupyter (``LLM(...)`` in a notebook) names its frames as
    ``File path:N, in Class.func(args)``; they are frames like Python's own (field-logs-d
    vllm-4989 has this shape)."""
    an = LogAnalysis()
    an.feed_lines("l", [
        "KeyError                                  Traceback (most recent call last)",
        "Cell In[13], line 43",
        "---> 43 llm = LLM(",
        "File ~/conda/lib/python3.9/site-packages/vllm/worker/model_runner.py:123, in "
        "ModelRunner.load_model(self)",
        "    122 with set_default_torch_dtype(self.model_config.dtype):",
        "File ~/conda/lib/python3.9/site-packages/vllm/model_executor/model_loader/loader.py:404, "
        "in DefaultModelLoader.load_model(self, model_config)",
        "KeyError: 'model.layers.0.mlp.experts.w1.weight'"])
    tb = an.tracebacks.first()
    assert tb is not None and [(f.function, f.line) for f in tb.frames] == [
        ("load_model", 123), ("load_model", 404)]
    assert tb.frames[-1].file.endswith("model_loader/loader.py")
    placed = place(tb.frames)
    assert placed is not None and placed[0].phase == "weight-load"


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
