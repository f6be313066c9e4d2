"""Launch a command (``vllm serve ...``) under supervision: diagnostic environment, output streamed
to the terminal and into the bundle, startup phase timeline, stall detection, and a bundle when
something goes wrong.

Stall = any of

* **silence**: no new output and no phase change for ``stall_timeout`` seconds (vLLM's periodic
  ``No available shared memory broadcast block`` line does not count as output: it is what a
  waiting EngineCore prints once a minute during a hang);
* **signal**: a known hang/death message (torch watchdog timeout, RPC timeout, NCCL timeout,
  worker died, engine dead) via ``sm120kit.evidence.phases.stall_signal``;
* **death**: a tracked process of the tree (vLLM worker / engine core / warmup rank, or a direct
  Python child of the command when nothing is titled) disappears while the command still runs;
* a non-zero exit of the command.

Only processes started here are ever signalled. Stopping is SIGINT → SIGTERM → SIGKILL, each
with a timeout, to the child's own session (``start_new_session``) and its recorded descendants.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sm120kit.errors import UserError
from sm120kit.evidence import flight
from sm120kit.evidence.kv import capacity_from_launch
from sm120kit.evidence.phases import PhaseTracker, stall_signal
from sm120kit.evidence.procs import Proc, alive, describe, stop_tree, tree
from sm120kit.evidence.redact import Redactor
from sm120kit.evidence.stacks import faulthandler_site_dir, py_spy_dump, signature
from sm120kit.models.serve_args import ServeArgs, parse_serve_args
from sm120kit.models.timeouts import DEFAULT_STALL_TIMEOUT_S
from sm120kit.services.bundles import LOG_CAP, Bundle
from sm120kit.services.progress import (
    LONG_PHASES,
    PROGRESS,
    ProgressSampler,
    cache_dirs,
    nvml_used_reader,
)
from sm120kit.services.snapshot import (
    BundleHooks,
    CollectContext,
    Options,
    Result,
    finalize,
    snapshot,
    write_processes,
)

READY_PHASES = ("api-server-ready",)
_READY_RX = re.compile(r"Application startup complete")
IMMEDIATE_SIGNALS = frozenset(
    {"watchdog-timeout", "rpc-timeout", "nccl-timeout", "worker-died", "engine-dead",
     "nccl-teardown"}
)
DEATH_SIGNALS = frozenset({"worker-died", "engine-dead", "nccl-teardown"})
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_SRC_RX = (
    re.compile(r"^\((?P<name>[A-Za-z][\w]*?)(?: rank=(?P<rank>\d+))? pid=(?P<pid>\d+)"),
    re.compile(r"^\[rank(?P<rank>\d+)\]:"),
    re.compile(r"^[\w.-]+:(?P<pid>\d+):\d+ \[\d+\] NCCL "),
)
SOURCE_CAP = 8 * 1024 * 1024
SPIN_CORES = 0.2  # CPU use over the quiet window that makes it a spin rather than a block
MAX_SOURCES = 128


@dataclass
class LaunchOptions:
    out_dir: Path
    stall_timeout: float = DEFAULT_STALL_TIMEOUT_S
    until_ready: bool = False
    deadline_s: float = 60.0
    redact: bool = True
    host_map_file: Path | None = None
    always_bundle: bool = False
    keep_running: bool = False
    stacks: str = "auto"
    faulthandler: bool = True
    diag_env: bool = True
    echo: bool = True
    stdout_to_stderr: bool = False  # --json: keep our stdout for the JSON result
    int_timeout: float = 10.0
    term_timeout: float = 5.0
    sample_gap_s: float = 2.0
    poll_s: float = 0.2
    log_tail_lines: int = 200
    doctor: bool = True
    #: doctor's report and the verdict, composed by the CLI (services import no capability)
    hooks: BundleHooks = field(default_factory=BundleHooks)
    progress: bool = True              # sample the tree (births, compilers, IO, caches, GPU)
    progress_interval_s: float = 1.0
    patience: dict[str, float] = field(default_factory=dict)  # overrides of LONG_PHASES
    status_every_s: float = 30.0       # live status line while the output is quiet
    #: gathers other hosts into the bundle at a stall (``collect --ray``): called with (bundle,
    #: context, options, monotonic deadline), returns verdict lines; runs beside the snapshot
    remote: Callable[[Bundle, CollectContext, Options, float], list[str]] | None = None


@dataclass
class LaunchResult:
    exit_code: int
    outcome: str  # ready | exited | crashed | stalled | interrupted | stopped
    reason: str
    bundle: Path | None
    timeline: list[dict[str, Any]]
    current_phase: str | None
    child_exit_code: int | None
    seconds: float
    detect_to_bundle_s: float | None = None
    stop_steps: list[dict[str, Any]] = field(default_factory=list)
    verdict: list[str] = field(default_factory=list)
    added_env: dict[str, str] = field(default_factory=dict)
    watchdog: str | None = None
    self_cpu_s: float | None = None  # CPU time collect itself used (not its child)
    progress: dict[str, Any] | None = None  # channels that moved last, sampler cost
    detected_at: float | None = None  # unix time the stall/crash was decided
    quiet_s: float | None = None  # how long every channel had been quiet at a stall
    kv_capacity: dict[str, Any] | None = None  # at ready: KV numbers and effective DCP

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["bundle"] = str(self.bundle) if self.bundle else None
        return d


# --- diagnostic environment ------------------------------------------------------------------
def _vllm_arg_utils_candidates(argv0: str) -> list[Path]:
    cands: list[Path] = []
    exe = shutil.which(argv0) if argv0 else None
    pys: list[Path] = []
    if exe:
        try:
            first = Path(exe).read_bytes()[:256].split(b"\n", 1)[0]
            if first.startswith(b"#!"):
                pys.append(Path(first[2:].decode(errors="replace").strip().split()[0]))
        except OSError:
            pass
        pys.append(Path(exe))
    for py in pys:
        prefix = py.resolve().parent.parent if py.exists() else py.parent.parent
        for sp in sorted(prefix.glob("lib/python3*/site-packages")) + sorted(
                prefix.glob("lib/python3*/dist-packages")):
            cands.append(sp / "vllm" / "engine" / "arg_utils.py")
    try:
        import importlib.util

        spec = importlib.util.find_spec("vllm")  # top level: does not import vllm
        if spec is not None and spec.origin:
            cands.append(Path(spec.origin).parent / "engine" / "arg_utils.py")
    except (ImportError, ValueError):
        pass
    return list(dict.fromkeys(cands))


def torch_version_near(argv0: str) -> tuple[int, int] | None:
    """(major, minor) of the torch installed next to the command's vLLM, else of ours."""
    dirs = {p.parent.parent.parent for p in _vllm_arg_utils_candidates(argv0)}
    for d in dirs:
        for di in sorted(d.glob("torch-*.dist-info")):
            m = re.match(r"torch-(\d+)\.(\d+)", di.name)
            if m:
                return int(m.group(1)), int(m.group(2))
    try:
        from importlib import metadata

        m = re.match(r"(\d+)\.(\d+)", metadata.version("torch"))
        return (int(m.group(1)), int(m.group(2))) if m else None
    except Exception:
        return None


