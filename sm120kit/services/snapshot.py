"""Snapshot a set of processes into a support bundle: every collector in its own thread, each
under its own timeout, all under one global deadline; partial evidence is always written.

Public API:

* :func:`collect_processes` — the contract used by ``sm120kit warmup run`` (and ``--attach``):
  snapshot the given pids now, never signal them, return the ``.tar.gz`` path.
* :func:`snapshot` / :func:`finalize` — the two halves used by the launch supervisor, which adds
  its logs, phase timeline and deaths through :class:`CollectContext`.
"""

from __future__ import annotations

import os
import re
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sm120kit.errors import UserError
from sm120kit.evidence import flight, gpu, ras, stacks
from sm120kit.evidence.procs import Proc, alive, describe, environ
from sm120kit.evidence.redact import Redactor, is_secret_env_name
from sm120kit.models.serve_args import parse_serve_args
from sm120kit.services.bundles import Bundle, CollectorRecord, iso

STACK_ROLES = ("worker", "engine-core", "api-server", "warmup-rank", "python")


@dataclass
class BundleHooks:
    """What the composing layer (the CLI) adds to a bundle; services never import capabilities.

    ``doctor_report``: doctor tiers 0-1 as a JSON-able dict (``doctor.json``); ``judge``: the
    verdict lines on a written bundle directory (the diagnose rules engine). Either may be None:
    the bundle then says which part was not composed. Both must be module-level functions (a Ray
    node pickles them by reference)."""

    doctor_report: Callable[[], dict[str, Any]] | None = None
    judge: Callable[[Path], list[str]] | None = None


@dataclass
class Options:
    deadline_s: float = 60.0
    sample_gap_s: float = 2.0
    stack_method: str = "auto"  # auto | py-spy | faulthandler | none
    native: bool = True
    pyspy_timeout_s: float = 8.0
    native_timeout_s: float = 6.0
    native_budget_s: float = 4.0  # wall time for the whole --native round
    ras_addr: str | None = None
    ras_gap_s: float = 3.0
    doctor: bool = True
    nvml: bool = True
    fr_analyze: bool = True
    fr_wait_s: float = 3.0  # how long to wait for dump files torch is still writing
    log_tail_lines: int = 200
    max_stack_procs: int = 64
    hooks: BundleHooks = field(default_factory=BundleHooks)


@dataclass
class CollectContext:
    """What the caller knows beyond the pids (the launch supervisor fills most of it)."""

    mode: str = "processes"  # launch | attach | processes
    reason: str = "requested"
    stall_kind: str | None = None  # silence | signal | death | exit | interrupt | requested
    argv: list[str] | None = None
    env: dict[str, str] | None = None  # the child's environment (launch)
    added_env: dict[str, str] = field(default_factory=dict)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    current_phase: str | None = None
    logs: dict[str, list[str]] = field(default_factory=dict)  # source -> last lines
    deaths: list[dict[str, Any]] = field(default_factory=list)
    exit_code: int | None = None
    own_pids: set[int] = field(default_factory=set)  # may be signalled (faulthandler)
    fh_dir: Path | None = None
    fr_prefixes: list[str] = field(default_factory=list)
    watchdog_dirs: list[str] = field(default_factory=list)
    nccl_debug_files: list[str] = field(default_factory=list)
    started: float | None = None
    notes: list[str] = field(default_factory=list)
    # the caller's own stall record (stalled ranks with pid/phase/collective): stall.json
    stall: dict[str, Any] | None = None


@dataclass
class Result:
    bundle_dir: Path
    tarball: Path | None
    verdict: list[str]
    analysis: dict[int, dict[str, Any]]
    manifest: list[dict[str, Any]]


# --- running collectors ----------------------------------------------------------------------
class _Runner:
    def __init__(self, bundle: Bundle, deadline: float) -> None:
        self.bundle = bundle
        self.deadline = deadline
        self.threads: list[tuple[threading.Thread, CollectorRecord, float, float]] = []

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def start(self, name: str, fn: Callable[[CollectorRecord], None], timeout: float) -> None:
        rec = CollectorRecord(name=name, started=iso(time.time()))
        self.bundle.record(rec)
        t0 = time.monotonic()

        def body() -> None:
            try:
                fn(rec)
                if rec.status == "running":
                    rec.status = "ok"
            except _Skip as exc:
                rec.status, rec.error = "skipped", str(exc)
            except Exception as exc:  # a collector failure never stops the others
                rec.status = "error"
                rec.error = f"{type(exc).__name__}: {exc}"
                rec.detail = traceback.format_exc()[-2000:]
            finally:
                if rec.status != "timeout":
                    rec.seconds = round(time.monotonic() - t0, 3)
                self.bundle.record(rec)

        th = threading.Thread(target=body, name=f"collect-{name}", daemon=True)
        th.start()
        self.threads.append((th, rec, t0, timeout))

    def join(self) -> None:
        for th, rec, t0, timeout in self.threads:
            end = min(self.deadline, t0 + timeout)
            th.join(max(0.0, end - time.monotonic()))
            if th.is_alive():
                rec.status = "timeout"
                rec.seconds = round(time.monotonic() - t0, 3)
                rec.error = f"did not finish within {min(timeout, self.deadline - t0):.1f}s"
                self.bundle.record(rec)


