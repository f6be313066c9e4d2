"""Supervisor of ``sm120kit warmup run``: start the ranks, watch them, stop them, report.

The supervisor itself never imports torch for a CPU reference run. It starts
``python -m sm120kit.warmup.launcher`` in a new session, which forks the N ranks; every rank
writes progress lines to one pipe the supervisor reads. The watchdog:

* progress = any phase start/end, tick or collective entry of any rank (log lines don't count);
* when no unfinished rank has made progress for ``stall_timeout`` seconds, the run has stalled:
  the report says, per rank, its phase and whether it sits inside a collective (and which) or
  stopped outside one (the suspect);
* a rank error or a rank exiting without a result stops the run at once.

On a stall, with ``bundle_dir`` set and :func:`sm120kit.services.snapshot.collect_processes`
available, the ranks are snapshotted before they are killed. Every exit path (success, failure,
stall, Ctrl-C, an exception here) kills the launcher's process group and checks that no rank pid
survives.

Under ``torchrun`` (``RANK``/``WORLD_SIZE`` set) :func:`run_under_torchrun` runs one rank in
this process; :meth:`sm120kit.services.watchdog.Watchdog.guard` watches its progress channel.
"""

from __future__ import annotations

import importlib.util
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sm120kit.errors import UserError
from sm120kit.services.proctree import KILL_NOW, SupervisedChild
from sm120kit.services.snapshot import BundleHooks, CollectContext, Options, collect_processes
from sm120kit.services.watchdog import Watchdog
from sm120kit.warmup.config import RunConfig
from sm120kit.warmup.fi_backend import check_flashinfer_backend
from sm120kit.warmup.launcher import TORCH_MISSING_EXIT, TORCH_MISSING_TAG
from sm120kit.warmup.rank import RankRun, Reporter, log_prefix

POLL_S = 0.1
STARTUP_TIMEOUT_S = 120.0


@dataclass
class RankState:
    rank: int
    pid: int | None = None
    phase: str | None = None
    collective: str | None = None  # inside this collective (entered, not yet left)
    quiet_s: float = 0.0  # since its last progress message (the watchdog's clock), for display
    started: float = field(default_factory=time.monotonic)
    done: bool = False
    error: str | None = None
    result_path: str | None = None
    phase_times: dict[str, float] = field(default_factory=dict)
    detail: str | None = None
    dead_since: float | None = None

    def describe(self, now: float) -> str:
        if self.done:
            return "finished"
        if self.error:
            return f"failed in {self.phase}: {self.error}"
        if self.pid is None:
            return "not started"
        if self.collective:
            return f"waiting in {self.collective} (phase {self.phase})"
        return f"in phase {self.phase}, outside any collective"


@dataclass
class StallReport:
    stall_timeout: float
    silent_for_s: float
    suspects: list[int]
    ranks: list[dict[str, Any]]
    message: str


@dataclass
class RunResult:
    status: str  # ok | fail | stall | error
    exit_code: int
    message: str
    config: dict[str, Any]
    plan: dict[str, Any]
    passed: bool = False
    threshold: float = 0.0
    errors: dict[str, Any] = field(default_factory=dict)
    ranks: list[dict[str, Any]] = field(default_factory=list)
    shapes: dict[str, Any] = field(default_factory=dict)
    zero_local_kv_ranks: list[int] = field(default_factory=list)
    zero_valid_rows: dict[str, list[int]] = field(default_factory=dict)
    work_per_rank: list[int] = field(default_factory=list)
    asymmetric: bool = False
    timings: dict[str, Any] = field(default_factory=dict)
    stall: StallReport | None = None
    bundle: str | None = None
    bundle_error: str | None = None
    launcher_pid: int | None = None
    log_tail: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Callback = Callable[[list[RankState]], None]
LogCallback = Callable[[int, int | None, str], None]


_TORCH_HINT = "warmup run needs torch: pip install torch (or pip install -e '.[torch]')"