def vllm_supports_watchdog(argv0: str) -> tuple[bool | None, str]:
    """Whether the vLLM that ``argv0`` runs has ``--watchdog-config`` (from its arg parser source,
    without importing vllm). (None, why) when no vLLM source is found."""
    for p in _vllm_arg_utils_candidates(argv0):
        try:
            txt = p.read_text(errors="replace")
        except OSError:
            continue
        return ('"--watchdog-config"' in txt or "'--watchdog-config'" in txt), str(p)
    return None, "vllm/engine/arg_utils.py not found"


def serve_args_of(argv: list[str]) -> ServeArgs:
    """The launch line as :mod:`sm120kit.models.serve_args` reads it; a value vLLM would reject
    leaves the defaults with a note (collect never refuses to run a launch)."""
    try:
        return parse_serve_args(argv)
    except UserError as exc:
        return ServeArgs(argv=list(argv), notes=[f"launch line not fully read: {exc.message}"])


def is_vllm_serve(argv: list[str]) -> bool:
    if not argv:
        return False
    base = os.path.basename(argv[0])
    if base == "vllm" and len(argv) > 1 and argv[1] == "serve":
        return True
    joined = " ".join(argv[:6])
    return bool(re.search(r"-m vllm(?:\.entrypoints\.cli\.main)? serve|vllm\.entrypoints\.openai\.api_server", joined))