class _Skip(Exception):
    pass


# --- individual collectors -------------------------------------------------------------------
def _stack_targets(procs: list[Proc], opts: Options) -> list[Proc]:
    pr = [p for p in procs if p.is_python or p.role in STACK_ROLES]
    pr.sort(key=lambda p: (STACK_ROLES.index(p.role) if p.role in STACK_ROLES else 9, p.pid))
    return pr[: opts.max_stack_procs]


class _StackRun:
    """One stack collection: two plain rounds over every target (busy vs blocked), then an
    optional ``--native`` round within its budget; the analysis and the collector record."""

    def __init__(self, bundle: Bundle, procs: list[Proc], opts: Options, ctx: CollectContext,
                 runner: _Runner) -> None:
        self.bundle, self.opts, self.ctx, self.runner = bundle, opts, ctx, runner
        self.exe = stacks.py_spy_path()
        self.use_pyspy = opts.stack_method in ("auto", "py-spy") and self.exe is not None
        self.notes: list[str] = []
        if opts.stack_method in ("auto", "py-spy") and self.exe is None:
            self.notes.append("py-spy is not installed (a dependency of sm120kit): "
                              "pip install py-spy")
        self.labels = {p.pid: p.label for p in procs}
        self.can_fh = ctx.fh_dir is not None

    def sample(self, p: Proc, native: bool) -> stacks.Sample:
        """py-spy, else faulthandler for a child of ours, else a record of why none."""
        s: stacks.Sample | None = None
        if self.use_pyspy:
            s = stacks.py_spy_dump(p.pid, native=native, timeout=min(
                self.opts.pyspy_timeout_s, max(0.5, self.runner.left())))
            if s.ok or s.error_kind not in ("permission", "missing", "timeout", "other"):
                return s
        if (self.can_fh and p.pid in self.ctx.own_pids and alive(p)
                and self.opts.stack_method != "py-spy"):
            assert self.ctx.fh_dir is not None
            fh = stacks.faulthandler_dump(p.pid, self.ctx.fh_dir,
                                          timeout=min(3.0, self.runner.left()))
            if fh.ok or s is None:
                if s is not None and not s.ok:
                    fh.error = f"py-spy failed ({s.error}); used faulthandler"
                return fh
        if s is None:
            s = stacks.Sample(p.pid, False, "none", error="no stack method available "
                              "(py-spy missing and the process is not a child of ours)",
                              error_kind="missing")
        return s

    def round(self, suffix: str, native: bool, which: list[Proc], limit: int | None = None,
              fn: Any = None) -> dict[int, stacks.Sample]:
        """Sample ``which`` in parallel threads within the deadline; write each sample."""
        res: dict[int, stacks.Sample] = {}
        todo = list(which)
        lock = threading.Lock()

        def worker() -> None:
            while True:
                with lock:
                    if not todo or self.runner.left() <= 0.3:
                        return
                    p = todo.pop(0)
                got = (fn or self.sample)(p, native)
                if got is not None:
                    res[p.pid] = got

        ths = [threading.Thread(target=worker, daemon=True)
               for _ in range(min(len(todo), limit or len(todo)))]
        for th in ths:
            th.start()
        for th in ths:
            th.join(max(0.0, self.runner.left()))
        for p in which:
            s = res.get(p.pid)
            if s is not None:
                label = self.labels.get(p.pid)
                self.bundle.write_json(f"stacks/{p.pid}{suffix}.json", {"label": label,
                                                                        **s.to_dict()})
                self.bundle.write_text(f"stacks/{p.pid}{suffix}.txt",
                                       stacks.render_text(s, label or ""))
        return res

    def native_round(self, targets: list[Proc], first: dict[int, stacks.Sample]
                     ) -> dict[int, stacks.Sample]:
        """One process per distinct Python stack first (the odd rank and one of the crowd),
        then the rest, within a time budget: --native reads each process's libtorch symbols."""
        opts = self.opts
        nat_targets = [p for p in targets if first.get(p.pid) is not None
                       and first[p.pid].method.startswith("py-spy") and first[p.pid].ok]
        if not (opts.native and self.use_pyspy and nat_targets and self.runner.left() > 3.0):
            return {}
        groups: dict[Any, list[Proc]] = {}
        for p in nat_targets:
            groups.setdefault(stacks.signature(first[p.pid]), []).append(p)
        ordered = [g[0] for g in groups.values()] + [p for g in groups.values() for p in g[1:]]
        nat_end = time.monotonic() + min(opts.native_budget_s, self.runner.left() - 1.0)

        def native_one(p: Proc, _n: bool) -> stacks.Sample | None:
            left = nat_end - time.monotonic()
            if left < 0.5:
                return None  # budget used up: counted as skipped below
            return stacks.py_spy_dump(p.pid, native=True,
                                      timeout=min(opts.native_timeout_s, left), retry_plain=False)

        native = self.round(".native", True, ordered, limit=max(1, os.cpu_count() or 1),
                            fn=native_one)
        failed = [s for s in native.values() if not s.ok]
        if failed:
            self.notes.append(f"py-spy --native failed or timed out on {len(failed)} "
                              f"process(es) ({failed[0].error}); Python stacks are complete "
                              "without it")
        missing = len(nat_targets) - len(native)
        if missing > 0:
            self.notes.append(f"--native skipped for {missing} process(es): its "
                              f"{opts.native_budget_s:.0f}s budget was used up (one process "
                              "per distinct stack went first)")
        return native

    def samples(self, targets: list[Proc]) -> tuple[dict[int, stacks.Sample], ...]:
        """Two plain samples (~10-100 ms each, all processes in parallel) tell busy from
        blocked; the --native round comes after them, so it cannot distort the comparison."""
        first = self.round("", False, targets)
        perm = [s for s in first.values() if s.error_kind == "permission"]
        if perm:
            self.notes.append(f"py-spy was refused ptrace on {len(perm)} process(es): "
                              f"{perm[0].error}. To fix: "
                              + stacks.ptrace_advice(stacks.ptrace_facts()))
        wait = min(self.opts.sample_gap_s, max(0.0, self.runner.left() - 2.0))
        if wait > 0:
            time.sleep(wait)
        second = self.round(".2", False, targets) if self.runner.left() > 0.5 else {}
        return first, second, self.native_round(targets, first)


