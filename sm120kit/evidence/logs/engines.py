"""Which program wrote the log: vllm, sglang, tgi, torchrun, ray, nccl-tests (else unknown).

Each engine is known by strings only it prints (its module paths, logger names, process names,
its launcher's summary). A line is tested only while no engine has been named ``SURE`` times, so
a big log pays for its head only. vLLM wins over what runs it (Ray, torchrun) when both are seen:
the serving engine is what the diagnosis is about; nccl-tests and torchrun outputs name
themselves only when no serving engine is in the log.
"""

from __future__ import annotations

ENGINES = ("vllm", "sglang", "tgi", "torchrun", "ray", "nccl-tests")
_MARKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vllm", ("vllm/", "vllm.", "vLLM", "(EngineCore", "(APIServer", "(VllmWorker",
              "(Worker_TP", "(RayWorkerWrapper", "vllm serve", "[gpu_worker.py", "[core.py")),
    ("sglang", ("sglang", "Scheduler hit an exception", "TpModelWorker", "Load weight begin",
                "max_total_num_tokens=", "The server is fired up and ready to roll",
                "Init torch distributed begin", "Prefill batch. #new-seq", "Decode batch. #running",
                "Capture cuda graph begin", "KV Cache is allocated. #tokens")),
    ("tgi", ("text_generation_launcher", "text_generation_router", "text_generation_server",
             "shard-manager:", "ShardCannotStart", "text-generation-launcher")),
    ("torchrun", ("torch.distributed.elastic", "torchrun", "ChildFailedError",
                  "Root Cause (first observed failure)", "local_rank:")),
    ("ray", ("ray.exceptions", "raylet", "ray/_private", "core_worker.cc", "actor_manager.cc",
             "direct_actor_transport", "RayTaskError", "ActorDiedError", "(pid=", "ray::")),
    ("nccl-tests", ("nccl-tests", "_perf ", "# Avg bus bandwidth", "# nThread ", "busbw",
                    "# Out of bounds values", "#  Rank ")),
)
SURE = 24  # hits of one engine after which later lines are not tested
MAX_LINES = 20_000  # lines tested at most (a log that names no engine pays for its head only)


class EngineSniffer:
    def __init__(self) -> None:
        self.hits = dict.fromkeys(ENGINES, 0)
        self.done = False
        self.lines = 0

    def feed(self, text: str) -> None:
        if self.done:
            return
        self.lines += 1
        self.done = self.lines >= MAX_LINES
        for name, marks in _MARKS:
            if any(m in text for m in marks):
                self.hits[name] += 1
                if self.hits[name] >= SURE:
                    self.done = True

    @property
    def engine(self) -> str:
        """The engine that wrote the log (vLLM over what runs it, see the module doc)."""
        h = self.hits
        if h["vllm"] >= max(2, h["sglang"]):
            return "vllm"
        for name in ("sglang", "tgi"):
            if h[name] and h[name] >= h["vllm"]:
                return name
        if h["vllm"]:
            return "vllm"
        best = max(("torchrun", "ray", "nccl-tests"), key=lambda n: h[n])
        return best if h[best] else "unknown"