def diagnostic_env(
    bundle_root: Path, base_env: dict[str, str], argv: list[str], *, stall_timeout: float,
    site_dir: Path | None,
) -> tuple[dict[str, str], dict[str, str], list[str], str | None]:
    """(env, added vars, argv, watchdog note): diagnostic settings the user did not set."""
    env = dict(base_env)
    added: dict[str, str] = {}

    def put(k: str, v: str) -> None:
        if k not in env:
            env[k] = v
            added[k] = v

    flight_prefix = str(bundle_root / "flight" / "nccl_trace_rank_")
    if "TORCH_FR_BUFFER_SIZE" not in env and "TORCH_NCCL_TRACE_BUFFER_SIZE" not in env:
        put("TORCH_FR_BUFFER_SIZE", "2000")
        tv = torch_version_near(argv[0] if argv else "")
        if tv is None or tv < (2, 10):
            # older torch reads only the old name; newer ones warn that it is deprecated
            put("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000")
    put("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
    # the two names are one setting (TORCH_FR_DUMP_TEMP_FILE is the new name and wins in torch
    # >= 2.10): adding one beside the user's other would silently move their dumps
    if not any(k in env for k in flight.FR_PREFIX_VARS):
        put("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", flight_prefix)
        put("TORCH_FR_DUMP_TEMP_FILE", flight_prefix)
    put("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", str(bundle_root / "flight" / "pipe_rank_"))
    if "NCCL_DEBUG" not in env and "NCCL_DEBUG_FILE" not in env:
        put("NCCL_DEBUG", "INFO")
        put("NCCL_DEBUG_FILE", str(bundle_root / "nccl" / "%h.%p.log"))
    put("PYTHONUNBUFFERED", "1")  # buffered output would look like silence
    # NCCL >= 2.31: P2P write/read check of every GPU pair at communicator init, reported as
    # 'NCCL DIAG' lines (informational; older NCCL ignores the variable)
    put("NCCL_RUN_DIAGNOSTICS", "1")
    if site_dir is not None:
        fh = bundle_root / "faulthandler"
        fh.mkdir(exist_ok=True)
        added["SM120KIT_FAULTHANDLER_DIR"] = env["SM120KIT_FAULTHANDLER_DIR"] = str(fh)
        pp = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(site_dir) + (os.pathsep + pp if pp else "")
        added["PYTHONPATH"] = env["PYTHONPATH"]
    note = None
    argv = list(argv)
    if is_vllm_serve(argv):
        if "watchdog_config" in serve_args_of(argv).given:
            note = "--watchdog-config given by the user: kept"
        else:
            ok, where = vllm_supports_watchdog(argv[0])
            if ok:
                wd = bundle_root / "vllm-watchdog"
                wd.mkdir(exist_ok=True)
                cfg = {"dump_dir": str(wd), "timeout": max(10, int(stall_timeout * 0.75)),
                       "check_interval": 5}
                argv += ["--watchdog-config", json.dumps(cfg)]
                note = f"added --watchdog-config {json.dumps(cfg)} (supported: {where})"
            else:
                note = ("vLLM --watchdog-config not supported by this vLLM" if ok is False
                        else f"vLLM --watchdog-config not added: {where}")
    return env, added, argv, note


# --- log sources -----------------------------------------------------------------------------
def source_of(line: str, stream: str) -> str:
    """Which process/rank a line came from: the vLLM prefix name, ``rankN``, ``nccl-<pid>``, or
    the stream name for unprefixed lines."""
    s = _ANSI.sub("", line) if "\x1b" in line else line
    s = s.lstrip("\r")
    for rx in _SRC_RX:
        m = rx.match(s)
        if m:
            g = m.groupdict()
            if g.get("name"):
                return str(g["name"]) + (f"_rank{g['rank']}" if g.get("rank") else "")
            if g.get("rank") is not None:
                return f"rank{g['rank']}"
            return f"nccl-{g['pid']}"
    return stream


class _CappedFile:
    def __init__(self, path: Path, cap: int, redactor: Redactor) -> None:
        self.path = path
        self.cap = cap
        self.redactor = redactor
        self.f: IO[bytes] | None = open(path, "ab", buffering=0)  # readable live
        self.written = 0
        self.dropped = 0

    def write_line(self, line: str) -> None:
        if self.f is None:
            return
        data = self.redactor.text(line).encode("utf-8", "replace")
        if self.written + len(data) > self.cap:
            self.dropped += len(data)
            return
        self.f.write(data)
        self.written += len(data)

    def close(self, tail: list[str] | None = None) -> None:
        if self.f is None:
            return
        if self.dropped and tail:
            self.f.write(f"\n[... sm120kit: {self.dropped} bytes over the cap not kept; last "
                         f"{len(tail)} lines follow ...]\n".encode())
            for ln in tail:
                self.f.write(self.redactor.text(ln).encode("utf-8", "replace"))
        self.f.close()
        self.f = None


@dataclass
class _Stop:
    """Why the watch loop ended."""

    outcome: str  # ready | exited | crashed | stalled | interrupted | stopped
    kind: str = ""
    reason: str = ""
    child_rc: int | None = None
    quiet_s: float | None = None

    def exit_code(self) -> int:
        if self.outcome in ("ready", "stopped"):
            return 0
        if self.outcome == "exited":
            return self.child_rc or 0
        if self.outcome == "interrupted":
            return 130
        if self.outcome == "crashed" and self.kind == "exit":
            return self.child_rc if self.child_rc else 1
        return 1


# --- the supervisor --------------------------------------------------------------------------
class LaunchSupervisor:
    def __init__(self, argv: list[str], opts: LaunchOptions, *,
                 on_event: Callable[[str], None] | None = None) -> None:
        if not argv:
            raise ValueError("empty command")
        self.argv_user = list(argv)
        self.opts = opts
        user_cb = on_event or _print_event

        def safe_event(msg: str) -> None:
            # a closed terminal/pipe must never stop us from stopping our own child tree
            try:
                user_cb(msg)
            except (OSError, ValueError):
                pass

        self.on_event = safe_event
        self.redactor = Redactor(enabled=opts.redact, host_map_file=opts.host_map_file)
        self.t0 = time.time()
        self.bundle = Bundle.create(Path(opts.out_dir), self.redactor, t=self.t0,
                                    meta={"mode": "launch"})
        self._tmp = Path(tempfile.mkdtemp(prefix="sm120kit-collect-"))
        site = faulthandler_site_dir(self._tmp) if opts.faulthandler and opts.diag_env else None
        base_env = dict(os.environ)
        if opts.diag_env:
            self.env, self.added, self.argv, self.watchdog_note = diagnostic_env(
                self.bundle.root, base_env, self.argv_user, stall_timeout=opts.stall_timeout,
                site_dir=site)
        else:
            self.env, self.added, self.argv, self.watchdog_note = base_env, {}, self.argv_user, None
        self.redactor.learn_env(self.env)
        self.redactor.learn_argv(self.argv)
        if is_vllm_serve(self.argv_user):
            sa = serve_args_of(self.argv_user)
            self.bundle.meta["serve_args"] = sa.shape()
            if sa.notes:
                self.bundle.meta["serve_args_notes"] = list(sa.notes)
        self.tracker = PhaseTracker()
        self._stall_signal = stall_signal
        self.lock = threading.Lock()
        self.last_activity = time.monotonic()
        self.tails: dict[str, deque[str]] = {}
        self.signal_hit: tuple[str, str] | None = None
        self.ready = False
        # set by a caller that drives the ready server itself (validate) once its work is done:
        # the loop stops the child tree without a bundle (outcome "stopped")
        self.stop_requested = threading.Event()
        # set by such a caller when the server stopped answering it: a stall, bundled live
        self.caller_stall: str | None = None
        self.known: dict[int, Proc] = {}
        self.tracked: dict[int, Proc] = {}
        self.deaths: list[dict[str, Any]] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.readers: list[threading.Thread] = []
        self.child_log = _CappedFile(self.bundle.path("logs/child.log"), LOG_CAP, self.redactor)
        self.source_files: dict[str, _CappedFile] = {}
        self._partial: dict[str, str] = {"stdout": "", "stderr": ""}
        self.detect_to_bundle_s: float | None = None
        self.sampler: ProgressSampler | None = None
        self.last_progress = time.monotonic()
        self.echo_on = True  # off once we stop the child: its dying words go to the bundle only
        self._spy: dict[int, tuple[tuple[str, str], ...]] = {}
        self._spy_t = 0.0
        self._spy_same = False
        self._status_t = 0.0
        self._activity: str | None = None
        self.patience = {**LONG_PHASES, **opts.patience}

    # --- time base -----------------------------------------------------------------------
    def now(self) -> float:
        return time.time() - self.t0

    # --- output --------------------------------------------------------------------------
    def _reader(self, fd: int, stream: str, sink: IO[bytes] | None) -> None:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            if sink is not None and self.echo_on:
                try:
                    sink.write(chunk)
                    sink.flush()
                except (OSError, ValueError):
                    pass
            self._feed(chunk.decode("utf-8", "replace"), stream)
        rest = self._partial.get(stream, "")
        if rest:
            self._partial[stream] = ""
            self._line(rest + "\n", stream)
        try:
            os.close(fd)
        except OSError:
            pass

    def _feed(self, text: str, stream: str) -> None:
        buf = self._partial.get(stream, "") + text
        parts = buf.split("\n")
        self._partial[stream] = parts.pop()
        for p in parts:
            self._line(p + "\n", stream)
        # a long progress bar (\r, no \n) is still activity
        if self._partial[stream] and "\r" in self._partial[stream]:
            with self.lock:
                self.last_activity = time.monotonic()

    def _line(self, line: str, stream: str) -> None:
        t = self.now()
        src = source_of(line, stream)
        with self.lock:
            self.child_log.write_line(line)
            dq = self.tails.setdefault(src, deque(maxlen=max(2000, self.opts.log_tail_lines)))
            dq.append(line.rstrip("\n"))
            if src not in self.source_files and len(self.source_files) < MAX_SOURCES:
                safe = re.sub(r"[^\w.-]+", "_", src)[:80]
                self.source_files[src] = _CappedFile(self.bundle.path(f"logs/by-source/{safe}.log"),
                                                     SOURCE_CAP, self.redactor)
            if src in self.source_files:
                self.source_files[src].write_line(line)
            text = line
            sig = self._stall_signal(text)
            new_phase = self.tracker.feed(text, t, src)
            if sig != "shm-broadcast-wait":
                self.last_activity = time.monotonic()
            if new_phase is not None:
                self.on_event(f"phase {new_phase} at +{t:.1f}s")
            if sig in IMMEDIATE_SIGNALS and self.signal_hit is None:
                self.signal_hit = (sig, line.strip()[:300])
            if (new_phase in READY_PHASES or self.tracker.current in READY_PHASES
                    or _READY_RX.search(text)):
                self.ready = True

    # --- process tree --------------------------------------------------------------------
    def _scan_tree(self) -> None:
        assert self.proc is not None
        for p in tree(self.proc.pid):
            if p.pid not in self.known or abs(self.known[p.pid].create_time - p.create_time) > 0.05:
                self.known[p.pid] = p
            elif p.cmdline and p.status != "zombie":
                # titles change after start (setproctitle); an exiting process has no cmdline
                self.known[p.pid].label = p.label
                self.known[p.pid].role = p.role
                self.known[p.pid].rank = p.rank
                self.known[p.pid].cmdline = p.cmdline
        labelled = [p for p in self.known.values()
                    if p.role in ("worker", "engine-core", "warmup-rank")]
        now = time.time()
        if labelled:
            cand = labelled
        else:
            cand = [p for p in self.known.values()
                    if p.ppid == self.proc.pid and p.is_python and now - p.create_time > 2.0]
        for p in cand:
            self.tracked.setdefault(p.pid, p)

    def _check_deaths(self) -> None:
        for pid, p in list(self.tracked.items()):
            if not alive(p):
                self.deaths.append({"pid": pid, "label": p.label, "role": p.role, "t": self.now()})
                del self.tracked[pid]
                self.on_event(f"process {p.label} (pid {pid}) is gone")

    def live_procs(self) -> list[Proc]:
        return [p for p in self.known.values() if alive(p)]

    # --- progress beyond output -----------------------------------------------------------
    def _progress(self, mono: float) -> None:
        """One sample of the tree; progress resets the stall clock, CPU alone does not."""
        assert self.sampler is not None
        tick = self.sampler.sample()
        with self.lock:
            quiet = mono - max(self.last_activity, self.last_progress)
            cur = self.tracker.current
        if tick.moved & PROGRESS:
            with self.lock:
                self.last_progress = mono
        elif "cpu" in tick.moved and tick.busy_python is not None:
            self._frames(tick.busy_python, mono, quiet)
        act = self.sampler.activity(cur)
        quiet_out = mono - self.last_activity
        if act != self._activity or (quiet_out >= self.opts.status_every_s
                                     and mono - self._status_t >= self.opts.status_every_s):
            self._activity, self._status_t = act, mono
            if act is not None or quiet_out >= self.opts.status_every_s:
                self.on_event(self.sampler.status(act, self.patience.get(act or "")))

    def _frames(self, pid: int, mono: float, quiet: float) -> None:
        """py-spy the busiest Python process when only CPU moves: new frames are progress,
        the same frames twice are a spin (stays not-progress)."""
        if quiet < self.opts.stall_timeout * 0.3 or mono - self._spy_t < max(
                1.0, self.opts.stall_timeout / 5):
            return
        self._spy_t = mono
        smp = py_spy_dump(pid, native=False, timeout=3.0, retry_plain=False)
        if not smp.ok:
            return
        sig = tuple((n, f) for n, f, _ in signature(smp, depth=12))
        prev = self._spy.get(pid)
        self._spy[pid] = sig
        if prev is not None and sig == prev:
            self._spy_same = True
        if prev is not None and sig != prev:
            assert self.sampler is not None
            self.sampler.mark("frames")
            with self.lock:
                self.last_progress = mono

    def _limit(self) -> float:
        """--stall-timeout, or the patience of the known-long phase the launch is in."""
        if self.sampler is None:
            return self.opts.stall_timeout
        with self.lock:
            cur = self.tracker.current
        act = self.sampler.activity(cur)
        return max(self.opts.stall_timeout, self.patience.get(act or "", 0.0))

    def _quiet_verdict(self, silent: float, cur: str | None) -> tuple[str, str, str]:
        if self.sampler is None:
            return ("stalled", "silence", f"no output and no phase change for {silent:.0f}s "
                    f"(phase {cur or 'unknown'})")
        rep = self.sampler.report()
        rate = self.sampler.cpu_rate(min(silent, 10.0))
        if rate >= SPIN_CORES:
            same = " with the same Python frames in two py-spy samples" if self._spy_same else ""
            return ("stalled", "spin", f"spinning: CPU busy ({rate:.1f} cores){same} but no "
                    "output, no process "
                    f"births/exits, no IO, no cache growth for {silent:.0f}s (phase "
                    f"{cur or 'unknown'}; an NCCL busy-wait looks like this)")
        moved = rep["moved_last"]
        return ("stalled", "silence", f"no output and no progress on any channel for "
                f"{silent:.0f}s (phase {cur or 'unknown'}; last moved: {moved or 'nothing'})")

    def progress_report(self) -> dict[str, Any] | None:
        if self.sampler is None:
            return None
        rep = self.sampler.report()
        rep["patience_s"] = dict(self.patience)
        rep["activity"] = self._activity
        return rep

    def kv_capacity(self) -> dict[str, Any] | None:
        """KV numbers the launch printed, with the effective DCP where the model config is local."""
        with self.lock:
            lines = [ln for dq in self.tails.values() for ln in dq]
        cap = capacity_from_launch(lines, self.argv_user, self.env)
        if cap is not None:
            self.on_event(f"KV cache: {cap.tokens if cap.tokens is not None else '?'} tokens, "
                          f"{cap.available_gib} GiB; DCP engaged: {cap.engaged}"
                          + (f" ({cap.note})" if cap.note else ""))
        return cap.to_dict() if cap is not None else None

    # --- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.argv, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True, close_fds=True,
        )
        if self.opts.progress:
            self.sampler = ProgressSampler(self.proc.pid, cache_dirs(self.env),
                                           nvml_used_reader())
        root = describe_quiet(self.proc.pid)
        if root is not None:
            self.known[root.pid] = root
        out_sink = ((sys.stderr.buffer if self.opts.stdout_to_stderr else sys.stdout.buffer)
                    if self.opts.echo else None)
        err_sink = sys.stderr.buffer if self.opts.echo else None
        assert self.proc.stdout is not None and self.proc.stderr is not None
        for fobj, name, sink in ((self.proc.stdout, "stdout", out_sink),
                                 (self.proc.stderr, "stderr", err_sink)):
            fd = os.dup(fobj.fileno())
            fobj.close()
            th = threading.Thread(target=self._reader, args=(fd, name, sink), daemon=True,
                                  name=f"collect-read-{name}")
            th.start()
            self.readers.append(th)

    def stop(self) -> list[dict[str, Any]]:
        """Stop our child tree (SIGINT → SIGTERM → SIGKILL) and reap the child."""
        if self.proc is None:
            return []
        self.echo_on = False
        try:
            self._scan_tree()
        except Exception:
            pass
        procs = [p for p in self.known.values()]
        steps = stop_tree(procs, pgid=self.proc.pid, int_timeout=self.opts.int_timeout,
                          term_timeout=self.opts.term_timeout,
                          on_step=lambda sig, left: self.on_event(
                              f"stopping {len(left)} process(es) with {sig}"))
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        return steps

    def _join_readers(self, timeout: float = 3.0) -> None:
        end = time.monotonic() + timeout
        for th in self.readers:
            th.join(max(0.0, end - time.monotonic()))

    def _context(self, reason: str, kind: str) -> CollectContext:
        with self.lock:
            tl = [{"phase": ph, "t": round(t, 3), "stream": s} for ph, t, s in self.tracker.timeline]
            logs = {k: list(v) for k, v in self.tails.items()}
            cur = self.tracker.current
        notes = []
        if self.watchdog_note:
            notes.append(self.watchdog_note)
        return CollectContext(
            mode="launch", reason=reason, stall_kind=kind, argv=self.argv, env=self.env,
            added_env=self.added, timeline=tl, current_phase=cur, logs=logs,
            deaths=list(self.deaths), exit_code=self.proc.poll() if self.proc else None,
            own_pids={p.pid for p in self.known.values()},
            fh_dir=self.bundle.root / "faulthandler" if "SM120KIT_FAULTHANDLER_DIR" in self.added else None,
            fr_prefixes=[v for k, v in self.env.items() if k in flight.FR_PREFIX_VARS],
            watchdog_dirs=[str(self.bundle.root / "vllm-watchdog")],
            nccl_debug_files=[self.env["NCCL_DEBUG_FILE"]] if self.env.get("NCCL_DEBUG_FILE") and
            not str(self.env["NCCL_DEBUG_FILE"]).startswith(str(self.bundle.root)) else [],
            started=self.t0, notes=notes,
        )

    def _options(self) -> Options:
        return Options(deadline_s=self.opts.deadline_s, sample_gap_s=self.opts.sample_gap_s,
                       stack_method=self.opts.stacks, ras_addr=self.env.get("NCCL_RAS_ADDR"),
                       log_tail_lines=self.opts.log_tail_lines, doctor=self.opts.doctor,
                       hooks=self.opts.hooks)

    def _bundle(self, reason: str, kind: str, *, live: bool = True) -> tuple[Path, Result | None]:
        t_detect = time.monotonic()
        prog = self.progress_report()
        if prog is not None:
            self.bundle.write_json("progress.json", prog)
        ctx = self._context(reason, kind)
        opts = self._options()
        procs = self.live_procs() if live else []
        res: Result | None = None
        remote = self._start_remote(ctx, opts, t_detect) if live else None
        try:
            if procs:
                res = snapshot(self.bundle, procs, ctx, opts)
            if remote is not None:
                remote[0].join(max(0.0, t_detect + opts.deadline_s - time.monotonic()) + 3.0)
                if res is not None:
                    res.verdict += remote[1]
            else:
                write_processes(self.bundle, list(self.known.values()), ctx)
        except KeyboardInterrupt:
            self.on_event("interrupted again: writing what was collected")
        finally:
            self._close_logs()
            ctx = self._context(reason, kind) if res is None else ctx
            tb = finalize(self.bundle, procs or list(self.known.values()), ctx, res, opts)
            self.detect_to_bundle_s = round(time.monotonic() - t_detect, 3)
        return tb, res

    def _start_remote(self, ctx: CollectContext, opts: Options, t0: float
                      ) -> tuple[threading.Thread, list[str]] | None:
        hook = self.opts.remote
        if hook is None:
            return None
        lines: list[str] = []

        def run() -> None:
            try:
                lines.extend(hook(self.bundle, ctx, opts, t0 + opts.deadline_s))
            except Exception as exc:  # the other hosts are extra evidence, never fatal
                ctx.notes.append(f"gathering the other hosts failed: {type(exc).__name__}: {exc}")

        th = threading.Thread(target=run, name="collect-remote", daemon=True)
        th.start()
        return th, lines

    def _close_logs(self) -> None:
        with self.lock:
            self.child_log.close(list(self.tails.get("stdout", []))[-2000:])
            for src, f in self.source_files.items():
                f.close(list(self.tails.get(src, []))[-2000:])

    def cleanup(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)

    def report_stall(self, reason: str) -> None:
        """A caller driving the ready server saw it stop answering: bundle it live, then stop."""
        self.caller_stall = reason

    def discard_bundle(self) -> None:
        self._close_logs()
        shutil.rmtree(self.bundle.root, ignore_errors=True)

    # --- main loop -----------------------------------------------------------------------
    def _exited(self, rc: int) -> _Stop:
        self._join_readers()
        if rc == 0:
            return _Stop("exited", "", "the command exited with code 0", rc)
        reason = f"the command exited with code {rc}"
        if self.deaths:
            d = self.deaths[0]
            reason += f"; first gone: {d['label']} (pid {d['pid']}) at +{d['t']:.1f}s"
        return _Stop("crashed", "exit", reason, rc)

    def _decide(self, mono: float, grace_until: float | None) -> tuple[_Stop | None, float | None]:
        """One look at every stop condition (ready, caller, hang line, death, quiet)."""
        if self.opts.until_ready and self.ready:
            return _Stop("ready", "", "the server is ready"), grace_until
        if self.caller_stall is not None:
            return _Stop("stalled", "caller", self.caller_stall), grace_until
        if self.stop_requested.is_set():
            return _Stop("stopped", "", "stopped by the caller after its work"), grace_until
        with self.lock:
            sig = self.signal_hit
            silent = mono - max(self.last_activity, self.last_progress)
            cur = self.tracker.current
        if sig is not None:
            return _Stop("crashed" if sig[0] in DEATH_SIGNALS else "stalled", "signal",
                         f"known hang message ({sig[0]}): {sig[1]}{self._cold_hint(sig[1])}"
                         ), grace_until
        if self.deaths:
            if grace_until is None:
                return None, mono + 2.0  # let the traceback and the exit arrive
            if mono >= grace_until:
                d = self.deaths[0]
                return _Stop("crashed", "death", f"{d['label']} (pid {d['pid']}) died while the "
                             "command kept running"), grace_until
        if silent > self._limit():
            outcome, kind, reason = self._quiet_verdict(silent, cur)
            return _Stop(outcome, kind, reason, quiet_s=round(silent, 2)), grace_until
        return None, grace_until

    def _cold_hint(self, line: str) -> str:
        """vLLM's own engine-ready timeout hit while the tree was still compiling / loading: a
        cold start, not a hang (the fix is vLLM's timeout, not the launch)."""
        if "Timed out waiting for engine core" not in line or self.sampler is None:
            return ""
        rep = self.sampler.report()
        busy = []
        if rep["compilers_done"] or rep["compilers_running"] or rep["compile_cpu_s"] > 0:
            busy.append(f"JIT compiling ({sum(rep['compilers_done'].values())} compiler runs)")
        if rep["io_read_bytes"] > 1 << 30:
            busy.append(f"loading weights ({rep['io_read_bytes'] / 1e9:.1f} GB read)")
        if not busy:
            return ""
        return (f" -- the engine was still {' and '.join(busy)}: a cold start past vLLM's "
                "VLLM_ENGINE_READY_TIMEOUT_S (default 600 s), not a hang; raise it, e.g. "
                "VLLM_ENGINE_READY_TIMEOUT_S=1800")

    def _watch(self) -> _Stop:
        """Poll the child until a stop condition holds (KeyboardInterrupt passes through)."""
        assert self.proc is not None
        last_scan = last_tick = 0.0
        grace: float | None = None
        while True:
            rc = self.proc.poll()
            if rc is not None:
                return self._exited(rc)
            mono = time.monotonic()
            if mono - last_scan > 1.0:
                try:
                    self._scan_tree()
                    self._check_deaths()
                except Exception:
                    pass
                last_scan = mono
            if self.sampler is not None and mono - last_tick >= self.opts.progress_interval_s:
                last_tick = mono
                self._progress(mono)
            stop, grace = self._decide(mono, grace)
            if stop is not None:
                return stop
            time.sleep(self.opts.poll_s)

    def _timeline(self) -> tuple[list[dict[str, Any]], str | None]:
        with self.lock:
            return ([{"phase": ph, "t": round(t, 3), "stream": s}
                     for ph, t, s in self.tracker.timeline], self.tracker.current)

    def _after_stall(self, st: _Stop) -> tuple[Path, Result | None]:
        o = self.opts
        assert self.proc is not None
        live = self.proc.poll() is None
        self.on_event(f"{st.reason}; collecting evidence (deadline {o.deadline_s:.0f}s)")
        bundle_path, res = self._bundle(st.reason or st.outcome, st.kind or st.outcome, live=live)
        self.on_event(f"bundle written: {bundle_path}")
        if o.keep_running and st.outcome == "stalled" and self.proc.poll() is None:
            self.on_event("--keep-running: still supervising; Ctrl-C to stop")
            try:
                while self.proc.poll() is None:
                    time.sleep(o.poll_s)
            except KeyboardInterrupt:
                st.outcome = "interrupted"
            self._join_readers()
        return bundle_path, res

    def run(self) -> LaunchResult:
        o = self.opts
        self.start()
        assert self.proc is not None
        self.on_event(f"started pid {self.proc.pid}; a bundle is written under {o.out_dir} only "
                      "if something goes wrong")
        if self.watchdog_note:
            self.on_event(self.watchdog_note)
        st = _Stop("exited")
        bundle_path: Path | None = None
        res: Result | None = None
        steps: list[dict[str, Any]] = []
        detected: float | None = None
        frozen: tuple[list[dict[str, Any]], str | None] | None = None
        try:
            try:
                st = self._watch()
            except KeyboardInterrupt:
                st = _Stop("interrupted", "interrupt", "interrupted by the user (Ctrl-C)")
            detected = time.time()
            frozen = self._timeline()
            if st.outcome in ("stalled", "crashed", "interrupted") or o.always_bundle:
                bundle_path, res = self._after_stall(st)
        except KeyboardInterrupt:
            st.outcome, st.reason = "interrupted", "interrupted by the user (Ctrl-C)"
        finally:
            if self.proc.poll() is None or any(alive(p) for p in self.known.values()):
                steps = self.stop()
            st.child_rc = self.proc.poll() if st.child_rc is None else st.child_rc
            self._join_readers(2.0)
            if bundle_path is None:
                if st.outcome in ("exited", "ready", "stopped") and not o.always_bundle:
                    self.discard_bundle()
                else:
                    bundle_path, res = self._bundle(st.reason or st.outcome,
                                                    st.kind or st.outcome, live=False)
            self.cleanup()
        tl, cur = frozen if frozen is not None else self._timeline()
        d2b = self.detect_to_bundle_s if bundle_path is not None else None
        kv = self.kv_capacity() if st.outcome in ("ready", "exited", "crashed", "stalled") \
            else None
        return LaunchResult(
            exit_code=st.exit_code(), outcome=st.outcome, reason=st.reason, bundle=bundle_path,
            timeline=tl, current_phase=cur, child_exit_code=st.child_rc,
            seconds=round(self.now(), 3), detect_to_bundle_s=d2b, stop_steps=steps,
            verdict=res.verdict if res else [], added_env=self.redactor.env(self.added),
            watchdog=self.watchdog_note, self_cpu_s=_self_cpu(), progress=self.progress_report(),
            kv_capacity=kv, quiet_s=st.quiet_s,
            detected_at=detected if st.outcome in ("stalled", "crashed") else None,
        )

def _self_cpu() -> float | None:
    try:
        import resource

        ru = resource.getrusage(resource.RUSAGE_SELF)
        return round(ru.ru_utime + ru.ru_stime, 3)
    except (ImportError, OSError):
        return None


def _print_event(msg: str) -> None:
    print(f"sm120kit collect: {msg}", file=sys.stderr, flush=True)


def describe_quiet(pid: int) -> Proc | None:
    try:
        import psutil

        return describe(psutil.Process(pid))
    except Exception:
        return None


def launch(argv: list[str], opts: LaunchOptions, *,
           on_event: Callable[[str], None] | None = None) -> LaunchResult:
    """Run ``argv`` under supervision (see the module docstring); never raises for the child's
    failures: they are in the result."""
    sup = LaunchSupervisor(argv, opts, on_event=on_event)
    prev_term = None
    if threading.current_thread() is threading.main_thread():
        def on_term(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        prev_term = signal.signal(signal.SIGTERM, on_term)
    try:
        return sup.run()
    finally:
        if prev_term is not None:
            signal.signal(signal.SIGTERM, prev_term)