def _stack_analysis(p: Proc, s1: stacks.Sample, s2: stacks.Sample | None,
                    nat: stacks.Sample | None) -> dict[str, Any]:
    a = stacks.compare(s1, s2)
    a.update({"label": p.label, "role": p.role, "rank": p.rank, "method": s1.method})
    if nat is not None and nat.ok:
        w = stacks.where(nat)
        if w.get("native_top"):
            a["native_top"] = w["native_top"]
        a["native_frames"] = stacks.native_summary(nat)
    return a


def _collect_stacks(
    bundle: Bundle, procs: list[Proc], opts: Options, ctx: CollectContext, rec: CollectorRecord,
    runner: _Runner, out: dict[int, dict[str, Any]],
) -> None:
    if opts.stack_method == "none":
        raise _Skip("disabled (--stacks none)")
    targets = _stack_targets(procs, opts)
    if not targets:
        raise _Skip("no Python processes to sample")
    run = _StackRun(bundle, procs, opts, ctx, runner)
    first, second, native = run.samples(targets)
    for p in targets:
        s1 = first.get(p.pid)
        if s1 is not None:
            out[p.pid] = _stack_analysis(p, s1, second.get(p.pid), native.get(p.pid))
    notes = run.notes
    bundle.write_json("stacks/analysis.json", {"processes": out, "notes": notes})
    ok = sum(1 for s in first.values() if s.ok)
    rec.detail = f"{ok}/{len(targets)} processes sampled; methods: " + ", ".join(
        sorted({s.method for s in first.values()})
    ) + ("; " + " ".join(notes) if notes else "")
    rec.files = ["stacks/"]
    if ok == 0:
        rec.status = "error"
        rec.error = (notes[0] if notes else
                     next((s.error for s in first.values() if s.error), "no stack collected"))


def _collect_nvml(bundle: Bundle, opts: Options, runner: _Runner, rec: CollectorRecord) -> None:
    if not opts.nvml:
        raise _Skip("disabled")
    samples = [gpu.nvml_snapshot(timeout=min(5.0, max(0.5, runner.left())))]
    if samples[0].get("available") and runner.left() > opts.sample_gap_s + 1:
        time.sleep(opts.sample_gap_s)
        samples.append(gpu.nvml_snapshot(timeout=min(5.0, max(0.5, runner.left()))))
    bundle.write_json("nvml.json", {"samples": samples})
    rec.files = ["nvml.json"]
    if not samples[0].get("available"):
        rec.status = "skipped"
        rec.error = str(samples[0].get("error") or "NVML not available")