def _require_torch() -> None:
    """Refuse before spawning anything when torch is not installed (one error line, no traceback)."""
    if importlib.util.find_spec("torch") is None:
        raise UserError("warmup run: torch is not installed in this Python", hint=_TORCH_HINT)


def _import_torch() -> Any:
    """``import torch`` without its "Failed to initialize NumPy" warning (printed before our
    ``error:`` line when numpy is absent; warmup on CPU does not need numpy)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*NumPy.*")
        import torch
    return torch


def _check_devices(cfg: RunConfig) -> dict[str, Any]:
    """Refuse early (in the supervisor) what the ranks could not run."""
    if cfg.backend == "flashinfer":
        return asdict(check_flashinfer_backend(cfg.device, cfg.dcp))
    if cfg.device == "cuda":
        try:
            torch = _import_torch()
        except ImportError:
            raise UserError("--device cuda needs torch", hint=_TORCH_HINT) from None
        if not torch.cuda.is_available():
            raise UserError("--device cuda: torch sees no CUDA GPU", hint="use --device cpu")
        if cfg.resolved_dist_backend == "nccl" and torch.cuda.device_count() < cfg.dcp:
            raise UserError(
                f"--device cuda: {cfg.dcp} NCCL ranks need {cfg.dcp} GPUs, "
                f"torch sees {torch.cuda.device_count()}",
                hint="lower --dcp, or --dist-backend gloo (ranks share GPUs, host-staged collectives)",
            )
    return {}


def _alive(pid: int) -> bool:
    try:
        import psutil

        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE
    except Exception:
        return False


class WarmupSupervisor:
    def __init__(
        self,
        cfg: RunConfig,
        *,
        on_update: Callback | None = None,
        on_log: LogCallback | None = None,
        hooks: BundleHooks | None = None,
    ) -> None:
        self.cfg = cfg
        self.hooks = hooks or BundleHooks()  # a stall bundle's doctor report and verdict
        self.on_update = on_update
        self.on_log = on_log
        self.states = [RankState(r) for r in range(cfg.dcp)]
        self.child = SupervisedChild()
        self.watchdog = Watchdog()  # one channel per rank: its last progress message
        self.proc: subprocess.Popen[bytes] | None = None
        self.tmp = Path(tempfile.mkdtemp(prefix="sm120kit-warmup-"))
        self.read_fd: int | None = None
        self.buf = b""
        self.eof = False
        self._last_alive_check = 0.0

    # ------------------------------------------------------------ process control
    def start(self) -> None:
        r, w = os.pipe()
        self.read_fd = r
        os.set_blocking(r, False)
        spec = {
            "config": self.cfg.to_json(),
            "fd": w,
            "parent_pid": os.getpid(),
            "result_dir": str(self.tmp),
            "init_method": f"file://{self.tmp / 'store'}",
        }
        spec_path = self.tmp / "spec.json"
        spec_path.write_text(json.dumps(spec))
        log = open(self.tmp / "ranks.log", "wb")  # noqa: SIM115
        env = dict(os.environ)
        env.setdefault("PYTHONWARNINGS", "ignore::UserWarning")
        try:
            self.proc = self.child.start(
                [sys.executable, "-m", "sm120kit.warmup.launcher", str(spec_path)],
                env=env, stdout=log, stderr=subprocess.STDOUT, pass_fds=(w,), close_fds=True,
            )
        finally:
            os.close(w)
            log.close()

    def rank_pids(self) -> list[int]:
        return [s.pid for s in self.states if s.pid is not None]

    def kill_all(self) -> None:
        """SIGKILL the launcher's process group and every recorded rank (the one process-tree
        stop, :func:`sm120kit.services.proctree.stop_tree`); reap."""
        for s in self.states:
            if s.pid is not None:
                self.child.add(s.pid, f"Warmup_DCP{s.rank}")
        self.child.stop(KILL_NOW, reap_s=10)

    def cleanup(self) -> None:
        self.kill_all()
        if self.read_fd is not None:
            try:
                os.close(self.read_fd)
            except OSError:
                pass
            self.read_fd = None
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------ messages
    def _read(self, timeout: float) -> list[dict[str, Any]]:
        assert self.read_fd is not None
        if self.eof:
            time.sleep(timeout)
            return []
        ready, _, _ = select.select([self.read_fd], [], [], timeout)
        if not ready:
            return []
        while True:
            try:
                chunk = os.read(self.read_fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                self.eof = True
                break
            self.buf += chunk
        lines = self.buf.split(b"\n")
        self.buf = lines.pop()
        msgs = []
        for line in lines:
            try:
                msgs.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return msgs

    def _apply(self, m: dict[str, Any]) -> None:
        st = self.states[int(m["r"])]
        st.pid = int(m["pid"])
        kind = m["k"]
        if kind == "log":
            if self.on_log:
                self.on_log(st.rank, st.pid, str(m.get("text", "")))
            return
        self.watchdog.touch(f"rank{st.rank}")
        if kind == "start":
            st.phase = "init"
        elif kind == "phase":
            st.phase, st.collective, st.detail = m["phase"], None, None
        elif kind == "phase_done":
            st.phase_times[m["phase"]] = float(m["dt"])
            st.collective = None
        elif kind == "tick":
            st.collective, st.detail = None, m.get("detail")
        elif kind == "coll":
            st.collective = m["name"]
        elif kind == "result":
            st.done, st.collective, st.result_path = True, None, m["path"]
        elif kind == "error":
            st.error = str(m.get("error"))
            st.phase = m.get("phase", st.phase)

    # ------------------------------------------------------------ watchdog
    def stall_report(self, now: float) -> StallReport:
        live = [s for s in self.states if not s.done]
        silent = self.watchdog.quiet(now, [f"rank{s.rank}" for s in live])
        suspects = [s.rank for s in live if s.collective is None]
        colls = sorted({s.collective for s in live if s.collective})
        rows = [
            {
                "rank": s.rank,
                "pid": s.pid,
                "phase": s.phase,
                "collective": s.collective,
                "state": s.describe(now),
                "silent_for_s": round(self._quiet(s, now), 2),
            }
            for s in self.states
        ]
        if suspects:
            waiting = [s.rank for s in live if s.collective]
            parts = [
                f"rank {r} (pid {self.states[r].pid}) stopped in phase {self.states[r].phase} "
                "outside any collective"
                for r in suspects
            ]
            if waiting:
                parts.append(f"ranks {waiting} wait in {', '.join(c or '' for c in colls)}")
            msg = "; ".join(parts)
        else:
            suspects = [s.rank for s in live]
            msg = f"every unfinished rank waits in a collective: {', '.join(colls)}"
            if len(colls) > 1:
                msg += " (ranks disagree on the collective: mismatched control flow)"
        return StallReport(
            stall_timeout=self.cfg.stall_timeout,
            silent_for_s=round(silent, 2),
            suspects=suspects,
            ranks=rows,
            message=f"no progress for {silent:.1f}s: {msg}",
        )

    def bundle(self, report: StallReport) -> tuple[str | None, str | None]:
        if not self.cfg.bundle_dir:
            return None, None
        pids = [p for p in self.rank_pids() if _alive(p)]
        labels = {s.pid: f"Warmup_DCP{s.rank}" for s in self.states if s.pid is not None}
        out = Path(self.cfg.bundle_dir)
        out.mkdir(parents=True, exist_ok=True)
        try:
            reason = f"sm120kit warmup stall: {report.message}"
            stall = {"kind": "silence", "message": report.message, "suspects": report.suspects,
                     "silent_for_s": report.silent_for_s, "stall_timeout_s": report.stall_timeout,
                     "ranks": report.ranks}
            path = collect_processes(
                pids,
                out,
                reason=reason,
                deadline_s=self.cfg.bundle_deadline,
                labels=labels,
                options=Options(hooks=self.hooks),
                context=CollectContext(mode="processes", reason=reason, stall_kind="silence",
                                       stall=stall),
            )
        except Exception as exc:  # never lose the stall report over the bundle
            return None, f"{type(exc).__name__}: {exc}"
        return str(path), None

    def log_tail(self, n: int = 4000) -> str:
        try:
            return (self.tmp / "ranks.log").read_text(errors="replace")[-n:]
        except OSError:
            return ""

    # ------------------------------------------------------------ main loop
    def run(self) -> tuple[str, Any]:
        """Returns ``("ok", results)``, ``("error", (rank, msg))`` or ``("stall", report)``."""
        self.start()
        assert self.proc is not None
        while True:
            for m in self._read(POLL_S):
                self._apply(m)
            now = time.monotonic()
            if self.on_update:
                for s in self.states:
                    s.quiet_s = self._quiet(s, now)
                self.on_update(self.states)
            failure = self._reported_failure()
            if failure is not None:
                return "error", failure
            if all(s.done for s in self.states):
                results = [json.loads(Path(s.result_path or "").read_text()) for s in self.states]
                return "ok", results
            if self.eof or self.proc.poll() is not None:
                ended = self._after_launcher_exit()
                if ended is not None:
                    return ended
                continue
            died = self._dead_rank(now)
            if died is not None:
                return "error", (
                    died.rank,
                    f"rank {died.rank} (pid {died.pid}) died in phase {died.phase} "
                    "without an error report",
                )
            live = [s for s in self.states if not s.done]
            if live and all(self._quiet(s, now) > self._limit(s) for s in live):
                return "stall", self.stall_report(now)

    def _after_launcher_exit(self) -> tuple[str, Any] | None:
        """The launcher is gone: drain what is left, then decide. None means look again (every
        rank finished, or a rank's error is reported on the next round)."""
        assert self.proc is not None
        for m in self._read(0.2):
            self._apply(m)
        missing = [s for s in self.states if not s.done]
        if not missing or any(s.error for s in missing):
            return None
        s = missing[0]
        why = "never started" if s.pid is None else f"exited in phase {s.phase}"
        return "error", (
            s.rank,
            f"rank {s.rank} {why} without a result (launcher exit {self.proc.poll()})",
        )

    def _reported_failure(self) -> tuple[int, str] | None:
        """(rank, message) for the first rank that reported an error; a peer that died without
        a word is named instead, as the likelier cause (gloo then errors in the reporter)."""
        failed = [s for s in self.states if s.error]
        if not failed:
            return None
        s = failed[0]
        msg = f"rank {s.rank} failed in phase {s.phase}: {s.error}"
        dead = [
            d for d in self.states
            if d.pid is not None and not d.done and not d.error and not _alive(d.pid)
        ]  # fmt: skip
        if dead:
            d = dead[0]
            return d.rank, (
                f"rank {d.rank} (pid {d.pid}) died in phase {d.phase} without an error "
                f"report; then {msg}"
            )
        return s.rank, msg

    def _dead_rank(self, now: float) -> RankState | None:
        """A started rank whose process is gone for a second without a result or an error
        (killed, segfault): the others would block in the next collective until the stall
        timeout, so stop now."""
        if now - self._last_alive_check < 0.3:
            return None
        self._last_alive_check = now
        for s in self.states:
            if s.pid is None or s.done or s.error:
                continue
            if _alive(s.pid):
                s.dead_since = None
            elif s.dead_since is None:
                s.dead_since = now
            elif now - s.dead_since > 1.0:
                return s
        return None

    def _quiet(self, s: RankState, now: float) -> float:
        return self.watchdog.quiet(now, [f"rank{s.rank}"])

    def _limit(self, s: RankState) -> float:
        """Silence allowed: ``stall_timeout``; before a rank's first message (interpreter and
        torch start-up) at least ``STARTUP_TIMEOUT_S``."""
        if s.pid is None:
            return max(self.cfg.stall_timeout, STARTUP_TIMEOUT_S)
        return self.cfg.stall_timeout


def _summarize(cfg: RunConfig, results: list[dict[str, Any]], wall: float) -> RunResult:
    wp = cfg.warmup_plan()
    threshold = cfg.pass_threshold
    errors: dict[str, Any] = {}
    for name in cfg.merges:
        per = [r["errors"][name] for r in results]
        errors[name] = {
            "max_abs": max(e["max_abs"] for e in per),
            "max_rel": max(e["max_rel"] for e in per),
            "lse_max_abs": max(e["lse_max_abs"] for e in per),
            "empty_rows_match": all(e["empty_rows_match"] for e in per),
        }
    passed = all(e["max_abs"] <= threshold and e["empty_rows_match"] for e in errors.values())
    zero_local = [r["rank"] for r in results if any(x == 0 for x in r["local_kv_tokens"])]
    zero_rows = {
        str(r["rank"]): [t for t, c in enumerate(r["valid_counts"]) if c == 0] for r in results
    }
    zero_rows = {k: v for k, v in zero_rows.items() if v}
    work = [int(sum(r["valid_counts"])) for r in results]
    phases = ("init", "kv-build", "convert", "attend", "merge", "verify")
    ph_max = {p: max(r["timings"].get(p, 0.0) for r in results) for p in phases}
    for name in cfg.merges:
        ph_max[f"merge_{name}"] = max(r["timings"].get(f"merge_{name}", 0.0) for r in results)
    attend = ph_max["attend"] or 1e-9
    timings = {
        "wall_s": round(wall, 3),
        "phase_max_s": ph_max,
        "merge_over_attend": {n: ph_max[f"merge_{n}"] / attend for n in cfg.merges},
    }
    notes = [n for n in wp.notes if cfg.plan == "unpatched" or not n.startswith("unpatched")]
    if cfg.seq_len is not None:
        notes = [f"--seq-len {cfg.seq_len} overrides the planned prompt length"]
    asym = len(set(work)) > 1
    if zero_local:
        notes.append(f"ranks {zero_local} hold no local KV for the decode request")
    idle = [r for r, w in enumerate(work) if w == 0]
    if idle and len(idle) < len(work):
        notes.append(f"rank-asymmetric work: selected local slots per rank {work} (idle: {idle})")
    status = "ok" if passed else "fail"
    if not passed:
        code = 2
        msg = f"merged output differs from single-rank attention by more than {threshold:g}"
    elif zero_local:
        code = 1
        msg = f"correct, but ranks {zero_local} hold no local KV ({cfg.plan} plan)"
    else:
        code = 0
        msg = "merged DCP output matches single-rank attention"
    return RunResult(
        status=status,
        exit_code=code,
        message=msg,
        config=cfg.to_dict(),
        plan=wp.to_dict(),
        passed=passed,
        threshold=threshold,
        errors=errors,
        ranks=[{k: v for k, v in r.items() if k != "shapes"} for r in results],
        shapes=results[0]["shapes"],
        zero_local_kv_ranks=zero_local,
        zero_valid_rows=zero_rows,
        work_per_rank=work,
        asymmetric=asym,
        timings=timings,
        notes=notes,
    )


def run_warmup(
    cfg: RunConfig,
    *,
    on_update: Callback | None = None,
    on_log: LogCallback | None = None,
    hooks: BundleHooks | None = None,
) -> RunResult:
    """Run the multi-rank warmup and return the result (never leaves a process behind)."""
    cfg.validate()
    _require_torch()
    _check_devices(cfg)
    sup = WarmupSupervisor(cfg, on_update=on_update, on_log=on_log, hooks=hooks)
    t0 = time.monotonic()
    try:
        kind, payload = sup.run()
        wall = time.monotonic() - t0
        launcher = sup.proc.pid if sup.proc is not None else None
        if kind == "error" and sup.proc is not None and sup.proc.poll() == TORCH_MISSING_EXIT:
            why = next((ln.split(TORCH_MISSING_TAG, 1)[1].strip() for ln in sup.log_tail().splitlines()
                        if TORCH_MISSING_TAG in ln), "")
            raise UserError(f"warmup run: torch cannot be imported ({why or 'see above'})",
                            hint=_TORCH_HINT)
        if kind == "ok":
            done = _summarize(cfg, payload, wall)
            done.launcher_pid = launcher
            return done
        base = RunResult(
            status=kind,
            exit_code=2,
            message="",
            config=cfg.to_dict(),
            plan=cfg.warmup_plan().to_dict(),
            threshold=cfg.pass_threshold,
            timings={"wall_s": round(wall, 3)},
            launcher_pid=launcher,
        )
        if kind == "stall":
            base.stall = payload
            base.message = payload.message
            base.bundle, base.bundle_error = sup.bundle(payload)
        else:
            base.message = payload[1]
        base.log_tail = sup.log_tail()
        return base
    finally:
        sup.cleanup()


def run_under_torchrun(cfg: RunConfig, *, on_log: LogCallback | None = None) -> RunResult | None:
    """One rank per process under torchrun (``env://``); rank 0 returns the summary, others None.

    The watchdog's guard ends this process with exit code 2 when the rank makes no progress for
    ``stall_timeout`` seconds, after printing its phase and collective.
    """
    import torch.distributed as dist

    cfg.validate()
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    if world_size != cfg.dcp:
        raise UserError(
            f"torchrun WORLD_SIZE {world_size} != --dcp {cfg.dcp}", hint="start --nproc-per-node=DCP"
        )
    if cfg.device == "cuda" and "LOCAL_RANK" in os.environ:
        import torch

        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    rep = Reporter(rank, None)
    run = RankRun(cfg, rank, rep)

    def on_stall(quiet: float) -> None:
        where = f"waiting in {rep.collective}" if rep.collective else "outside any collective"
        # one write (print() writes the text and its newline apart): two ranks share stderr
        # under torchrun, and their lines must not run into each other
        sys.stderr.write(f"{log_prefix(rank)} stall: no progress for {quiet:.1f}s (limit "
                         f"{cfg.stall_timeout:g}s) in phase {run.phase}, {where}\n")
        sys.stderr.flush()
        os._exit(2)

    rep.watchdog.guard([rep.channel], cfg.stall_timeout, on_stall, poll_s=POLL_S,
                       name="warmup-watchdog")
    t0 = time.monotonic()
    res = run.run("env://")
    gathered = _gather_json(res, cfg.dcp, run.device)
    dist.destroy_process_group()
    if rank != 0:
        return None
    return _summarize(cfg, gathered, time.monotonic() - t0)


def _gather_json(obj: Any, dcp: int, device: Any) -> list[Any]:
    """``all_gather_object`` without numpy: JSON bytes in a padded uint8 tensor."""
    import torch
    import torch.distributed as dist

    data = torch.tensor(list(json.dumps(obj).encode()), dtype=torch.uint8, device=device)
    size = torch.tensor([data.numel()], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(size) for _ in range(dcp)]
    dist.all_gather(sizes, size)
    width = int(max(int(x) for x in sizes))
    padded = torch.zeros(width, dtype=torch.uint8, device=device)
    padded[: data.numel()] = data
    bufs = [torch.zeros_like(padded) for _ in range(dcp)]
    dist.all_gather(bufs, padded)
    return [
        json.loads(bytes(b[: int(n)].cpu().tolist()).decode())
        for b, n in zip(bufs, sizes, strict=True)
    ]
