"""vLLM startup/serving phases from single log lines, plus known stall messages.

Used live by ``collect`` (one call per child output line) and offline by ``diagnose``. The phase
names are the ones of ``tests/data/vllm-logs/README.md``:

engine-init → nccl-init → model-load → torch-compile → kv-cache-profile → kernel-warmup →
autotune → cuda-graph-capture → engine-ready → api-server-ready → serving, plus the terminal
phases shutdown and error.

The signatures are the stable substrings of vLLM's own messages across releases (V0 through
0.34): a phase is recognised from what the line *says* (``Starting to load model``,
``Capturing CUDA graphs``, ``init engine (...) took``), never from the file:line of the logger,
which drifts between versions.

Everything is a compiled regex behind a cheap substring prefilter, so one call costs a few
microseconds on a typical line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PHASES: tuple[str, ...] = (
    "engine-init",
    "nccl-init",
    "model-load",
    "torch-compile",
    "kv-cache-profile",
    "kernel-warmup",
    "autotune",
    "cuda-graph-capture",
    "engine-ready",
    "api-server-ready",
    "serving",
    "shutdown",
    "error",
)
PHASE_INDEX: dict[str, int] = {p: i for i, p in enumerate(PHASES)}
TERMINAL: frozenset[str] = frozenset({"shutdown", "error"})
# Phases that belong to a started server; once reached, startup phases no longer move ``current``.
SERVING_ERA: frozenset[str] = frozenset({"api-server-ready", "serving"})
# Startup stages whose order differs between model runners (V2 captures graphs before KV sizing,
# warmup and autotune interleave): moving "back" among them is a real change of stage.
_WARMUP_GROUP: frozenset[str] = frozenset(
    {"torch-compile", "kv-cache-profile", "kernel-warmup", "autotune", "cuda-graph-capture"}
)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")


def strip_ansi(line: str) -> str:
    """Remove ANSI colour/cursor escape sequences (vLLM colours prefixes and levels)."""
    return _ANSI.sub("", line) if "\x1b" in line else line


# --- phase signatures, checked in this order (the first match wins) --------------------------
# error/shutdown first: a traceback line that mentions "load model" is still an error.
_SIGNATURES: tuple[tuple[str, str], ...] = (
    (
        "error",
        r"Traceback \(most recent call last\)"
        r"|(?:^|[\s)\]])ERROR(?:\s+\d\d-\d\d \d|\s*\[|\s+[\w./-]+\.py:\d+\])"
        r"|^\[rank\d+\]:\[E"
        r"|(?:^|\s)(?:RuntimeError|ValueError|AssertionError|TypeError|KeyError|TimeoutError"
        r"|torch\.OutOfMemoryError|torch\.cuda\.OutOfMemoryError|OutOfMemoryError"
        r"|NotImplementedError|ImportError|ModuleNotFoundError|AttributeError"
        r"|EngineDeadError|DistBackendError|c10::DistBackendError|RayTaskError\w*"
        r"|SystemExit|Exception|FileNotFoundError)(?::|$)"
        r"|terminate called after throwing"
        r"|died unexpectedly"
        r"|WorkerProc (?:failed|hit an exception)"
        r"|EngineCore (?:failed to start|encountered a fatal error)"
        r"|Engine core initialization failed"
        r"|Watchdog caught collective operation timeout"
        r"|CUDA error:|Fatal Python error",
    ),
    (
        "shutdown",
        r"\[shutdown\]"
        r"|Shutting down|shutting down"
        r"|WorkerProc was terminated|Parent process exited"
        r"|Worker exiting|[Ww]orker(?:Proc)? (?:exited|terminated)"
        r"|Terminating (?:local )?(?:vLLM )?worker processes"
        r"|Received SIG(?:TERM|INT)|SIGTERM received"
        r"|Waiting for application shutdown|Application shutdown complete"
        r"|Finished server process"
        r"|destroy_process_group\(\) was not called"
        r"|Engine core proc \S+ exited|Gracefully stopping",
    ),
    (
        "engine-init",
        r"█\s+version\s+\S"
        r"|vLLM API server version"
        r"|non-default args:"
        r"|Initializing an? (?:V1 )?LLM engine"
        r"|Launching vLLM"
        r"|headless (?:mode|multiproc|launch|executor)"
        r"|Resolved architecture:"
        r"|Waiting for \d+ local, \d+ remote core engine",
    ),
    (
        "serving",
        r"\"(?:POST|PUT|DELETE) /\S* HTTP/[\d.]+\" \d{3}"
        r"|\"GET /(?!health|ping|metrics|version|v1/models|load|docs|openapi|redoc)\S* HTTP/[\d.]+\" \d{3}"
        r"|Engine \d{3}: Avg prompt throughput"
        r"|Avg prompt throughput: [\d.]+ tokens/s"
        r"|SpecDecoding metrics"
        r"|JIT compilation during inference"
        r"|Processed prompts"
        r"|Added request |Received request |Finished request "
        r"|Running: \d+ reqs?, Waiting: \d+",
    ),
    (
        "api-server-ready",
        r"Starting vLLM (?:API )?server(?: \d+)? on"
        r"|Available routes are"
        r"|Route: /"
        r"|Application startup complete"
        r"|Uvicorn running on"
        r"|Started server process",
    ),
    (
        "engine-ready",
        r"init engine \(profile, create kv cache, warmup model\) took",
    ),
    (
        "cuda-graph-capture",
        r"Capturing CUDA graph|Capturing cudagraphs|Capturing CUDA graphs"
        r"|Graph capturing finished"
        r"|CUDA graph capture"
        r"|Capturing model for \w+ speculator"
        # SGLang's cuda_graph_runner.py: "Capture cuda graph begin. ..." and its tqdm bar
        # "Capturing batches (bs=496 avail_mem=20.14 GB):   2%|..."
        r"|Capture cuda graph begin|Capturing batches \(bs=",
    ),
    (
        "autotune",
        r"Autotuning process (?:starts|ends)"
        r"|Autotuning FlashInfer"
        r"|\[Auto[Tt]uner\]"
        r"|autotune cache (?:loaded|saved)"
        r"|decode autotune cache entries"
        r"|Tuning \S+ decode|autotuning \S+:",
    ),
    (
        "kernel-warmup",
        r"kernel_warmup\.py|_warmup\.py:\d+\]|warmup\.py:\d+\]"
        r"|[Pp]re-?warm"
        r"|Warming up |Warmed up |[Ww]armup (?:took|done|finished|complete)"
        r"|DeepGEMM (?:warmup|JIT)"
        r"|deep_gemm warmup"
        r"|mHC (?:kernels|warmup)"
        r"|Skipping (?:FlashInfer autotune|CuTeDSL warmup)",
    ),
    (
        "kv-cache-profile",
        r"Profiling CUDA graph memory"
        r"|Estimated CUDA graph memory"
        r"|Available KV cache memory"
        r"|GPU KV cache size"
        r"|Maximum concurrency for"
        r"|Memory profiling takes"
        r"|# (?:GPU|CUDA) blocks:"
        r"|KV cache memory|kv_cache_memory_bytes"
        r"|CUDA graph memory profiling"
        r"|Free memory on device",
    ),
    (
        "torch-compile",
        r"Dynamo bytecode transform time"
        r"|Compiling a graph for"
        r"|torch\.compile took"
        r"|Cache the graph of"
        r"|Directly load the compiled graph"
        r"|torch_compile_cache"
        r"|saved AOT compiled function|Loading AOT compiled function|AOT compiled"
        r"|collected artifacts"
        r"|Inductor compil(?:ation|ing) (?:took|for|of)"
        r"|Initial profiling/warmup run took",
    ),
    (
        "model-load",
        r"Starting to load model"
        r"|Loading safetensors"
        r"|Loading weights took|Loading model weights took"
        r"|Model loading took"
        r"|Loading model from scratch"
        r"|Loading (?:pt|bin|fastsafetensors|gguf) checkpoint"
        r"|draft model loaded|Loading drafter model"
        r"|prepared_weight_loading|weight_utils\.py"
        r"|Using model weights format",
    ),
    (
        "nccl-init",
        r"world_size=\d+ rank=\d+.*backend=nccl|backend=nccl"
        r"|Found nccl"
        r"|vLLM is using nccl=="
        r"|[Cc]ustom all-?reduce|CustomAllreduce|custom_all_reduce"
        r"|all-reduce backends"
        r"|NCCL INFO|NCCL version \d"
        r"|pynccl"
        r"|is assigned as DP rank"
        r"|SymmMemCommunicator",
    ),
    # other engines' own startup lines (SGLang's scheduler and server, TGI's launcher and router),
    # after every vLLM pattern: so their logs have phases and a start that completes is healthy
    ("nccl-init", r"Init torch distributed begin"),
    ("model-load", r"Load weight (?:begin|end)\.|text_generation_launcher: Waiting for shard to be "
                   r"ready|text_generation_launcher: Starting shard"),
    ("kv-cache-profile", r"KV Cache is allocated\.|Memory pool end\."),
    ("cuda-graph-capture", r"Capture cuda graph (?:begin|end)\."),
    ("engine-ready", r"text_generation_launcher: Shard ready in"),
    ("api-server-ready", r"The server is fired up and ready to roll|text_generation_router\b.*: Connected\s*$"),
)
_COMPILED: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (phase, re.compile(rx)) for phase, rx in _SIGNATURES
)

# Cheap prefilter: a line that contains none of these substrings cannot match any signature.
# Each entry is a literal that occurs in at least one alternative of the regexes above.
_PREFILTER_WORDS: tuple[str, ...] = (
    "Traceback", "ERROR", "[E", "Error", "Exception", "terminate", "died", "WorkerProc",
    "EngineCore", "Engine core", "Watchdog", "NCCL", "CUDA", "Fatal", "SystemExit",
    "shutdown", "hutting down", "terminated", "exited", "exiting", "Terminating", "SIG",
    "Application", "server", "destroy_process_group", "stopping",
    "HTTP/", "throughput", "SpecDecoding", "JIT", "Processed prompts", "request", "reqs",
    "routes", "Route: /", "Uvicorn", "init engine", "Captur", "Graph captur", "cudagraph",
    "utotun", "utoTun", "Tuning", "warm", "Warm", "DeepGEMM", "deep_gemm", "mHC", "Skipping",
    "Profiling", "KV cache", "concurrency", "Memory profiling", "blocks:", "kv_cache",
    "Free memory", "Dynamo", "ompil", "Cache the graph", "torch_compile", "AOT", "artifacts",
    "Inductor", "load model", "safetensors", "Loading", "loading", "loaded",
    "weight", "nccl", "ll-reduce", "llreduce", "all_reduce", "assigned as DP", "SymmMem",
    "█", "version", "non-default", "LLM engine", "headless", "Launching", "Resolved arch",
    "remote core engine", "Init torch distributed", "Load weight", "Shard", "shard", "KV Cache",
    "Memory pool", "Capture cuda", "fired up", "Connected",
)


# ``host:pid:tid [dev] NCCL INFO|WARN|TRACE``, optionally behind a vLLM-era/docker prefix.
_NCCL_HEAD = re.compile(
    r"\s*(?:\S+\s+)?(?:\([^)]*pid=\d+[^)]*\)\s*)*[\w.-]+:\d+:\d+ \[\d+\] NCCL (?:INFO|TRACE|VERSION) "
)


def _prefilter(line: str) -> bool:
    for w in _PREFILTER_WORDS:
        if w in line:
            return True
    return False


def classify_line(line: str) -> str | None:
    """The phase a log line belongs to, or None when it says nothing about the phase.

    ANSI escapes are stripped first; bare carriage returns (tqdm) and a trailing newline are fine.
    """
    if not line:
        return None
    if "\x1b" in line:
        line = strip_ansi(line)
    if not _prefilter(line):
        return None
    if " NCCL " in line and _NCCL_HEAD.match(line):
        # raw NCCL output (possibly with a Python line glued onto its end): the line is NCCL's
        return "nccl-init"
    for phase, rx in _COMPILED:
        if rx.search(line):
            return phase
    return None


# --- stall messages: the ONE table ------------------------------------------------------------
#: ``(stall id, finer signal id or None, substring needle, regex)``. ``stall_signal`` answers the
#: stall id of the first row that matches; rows with a finer id are also named log signatures
#: (the diagnose catalogue's signal table takes them from here), so each message is written once.
STALL_MESSAGES: tuple[tuple[str, str | None, str, str], ...] = (
    ("shm-broadcast-wait", None, "available ",
     r"No available (?:shared memory broadcast )?block found in \d+ seconds?"),
    ("watchdog-timeout", None, "atchdog",
     r"Watchdog caught collective operation timeout"
     r"|failure detected by watchdog"
     r"|Exception \(either an error or timeout\) detected by watchdog"
     r"|Process group watchdog thread terminated"),
    ("watchdog-timeout", "heartbeat", "Heartbeat monitor", r"Heartbeat monitor timed out"),
    ("watchdog-timeout", "heartbeat", "atchdog got stuck", r"watchdog got stuck for \d+ seconds"),
    ("rpc-timeout", None, "imed out", r"RPC call to \w+ timed out|TimeoutError: .*timed out"),
    ("rpc-timeout", "engine-ready-timeout", "Timed out waiting for engine",
     r"Timed out waiting for engine core processes to start"),
    ("nccl-timeout", None, "imeout",
     r"NCCL (?:WARN|INFO).*[Tt]imeout"
     r"|ncclSystemError.*[Tt]imeout"
     r"|Timeout at NCCL work"
     r"|NCCL (?:communicator|operation).*timed? ?out"),
    ("nccl-timeout", "gloo-timeout", "Timed out waiting",
     r"Timed out waiting \d+ms for (?:recv|send) operation"),
    ("worker-died", None, "died",
     r"Worker proc \S+ died unexpectedly"
     r"|Worker \S+ pid \S+ died"
     r"|RayWorkerProc rank=\S+ died unexpectedly"
     r"|Engine core process \S+ died unexpectedly"
     r"|died unexpectedly"),
    ("worker-died", None, "orker",
     r"WorkerProc (?:failed|hit an exception)"
     r"|One or more workers failed"
     r"|Worker failed with error"),
    ("engine-dead", None, "ngine",
     r"EngineDeadError|EngineCore encountered a fatal error"
     r"|Engine core initialization failed"),
    ("nccl-teardown", None, "taking the entire process down",
     r"we are taking the entire process down"),
)
_STALLS: tuple[tuple[str, str, re.Pattern[str]], ...] = tuple(
    (sid, needle, re.compile(rx)) for sid, _fine, needle, rx in STALL_MESSAGES
)


def stall_signal(line: str) -> str | None:
    """A short id when the line is a known hang/timeout/death message, else None.

    Ids: ``shm-broadcast-wait``, ``watchdog-timeout``, ``rpc-timeout``, ``nccl-timeout``,
    ``worker-died``, ``engine-dead``, ``nccl-teardown``.
    """
    if not line:
        return None
    if "\x1b" in line:
        line = strip_ansi(line)
    for sid, needle, rx in _STALLS:
        if needle in line and rx.search(line):
            return sid
    return None


# --- tracker ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class PhaseEvent:
    phase: str
    t: float
    stream: str | None


class PhaseTracker:
    """Follows one process's (or one merged stream's) phase line by line.

    * ``timeline``: ``(phase, first_seen_t, stream)`` for every phase the first time a line of it
      is seen, in order of first appearance (late startup lines after serving still record the
      phase, they only do not move ``current``).
    * ``current``: the stage the process is in now. It follows the latest classified line, with
      these limits: once ``api-server-ready``/``serving`` is reached, startup phases no longer
      move it (only error/shutdown do); ``serving`` never goes back to ``api-server-ready``;
      ``nccl-init``/``model-load``/``engine-init`` lines after a later stage (NCCL comms are
      created lazily, NCCL output is delayed) do not move it back; after error/shutdown, only a
      phase later than anything reached before moves it again.
    * ``last_t``: time of the last classified line; ``stalls``: stall-signal ids seen with times.
    """

    def __init__(self) -> None:
        self.timeline: list[tuple[str, float, str | None]] = []
        self.current: str | None = None
        self.stage: str | None = None  # the last non-terminal ``current`` (where it stopped)
        self.last_t: float | None = None
        self.stalls: list[tuple[str, float, str | None]] = []
        self._seen: set[str] = set()
        self._high = -1  # highest index of a non-terminal phase reached

    def feed(self, line: str, t: float, stream: str | None = None) -> str | None:
        """Classify one line; return the new phase when ``current`` changes, else None."""
        phase = classify_line(line)
        if phase == "error" or phase is None:
            sig = stall_signal(line)
            if sig is not None:
                self.stalls.append((sig, t, stream))
        if phase is None:
            return None
        return self.observe(phase, t, stream)

    def observe(self, phase: str, t: float, stream: str | None = None) -> str | None:
        """Record an already classified phase (what ``feed`` does after ``classify_line``)."""
        self.last_t = t
        if phase not in self._seen:
            self._seen.add(phase)
            self.timeline.append((phase, t, stream))
        if phase == self.current:
            return None
        if not self._allowed(phase):
            return None
        if phase not in TERMINAL:
            self._high = max(self._high, PHASE_INDEX[phase])
            self.stage = phase
        self.current = phase
        return phase

    def _allowed(self, phase: str) -> bool:
        idx = PHASE_INDEX[phase]
        if phase in TERMINAL:
            return True
        if idx > self._high:
            return True
        # idx <= high from here on: a move backwards or sideways
        if self.current in TERMINAL:
            return False
        high_phase = PHASES[self._high] if self._high >= 0 else None
        if high_phase in SERVING_ERA or high_phase == "engine-ready":
            # serving never goes back to startup nor to api-server-ready
            return phase == "serving" and high_phase != "serving"
        return phase in _WARMUP_GROUP and high_phase in _WARMUP_GROUP

    @property
    def high(self) -> int:
        """Index in ``PHASES`` of the latest non-terminal phase reached (-1: none yet)."""
        return self._high

    def phases_seen(self) -> list[str]:
        return [p for p, _t, _s in self.timeline]