def _collect_ras(bundle: Bundle, opts: Options, runner: _Runner, rec: CollectorRecord) -> None:
    addr = opts.ras_addr or ras.DEFAULT_ADDR
    files = []
    for n in (1, 2):
        if n == 2:
            time.sleep(min(opts.ras_gap_s, max(0.0, runner.left() - 3.0)))
        r = ras.query(addr, verbose=True, timeout=min(10.0, max(0.5, runner.left())))
        if not r.listening:
            raise _Skip(f"NCCL RAS: {r.error} (NCCL < 2.24, RAS disabled, or no NCCL job)")
        bundle.write_text(f"ras/status-{n}.txt", r.text + (f"\n[error: {r.error}]\n" if r.error else ""))
        files.append(f"ras/status-{n}.txt")
        if runner.left() > 2:
            j = ras.query(addr, verbose=True, fmt="json", timeout=min(5.0, runner.left()))
            if j.ok and j.text.strip():
                bundle.write_text(f"ras/status-{n}.json", j.text)
                files.append(f"ras/status-{n}.json")
        if not r.ok:
            rec.status, rec.error = "error", r.error
    rec.files = files


#: how long to wait for the dump after a torch NCCL watchdog timeout. Seen on an H200 with torch
#: 2.11: "preparing to dump debug info" 0.2 s after the timeout line, the stack trace of the failed
#: collective 4.4 s later, the dump itself after that; the default 3 s wait missed it.
FR_TIMEOUT_WAIT_S = 20.0
_FR_DUMPING = ("watchdog-timeout", "Watchdog caught collective operation timeout",
               "preparing to dump debug info", "Received a dump signal")


def _fr_wait(opts: Options, ctx: CollectContext) -> float:
    """Seconds to wait for Flight Recorder files: longer when torch is known to be dumping."""
    env = ctx.env or {}
    dumping = env.get("TORCH_NCCL_DUMP_ON_TIMEOUT", "1") not in ("0", "false", "False")
    texts = [ctx.reason or ""] + [ln for lines in ctx.logs.values() for ln in lines[-50:]]
    if dumping and any(k in t for t in texts for k in _FR_DUMPING):
        return max(opts.fr_wait_s, FR_TIMEOUT_WAIT_S)
    return opts.fr_wait_s


