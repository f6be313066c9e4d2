"""Progress of a launched tree beyond its output: what collect samples every second so that a
cold start (minutes of nvcc, hundreds of GB of weights) is not mistaken for a hang.

Channels (``CHANNELS``), each with the time it last moved:

* ``births`` / ``exits``: processes of the tree started / finished (compilers counted by name:
  nvcc, cicc, ptxas, fatbinary, nvlink, ninja, cc/c++/gcc/g++/cc1/cc1plus, clang, ld, as);
* ``compile-cpu``: CPU time used by compiler processes;
* ``io-read``: bytes the tree read (``read_chars`` and storage ``read_bytes``, whichever grew
  more; mmap page-ins of a weights file show only in ``read_bytes``);
* ``jit-cache``: files/bytes added under the FlashInfer / torch extensions / Triton / inductor /
  vLLM compile caches;
* ``gpu-mem``: memory used on the GPUs (NVML, where it exists);
* ``frames``: two py-spy samples of a busy Python process show different stacks;
* ``cpu``: CPU time of non-compiler processes. **Not progress by itself**: a process spinning
  with the same frames, no births, no IO and no output is a spin (an NCCL busy-wait).

Every channel except ``cpu`` resets the stall clock. The sampler never signals a process; py-spy
only reads stacks.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from sm120kit.errors import UserError

COMPILERS = frozenset({
    "nvcc", "cicc", "ptxas", "fatbinary", "nvlink", "cudafe++", "ninja", "cc", "c++", "gcc",
    "g++", "cc1", "cc1plus", "clang", "clang++", "ld", "ld.lld", "as", "collect2",
})
CHANNELS = ("output", "births", "exits", "compile-cpu", "io-read", "jit-cache", "gpu-mem",
            "frames", "cpu")
PROGRESS = frozenset(CHANNELS) - {"cpu"}
LONG_PHASES: dict[str, float] = {  # default patience (s) of known-long phases
    "jit-compile": 1800.0,
    "weight-load": 1800.0,
    "cuda-graph-capture": 900.0,
    "autotune": 1200.0,
}
_LOG_LONG = {"cuda-graph-capture": "cuda-graph-capture", "autotune": "autotune",
             "model-load": "weight-load", "torch-compile": "jit-compile",
             "kernel-warmup": "jit-compile"}
IO_EPS = 1 << 20          # 1 MiB read = movement
CACHE_EVERY_S = 5.0       # cache directories are walked at most this often
CACHE_MAX_ENTRIES = 50_000


def parse_patience(items: tuple[str, ...] | list[str]) -> dict[str, float]:
    """``PHASE=SECONDS`` overrides (``--patience``); a bad one is a UserError naming the phases."""
    out: dict[str, float] = {}
    for it in items:
        name, eq, val = it.partition("=")
        name = name.strip()
        try:
            secs = float(val) if eq else -1.0
        except ValueError:
            secs = -1.0
        if name not in LONG_PHASES or secs <= 0:
            raise UserError(f"bad --patience {it!r}",
                            hint=f"PHASE=SECONDS with PHASE one of {', '.join(LONG_PHASES)}")
        out[name] = secs
    return out


def cache_dirs(env: Mapping[str, str]) -> list[Path]:
    """The JIT cache directories a vLLM launch writes to, from its environment."""
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    xdg = Path(env.get("XDG_CACHE_HOME") or home / ".cache")
    user = env.get("USER") or env.get("LOGNAME") or "root"
    cands = [
        env.get("FLASHINFER_WORKSPACE_BASE") and Path(env["FLASHINFER_WORKSPACE_BASE"]) /
        ".cache" / "flashinfer",
        xdg / "flashinfer",
        Path(env["TORCH_EXTENSIONS_DIR"]) if env.get("TORCH_EXTENSIONS_DIR")
        else xdg / "torch_extensions",
        Path(env["TRITON_CACHE_DIR"]) if env.get("TRITON_CACHE_DIR") else home / ".triton" / "cache",
        Path(env["TORCHINDUCTOR_CACHE_DIR"]) if env.get("TORCHINDUCTOR_CACHE_DIR")
        else Path(env.get("TMPDIR") or "/tmp") / f"torchinductor_{user}",
        Path(env["VLLM_CACHE_ROOT"]) if env.get("VLLM_CACHE_ROOT") else xdg / "vllm",
    ]
    out: list[Path] = []
    for c in cands:
        if c and Path(c) not in out:
            out.append(Path(c))
    return out


def _dir_stat(root: Path) -> tuple[int, int]:
    """(files, bytes) under ``root`` (bounded walk; a missing dir is (0, 0))."""
    files = size = 0
    stack = [str(root)]
    while stack and files < CACHE_MAX_ENTRIES:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for e in it:
                try:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    elif e.is_file(follow_symlinks=False):
                        files += 1
                        size += e.stat(follow_symlinks=False).st_size
                except OSError:
                    continue
    return files, size


#: points of the progress series kept for the bundle (older ones are thinned)
SERIES_MAX = 400

@dataclass
class _P:
    kind: str  # compiler name, "python" or "other"
    cpu: float = 0.0
    io: int = 0
    born: float = 0.0
    reaped: float = 0.0  # CPU of its finished, waited-for children


@dataclass
class Tick:
    t: float
    moved: set[str]
    busy_python: int | None = None  # pid of the busiest non-compiler Python process


@dataclass
class ProgressSampler:
    root_pid: int
    caches: list[Path] = field(default_factory=list)
    gpu_reader: Callable[[], int | None] | None = None
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self.t0 = self.clock()
        self.procs: dict[tuple[int, float], _P] = {}
        self.done: Counter[str] = Counter()
        self.io_gone = 0
        self.io_total = 0
        self.compile_cpu = 0.0
        self.reaped_cpu = 0.0  # CPU of short-lived children never seen alive
        self.last_moved: dict[str, float] = {}
        self.cache_state: tuple[int, int] | None = None
        self.cache_added = (0, 0)
        self._cache_t = -1e9
        self.gpu_used: int | None = None
        self.first_compile: float | None = None
        self.samples = 0
        self.sample_s = 0.0
        self.history: list[dict[str, Any]] = []
        self.cpu_total = 0.0  # CPU seconds of non-compiler processes (cumulative)
        self.cpu_series: list[tuple[float, float]] = []
        #: the channels' values over the whole run, for the bundle's report page: one point a
        #: sample, halved in resolution whenever it passes SERIES_MAX points
        self.series: list[dict[str, Any]] = []

    # --- one sample ------------------------------------------------------------------------
    def sample(self, output: bool = False) -> Tick:
        """One sample; ``output``: the command printed since the last one (the supervisor
        knows; it is kept in the history and the series only)."""
        t_start = time.perf_counter()
        now = self.clock()
        moved: set[str] = set()
        live = self._scan(now, moved)
        self._caches(now, moved)
        self._gpu(moved)
        self._point(now, output)
        self.cpu_series.append((now, self.cpu_total))
        del self.cpu_series[:-120]
        for ch in moved:
            self.last_moved[ch] = now
        self.samples += 1
        self.sample_s += time.perf_counter() - t_start
        tick = Tick(now, moved, live)
        if moved - {"cpu"} or output:
            self.history.append({"t": round(now - self.t0, 2),
                                 "moved": sorted(moved | ({"output"} if output else set()))})
            del self.history[:-200]
        return tick

    def _point(self, now: float, output: bool) -> None:
        self.series.append({
            "t": round(now - self.t0, 2), "output": output, "cpu_s": round(self.cpu_total, 2),
            "compile_cpu_s": round(self.compile_cpu + self.reaped_cpu, 2),
            "io_read_bytes": self.io_total, "gpu_used_bytes": self.gpu_used,
            "jit_cache_files": self.cache_added[0],
            "compilers": sum(self.compilers_running().values())})
        if len(self.series) > SERIES_MAX:
            first = self.series[0]
            self.series = [first, *self.series[2::2]]

    def _scan(self, now: float, moved: set[str]) -> int | None:
        """One pass over the tree; returns the pid of the busiest Python process (or None)."""
        try:
            root = psutil.Process(self.root_pid)
            procs = [root, *root.children(recursive=True)]
        except (psutil.Error, OSError):
            procs = []
        seen: set[tuple[int, float]] = set()
        busiest: tuple[float, int | None] = (0.0, None)
        for p in procs:
            got = self._read(p)
            if got is None:
                continue
            key, name, cpu, reaped, io = got
            seen.add(key)
            rec = self.procs.get(key)
            if rec is None:
                self._born(key, name, cpu, io, reaped, now, moved)
                continue
            d_cpu = self._moved(rec, cpu, io, reaped, moved)
            if rec.kind == "python" and d_cpu > busiest[0]:
                busiest = (d_cpu, key[0])
        for key in [k for k in self.procs if k not in seen]:
            rec = self.procs.pop(key)
            self.done[rec.kind] += 1
            moved.add("exits")
        return busiest[1]

    def _read(self, p: psutil.Process) -> tuple[tuple[int, float], str, float, float, int] | None:
        """(key, name, own CPU, reaped children's CPU, bytes read) of one process, or None."""
        try:
            with p.oneshot():
                key = (p.pid, p.create_time())
                name = p.name()
                ct = p.cpu_times()
                reaped = (getattr(ct, "children_user", 0.0) or 0.0) + (
                    getattr(ct, "children_system", 0.0) or 0.0)
                return key, name, ct.user + ct.system, reaped, self._io(p)
        except (psutil.Error, OSError):
            return None

    def _born(self, key: tuple[int, float], name: str, cpu: float, io: int, reaped: float,
              now: float, moved: set[str]) -> None:
        kind = name if name in COMPILERS else (
            "python" if name.startswith(("python", "VLLM", "vllm", "pt_")) else "other")
        self.procs[key] = _P(kind, cpu, io, now, reaped)
        if self.samples:  # the first scan finds what was already there
            moved.add("births")
            if kind in COMPILERS and cpu > 0:  # born since the last sample
                self.compile_cpu += cpu
                moved.add("compile-cpu")
        if kind in COMPILERS and self.first_compile is None:
            self.first_compile = now

    def _moved(self, rec: _P, cpu: float, io: int, reaped: float, moved: set[str]) -> float:
        """Account one known process's deltas into the channels; returns its CPU delta."""
        d_cpu, d_io = cpu - rec.cpu, io - rec.io
        d_reaped = reaped - rec.reaped
        rec.cpu, rec.io, rec.reaped = cpu, io, reaped
        if d_reaped > 0.01:
            # children that lived between two samples (a short cc/ptxas run): finished and
            # waited for, their CPU shows in the parent's children times
            self.reaped_cpu += d_reaped
            moved.add("exits")
        if d_io > 0:
            self.io_total += d_io
        if d_io >= IO_EPS:
            moved.add("io-read")
        if d_cpu <= 0.01:
            return 0.0
        if rec.kind in COMPILERS:
            self.compile_cpu += d_cpu
            moved.add("compile-cpu")
        else:
            self.cpu_total += d_cpu
            moved.add("cpu")
        return d_cpu

    @staticmethod
    def _io(p: psutil.Process) -> int:
        try:
            c = p.io_counters()
        except (psutil.Error, OSError, AttributeError):
            return 0
        return max(int(getattr(c, "read_chars", 0) or 0), int(c.read_bytes or 0))

    def _caches(self, now: float, moved: set[str]) -> None:
        if not self.caches or now - self._cache_t < CACHE_EVERY_S:
            return
        self._cache_t = now
        files = size = 0
        for d in self.caches:
            f, s = _dir_stat(d)
            files, size = files + f, size + s
        if self.cache_state is not None and (files > self.cache_state[0]
                                             or size > self.cache_state[1]):
            moved.add("jit-cache")
            self.cache_added = (self.cache_added[0] + max(0, files - self.cache_state[0]),
                                self.cache_added[1] + max(0, size - self.cache_state[1]))
        self.cache_state = (files, size)

    def _gpu(self, moved: set[str]) -> None:
        if self.gpu_reader is None:
            return
        try:
            used = self.gpu_reader()
        except Exception:
            self.gpu_reader = None
            return
        if used is None:
            return
        if self.gpu_used is not None and abs(used - self.gpu_used) >= 64 << 20:
            moved.add("gpu-mem")
        self.gpu_used = used

    def cpu_rate(self, window: float) -> float:
        """CPU cores used by non-compiler processes over the last ``window`` seconds."""
        if len(self.cpu_series) < 2:
            return 0.0
        t1, c1 = self.cpu_series[-1]
        t0, c0 = next(((t, c) for t, c in self.cpu_series if t >= t1 - window),
                      self.cpu_series[0])
        return (c1 - c0) / (t1 - t0) if t1 > t0 else 0.0

    def mark(self, channel: str) -> None:
        """A channel seen by the supervisor (output, py-spy frames) moved now."""
        self.last_moved[channel] = self.clock()

    # --- what is going on --------------------------------------------------------------------
    def compilers_running(self) -> Counter[str]:
        return Counter(r.kind for r in self.procs.values() if r.kind in COMPILERS)

    def activity(self, log_phase: str | None, recent_s: float = 30.0) -> str | None:
        """The known-long phase the launch is in now, from the processes and the log."""
        now = self.clock()
        if self.compilers_running() or now - self.last_moved.get("compile-cpu", -1e9) < recent_s:
            return "jit-compile"
        if now - self.last_moved.get("io-read", -1e9) < recent_s and self.io_total > 64 << 20:
            return "weight-load"
        return _LOG_LONG.get(log_phase or "")

    def status(self, activity: str | None, patience: float | None) -> str:
        now = self.clock()
        mins = (now - self.t0) / 60
        pat = f" (patience {patience / 60:.0f} min)" if patience else ""
        if activity == "jit-compile":
            run = self.compilers_running()
            done = sum(v for k, v in self.done.items() if k in COMPILERS)
            nv = self.done.get("nvcc", 0)
            head = (f"{nv} nvcc done" if nv else f"{done} compiler runs done")
            since = (now - (self.first_compile or now)) / 60
            return (f"compiling: {head}, {sum(run.values())} running "
                    f"({', '.join(f'{k} x{v}' for k, v in run.most_common(3)) or 'between jobs'}),"
                    f" {since:.0f} min{pat}")
        if activity == "weight-load":
            return f"loading weights: {self.io_total / 1e9:.1f} GB read, {mins:.0f} min{pat}"
        if activity:
            return f"{activity}: {mins:.0f} min{pat}"
        return f"waiting: {mins:.0f} min"

    def report(self) -> dict[str, Any]:
        """For the bundle: which channels moved last, and the sampler's own cost."""
        now = self.clock()
        ago = {ch: round(now - t, 2) for ch, t in self.last_moved.items()}
        return {
            "channels_last_moved_s_ago": dict(sorted(ago.items(), key=lambda kv: kv[1])),
            "moved_last": min(ago, key=lambda k: ago[k]) if ago else None,
            "compilers_done": {k: v for k, v in self.done.items() if k in COMPILERS},
            "compilers_running": dict(self.compilers_running()),
            "compile_cpu_s": round(self.compile_cpu, 2),
            "reaped_children_cpu_s": round(self.reaped_cpu, 2),
            "io_read_bytes": self.io_total,
            "jit_cache_added": {"files": self.cache_added[0], "bytes": self.cache_added[1]},
            "gpu_used_bytes": self.gpu_used,
            "samples": self.samples,
            "sampling_s": round(self.sample_s, 3),
            "history": self.history[-200:],
            "series": self.series,
        }


def nvml_used_reader() -> Callable[[], int | None] | None:
    """A reader of the GPUs' summed used memory, or None where NVML does not exist."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                   for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:
        return None
    if not handles:
        return None

    def read() -> int | None:
        return sum(int(pynvml.nvmlDeviceGetMemoryInfo(h).used) for h in handles)

    return read