def _collect_flight(bundle: Bundle, opts: Options, ctx: CollectContext, runner: _Runner,
                    rec: CollectorRecord) -> None:
    prefixes = list(dict.fromkeys(ctx.fr_prefixes))
    if not prefixes:
        raise _Skip("no Flight Recorder dump prefix known (TORCH_FR_DUMP_TEMP_FILE unset)")
    triggered: list[str] = []
    pipe_prefix = (ctx.env or {}).get(flight.PIPE_VAR)
    if pipe_prefix:
        triggered = flight.trigger_pipes(pipe_prefix, wait_s=min(3.0, max(0.0, runner.left() - 5)))
    found = _settled_dumps(prefixes, time.monotonic() + min(_fr_wait(opts, ctx),
                                                            max(0.0, runner.left() - 5.0)))
    info: dict[str, Any] = {"prefixes": prefixes, "pipes_triggered": triggered, "groups": []}
    if not found:
        bundle.write_json("flight/index.json", info)
        raise _Skip("no Flight Recorder dump files: gloo never dumps by itself; NCCL dumps on a "
                    "watchdog timeout or through TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
    files = ["flight/index.json"]
    for gi, (pre, dumps) in enumerate(found.items()):
        sub = f"flight/g{gi}" if len(found) > 1 else "flight/dumps"
        info["groups"].append(_flight_group(bundle, opts, runner, pre, dumps, sub, files))
    bundle.write_json("flight/index.json", info)
    rec.files = files
    rec.detail = "; ".join(f"{len(v)} rank dump(s) for {k}" for k, v in found.items())


def _settled_dumps(prefixes: list[str], end: float) -> dict[str, dict[int, Path]]:
    """torch writes dumps asynchronously (watchdog, pipe, a rank's own thread): wait, in parallel
    with the stack samples, until the set of dump files stops growing (or ``end``, monotonic)."""
    last_n, stable_since = -1, time.monotonic()
    while True:
        found = {pre: got for pre in prefixes if (got := flight.find_dumps(pre))}
        n = sum(len(v) for v in found.values())
        if n != last_n:
            last_n, stable_since = n, time.monotonic()
        if time.monotonic() >= end or (n and time.monotonic() - stable_since >= 1.0):
            return found
        time.sleep(0.2)


def _flight_group(bundle: Bundle, opts: Options, runner: _Runner, pre: str,
                  dumps: dict[int, Path], sub: str, files: list[str]) -> dict[str, Any]:
    """Copy one dump prefix's rank files under ``sub``, fill their pg config, summarize and
    (with ``fr_analyze``) run torch's analyzer; appends the written paths to ``files``."""
    loaded: dict[int, dict[str, Any]] = {}
    patched_dir = bundle.path(f"{sub}-pgfilled/x").parent
    base = os.path.basename(pre) or "rank_"
    for rank, path in dumps.items():
        bundle.copy_binary_file(path, f"{sub}/{base}{rank}", cap=64 * 1024 * 1024)
        dump = flight.load_dump(path)
        if dump is not None:
            loaded[rank] = dump
    changed = False
    import pickle

    for rank, dump in loaded.items():
        d2, ch = flight.fill_pg_config(dump, sorted(loaded))
        changed = changed or ch
        with open(patched_dir / f"{base}{rank}", "wb") as f:
            pickle.dump(d2, f)
    summ = flight.summarize(loaded)
    g = {"prefix": pre, "dir": sub, "ranks": sorted(dumps), "pg_config_filled": changed,
         "summary": summ}
    if opts.fr_analyze and runner.left() > 3:
        a = flight.run_analyzer(patched_dir, base, timeout=min(60.0, runner.left() - 1))
        g["analyzer"] = {k: v for k, v in a.items() if k != "output"}
        if "output" in a:
            bundle.write_text(f"{sub}-analysis.txt", str(a["output"]))
            files.append(f"{sub}-analysis.txt")
    files += [sub + "/", f"{sub}-pgfilled/"]
    return g


def _collect_watchdog(bundle: Bundle, ctx: CollectContext, rec: CollectorRecord) -> None:
    files = []
    for d in dict.fromkeys(ctx.watchdog_dirs):
        try:
            cands = sorted(Path(d).glob("VLLM_STACK_DUMP_for_*"))
        except OSError:
            continue
        for p in cands[:256]:
            rel = f"vllm-watchdog/{p.name}"
            bundle.copy_text_file(p, rel)  # (in place when the dump dir is the bundle's own)
            files.append(rel)
    if not ctx.watchdog_dirs:
        raise _Skip("vLLM --watchdog-config dump_dir not set")
    if not files:
        raise _Skip("no vLLM watchdog stack dumps (VLLM_STACK_DUMP_for_*) yet")
    rec.files = files


def _collect_nccl_logs(bundle: Bundle, ctx: CollectContext, rec: CollectorRecord) -> None:
    files = []
    for pat in dict.fromkeys(ctx.nccl_debug_files):
        # NCCL_DEBUG_FILE uses %h (host) and %p (pid)
        glob = re.sub(r"%[hp]", "*", os.path.basename(pat))
        d = Path(os.path.dirname(pat) or ".")
        try:
            cands = sorted(d.glob(glob))
        except OSError:
            continue
        for p in cands[:512]:
            if p.is_file():
                bundle.copy_text_file(p, f"nccl/{p.name}")
                files.append(f"nccl/{p.name}")
    # files NCCL wrote straight into the bundle (collect pointed NCCL_DEBUG_FILE there)
    direct = bundle.path("nccl/x").parent
    if direct.is_dir():
        for p in sorted(direct.iterdir())[:512]:
            name = f"nccl/{p.name}"
            if p.is_file() and name not in files:
                files.append(name)
    if not files:
        raise _Skip("no NCCL debug files (NCCL_DEBUG_FILE unset or nothing written)")
    rec.files = files


def _collect_env(bundle: Bundle, procs: list[Proc], ctx: CollectContext, rec: CollectorRecord) -> None:
    red = bundle.redactor
    body: dict[str, Any] = {"mode": ctx.mode}
    if ctx.env is not None:
        body["child_env"] = red.env(ctx.env)
        body["added_by_collect"] = red.env(ctx.added_env)
    per: dict[str, Any] = {}
    for p in procs:
        if ctx.env is not None and p.pid in ctx.own_pids:
            continue  # same env as the child's; keep the bundle small
        env, src = environ(p.pid)
        if not env:
            per[str(p.pid)] = {"error": "environment not readable"}
            continue
        if str(src) in per and "pids" in per[str(src)]:
            per[str(src)]["pids"].append(p.pid)
            continue
        red.learn_env(env)
        keep = {k: v for k, v in env.items() if re.match(
            r"(NCCL|TORCH|VLLM|CUDA|NVIDIA|PYTORCH|HF|FLASHINFER|OMP|MASTER|RANK|WORLD|LOCAL|"
            r"LD_|PYTHON|PATH$)", k) or is_secretish(k)}
        per[str(src)] = {"pids": [p.pid], "env": red.env(keep)}
    if per:
        body["process_env"] = per
    bundle.write_json("env.json", body)
    rec.files = ["env.json"]


def is_secretish(name: str) -> bool:
    return is_secret_env_name(name)


def _collect_doctor(bundle: Bundle, opts: Options, rec: CollectorRecord) -> None:
    if not opts.doctor:
        raise _Skip("disabled")
    if opts.hooks.doctor_report is None:
        raise _Skip("no doctor report composed by the caller")
    rep = opts.hooks.doctor_report()
    bundle.write_json("doctor.json", rep)
    rec.files = ["doctor.json"]


def _collect_host(bundle: Bundle, rec: CollectorRecord) -> None:
    bundle.write_json("host.json", gpu.host_facts())
    rec.files = ["host.json"]


def write_processes(bundle: Bundle, procs: list[Proc], ctx: CollectContext) -> None:
    red = bundle.redactor
    for p in procs:
        red.learn_argv(p.cmdline)
    body = {
        str(p.pid): {
            **p.to_dict(),
            "cmdline": red.argv(p.cmdline),
            "alive": alive(p),
            "ours": p.pid in ctx.own_pids,
        }
        for p in procs
    }
    bundle.write_json("processes.json", body)


# --- the snapshot ----------------------------------------------------------------------------
def snapshot(bundle: Bundle, procs: list[Proc], ctx: CollectContext, opts: Options) -> Result:
    """Run every collector on ``procs`` into ``bundle``; bounded by ``opts.deadline_s``."""
    t_start = time.monotonic()
    deadline = t_start + max(1.0, opts.deadline_s)
    runner = _Runner(bundle, deadline)
    bundle.meta.update({"mode": ctx.mode, "reason": ctx.reason, "stall_kind": ctx.stall_kind,
                        "snapshot_started": iso(time.time()), "deadline_s": opts.deadline_s})
    if ctx.env:
        bundle.redactor.learn_env(ctx.env)
    if ctx.argv:
        bundle.redactor.learn_argv(ctx.argv)
    write_processes(bundle, procs, ctx)
    analysis: dict[int, dict[str, Any]] = {}
    gap = opts.sample_gap_s
    stack_budget = gap + 2 * opts.pyspy_timeout_s + 2 * opts.native_timeout_s + 6.0
    runner.start("stacks", lambda r: _collect_stacks(bundle, procs, opts, ctx, r, runner, analysis),
                 stack_budget)
    runner.start("nvml", lambda r: _collect_nvml(bundle, opts, runner, r), gap + 12.0)
    runner.start("ras", lambda r: _collect_ras(bundle, opts, runner, r), opts.ras_gap_s + 30.0)
    runner.start("flight", lambda r: _collect_flight(bundle, opts, ctx, runner, r), 75.0)
    runner.start("vllm-watchdog", lambda r: _collect_watchdog(bundle, ctx, r), 10.0)
    runner.start("nccl-logs", lambda r: _collect_nccl_logs(bundle, ctx, r), 10.0)
    runner.start("env", lambda r: _collect_env(bundle, procs, ctx, r), 10.0)
    runner.start("doctor", lambda r: _collect_doctor(bundle, opts, r), 30.0)
    runner.start("host", lambda r: _collect_host(bundle, r), 10.0)
    runner.join()
    bundle.meta["snapshot_seconds"] = round(time.monotonic() - t_start, 3)
    # the verdict is the rules engine's over the finished bundle (``finalize``)
    return Result(bundle.root, None, [], analysis, [r.__dict__ for r in bundle.records])


def finalize(bundle: Bundle, procs: list[Proc], ctx: CollectContext, res: Result | None,
             opts: Options) -> Path:
    """Logs, timeline, summary, manifest, tarball. Always call (in a ``finally``)."""
    t0 = time.monotonic()
    rec = CollectorRecord(name="logs", started=iso(time.time()))
    try:
        tails = {src: lines[-opts.log_tail_lines:] for src, lines in ctx.logs.items()}
        bundle.write_json("logs/tail.json", tails)
        rec.status = "ok" if tails else "skipped"
        if not tails:
            rec.error = "no log lines (attach mode sees no output; see nccl/ and vllm-watchdog/)"
        rec.files = ["logs/"]
    except Exception as exc:
        rec.status, rec.error = "error", str(exc)
    rec.seconds = round(time.monotonic() - t0, 3)
    bundle.record(rec)
    # NCCL, vLLM's watchdog and faulthandler write straight into the bundle: redact in place
    for sub in ("nccl", "vllm-watchdog", "faulthandler"):
        d = bundle.root / sub
        for p in sorted(d.glob("*")) if d.is_dir() else []:
            if p.is_file() and not p.is_symlink():
                bundle.copy_text_file(p, str(p.relative_to(bundle.root)))
    timeline = {
        "mode": ctx.mode,
        "started": iso(ctx.started) if ctx.started else None,
        "phases": ctx.timeline,
        "current_phase": ctx.current_phase,
        "reason": ctx.reason,
        "stall_kind": ctx.stall_kind,
        "deaths": ctx.deaths,
        "exit_code": ctx.exit_code,
    }
    bundle.write_json("timeline.json", timeline)
    if ctx.stall:
        bundle.write_json("stall.json", ctx.stall)
    verdict = make_verdict(ctx, bundle, opts.hooks)
    if res is not None:
        res.verdict = verdict
    analysis = res.analysis if res else {}
    bundle.meta["verdict"] = verdict
    bundle.write_text("summary.md", render_summary(bundle, procs, ctx, verdict, analysis))
    bundle.write_manifest()
    bundle.redactor.save_host_map()
    tb = bundle.make_tarball()
    bundle.closed = True
    return tb


# --- verdict and summary ---------------------------------------------------------------------
def make_verdict(ctx: CollectContext, bundle: Bundle, hooks: BundleHooks) -> list[str]:
    """The bundle's verdict: the reason it was taken, then the caller's judge over the bundle as
    written so far (the CLI composes the diagnose rules engine: one engine for collect and
    diagnose)."""
    v: list[str] = [f"Reason: {ctx.reason}"]
    bundle.write_manifest()  # the collector statuses are evidence too
    if hooks.judge is None:
        v.append(f"not judged here: run `sm120kit diagnose {bundle.root}`")
        return v
    try:
        v += hooks.judge(bundle.root)
    except UserError as exc:
        v.append(f"diagnose could not read the bundle: {exc.message}")
    return v


def _md_escape(s: Any) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def render_summary(bundle: Bundle, procs: list[Proc], ctx: CollectContext, verdict: list[str],
                   analysis: dict[int, dict[str, Any]]) -> str:
    L = ["# sm120kit collect bundle", ""]
    L.append(f"- mode: {ctx.mode}")
    L.append(f"- created: {bundle.meta.get('created')}")
    if ctx.argv:
        L.append(f"- command: `{' '.join(bundle.redactor.argv(ctx.argv))}`")
    if ctx.exit_code is not None:
        L.append(f"- child exit code: {ctx.exit_code}")
    L += ["", "## Verdict", ""] + [f"- {x}" for x in verdict]
    if ctx.notes:
        L += ["", "## Notes", ""] + [f"- {n}" for n in ctx.notes]
    L += _md_timeline(ctx) + _md_processes(procs, analysis)
    L += ["", "## Collectors", "", "| collector | status | seconds | detail |", "|---|---|---|---|"]
    for r in bundle.records:
        L.append(f"| {r.name} | {r.status} | {r.seconds} | "
                 f"{_md_escape((r.error or r.detail or '')[:300])} |")
    tail = []
    for src, lines in ctx.logs.items():
        tail.append(f"### {src}\n\n```\n" + "\n".join(lines[-20:]) + "\n```")
    if tail:
        L += ["", "## Last log lines", ""] + tail
    return "\n".join(L) + "\n"


def _md_timeline(ctx: CollectContext) -> list[str]:
    if not ctx.timeline:
        return []
    L = ["", "## Phase timeline", "", "| phase | at (s) | took (s) | stream |", "|---|---|---|---|"]
    for i, ph in enumerate(ctx.timeline):
        nxt = ctx.timeline[i + 1]["t"] if i + 1 < len(ctx.timeline) else None
        took = f"{nxt - ph['t']:.1f}" if nxt is not None else "…"
        L.append(f"| {ph['phase']} | {ph['t']:.1f} | {took} | {ph.get('stream') or ''} |")
    L.append(f"\nCurrent phase at the snapshot: **{ctx.current_phase}**")
    return L


def _md_processes(procs: list[Proc], analysis: dict[int, dict[str, Any]]) -> list[str]:
    """The process table, then the frames the blocked/spinning processes sit in."""
    L = ["", "## Processes", "", "| pid | label | role | state | where | collective | cpu |",
         "|---|---|---|---|---|---|---|"]
    for p in procs:
        a = analysis.get(p.pid, {})
        cpu = a.get("cpu_fraction")
        L.append(f"| {p.pid} | {_md_escape(p.label)} | {p.role} | {a.get('state', '-')} | "
                 f"{_md_escape(a.get('caller') or a.get('top') or a.get('error') or '-')} | "
                 f"{_md_escape(a.get('collective') or a.get('sync') or '')} | "
                 f"{'' if cpu is None else f'{cpu:.0%}'} |")
    blocked: dict[str, list[str]] = {}
    for _pid, a in analysis.items():
        if a.get("state") in ("blocked", "spinning"):
            blocked.setdefault(str(a.get("top")), []).append(str(a.get("label")))
    if blocked:
        L += ["", "## Blocked frames", ""]
        for frame, labs in sorted(blocked.items(), key=lambda kv: -len(kv[1])):
            L.append(f"- `{frame}`: {', '.join(sorted(labs))}")
    return L


# --- the contract for warmup / attach --------------------------------------------------------
def env_hints(procs: list[Proc], ctx: CollectContext, opts: Options) -> None:
    """Read FR prefixes, NCCL_RAS_ADDR, NCCL_DEBUG_FILE and watchdog dirs from the targets."""
    seen: set[int | None] = set()
    for p in procs:
        wd = watchdog_dir_from_argv(p.cmdline)
        if wd:
            ctx.watchdog_dirs.append(wd)
        env, src = environ(p.pid)
        if not env or src in seen:
            continue
        seen.add(src)
        for var in flight.FR_PREFIX_VARS:
            if env.get(var):
                ctx.fr_prefixes.append(env[var])
        if env.get("NCCL_RAS_ADDR") and not opts.ras_addr:
            opts.ras_addr = env["NCCL_RAS_ADDR"]
        if env.get("NCCL_DEBUG_FILE"):
            ctx.nccl_debug_files.append(env["NCCL_DEBUG_FILE"])


def watchdog_dir_from_argv(argv: list[str]) -> str | None:
    """``dump_dir`` of a ``--watchdog-config`` on a process's command line (any form vLLM
    accepts: JSON, ``--watchdog-config.dump_dir DIR``, underscores)."""
    try:
        wd = parse_serve_args(argv).watchdog_config
    except UserError:
        return None
    d = wd.get("dump_dir") if isinstance(wd, dict) else None
    return str(d) if d else None


def collect_processes(
    pids: list[int],
    out_dir: Path,
    *,
    reason: str,
    deadline_s: float,
    labels: dict[int, str] | None = None,
    redact: bool = True,
    host_map_file: Path | None = None,
    options: Options | None = None,
    context: CollectContext | None = None,
) -> Path:
    """Snapshot ``pids`` now (stacks, NVML, RAS, Flight Recorder, doctor, host) into a bundle in
    ``out_dir``; return the ``.tar.gz`` path (the directory is the same path without
    ``.tar.gz``). Never signals the targets; bounded by ``deadline_s`` (+ packing)."""
    import psutil

    labels = labels or {}
    ctx = context or CollectContext(mode="processes")
    procs: list[Proc] = []
    for pid in pids:
        try:
            d = describe(psutil.Process(pid), label=labels.get(pid))
        except psutil.Error:
            d = None
        if d is None:
            ctx.notes.append(f"pid {pid} ({labels.get(pid, '?')}) was gone before the snapshot")
            continue
        procs.append(d)
    tb, _res = collect_procs(procs, Path(out_dir), reason=reason, deadline_s=deadline_s,
                             redact=redact, host_map_file=host_map_file, options=options,
                             context=ctx)
    return tb


def collect_procs(
    procs: list[Proc],
    out_dir: Path,
    *,
    reason: str,
    deadline_s: float,
    redact: bool = True,
    host_map_file: Path | None = None,
    options: Options | None = None,
    context: CollectContext | None = None,
) -> tuple[Path, Result | None]:
    """:func:`collect_processes` for already described processes; returns (tarball, result)."""
    opts = options or Options()
    opts.deadline_s = deadline_s
    ctx = context or CollectContext(mode="processes")
    ctx.reason = reason
    ctx.stall_kind = ctx.stall_kind or "requested"
    redactor = Redactor(enabled=redact, host_map_file=host_map_file)
    bundle = Bundle.create(Path(out_dir), redactor, meta={"mode": ctx.mode})
    res: Result | None = None
    try:
        env_hints(procs, ctx, opts)
        res = snapshot(bundle, procs, ctx, opts)
    finally:
        tb = finalize(bundle, procs, ctx, res, opts)
    if res is not None:
        res.tarball = tb
    return tb, res


__all__ = ["BundleHooks", "CollectContext", "Options", "Result", "collect_processes", "collect_procs", "finalize",
           "snapshot"]
