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

The parts, one job each: :mod:`~sm120kit.services.launchenv` (diagnostic environment),
:mod:`~sm120kit.services.proctree` (start, record and stop the tree),
:mod:`~sm120kit.services.capture` (output), :mod:`~sm120kit.services.watchdog` (channel clocks),
:mod:`~sm120kit.services.stalljudge` (the stall decision), :mod:`~sm120kit.services.stallbundle`
(the bundle). This module composes them.
"""

from __future__ import annotations

import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sm120kit.evidence.kv import capacity_from_launch
from sm120kit.evidence.redact import Redactor
from sm120kit.evidence.stacks import faulthandler_site_dir
from sm120kit.models.timeouts import DEFAULT_STALL_TIMEOUT_S
from sm120kit.services.bundles import Bundle
from sm120kit.services.capture import LogCapture
from sm120kit.services.launchenv import prepare_launch
from sm120kit.services.linewatch import LineWatch
from sm120kit.services.proctree import POLITE, SupervisedChild
from sm120kit.services.progress import (
    LONG_PHASES,
    ProgressSampler,
    cache_dirs,
    nvml_used_reader,
)
from sm120kit.services.snapshot import BundleHooks, CollectContext, Options, Result
from sm120kit.services.stallbundle import RemoteHook, launch_context, write_stall_bundle
from sm120kit.services.stalljudge import StallJudge, Stop
from sm120kit.services.watchdog import Watchdog


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
    remote: RemoteHook | None = None


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


# --- the supervisor --------------------------------------------------------------------------
class LaunchSupervisor:
    """One launch: start it (:class:`SupervisedChild`), capture its output (:class:`LogCapture`),
    watch its channels (:class:`Watchdog`, :class:`StallJudge`), bundle and stop it."""

    def __init__(self, argv: list[str], opts: LaunchOptions, *,
                 on_event: Callable[[str], None] | None = None) -> None:
        if not argv:
            raise ValueError("empty command")
        self.argv_user = list(argv)
        self.opts = opts
        self.on_event = _never_raises(on_event or _print_event)
        self.redactor = Redactor(enabled=opts.redact, host_map_file=opts.host_map_file)
        self.t0 = time.time()
        self.bundle = Bundle.create(Path(opts.out_dir), self.redactor, t=self.t0,
                                    meta={"mode": "launch"})
        self._tmp = Path(tempfile.mkdtemp(prefix="sm120kit-collect-"))
        site = faulthandler_site_dir(self._tmp) if opts.faulthandler and opts.diag_env else None
        le = prepare_launch(self.bundle.root, self.argv_user, diag_env=opts.diag_env,
                            stall_timeout=opts.stall_timeout, site_dir=site)
        self.env, self.added, self.argv, self.watchdog_note = (le.env, le.added, le.argv,
                                                               le.watchdog_note)
        self.bundle.meta.update(le.serve_meta)
        self.redactor.learn_env(self.env)
        self.redactor.learn_argv(self.argv)
        self.lines = LineWatch()
        # set by a caller that drives the ready server itself (validate) once its work is done:
        # the loop stops the child tree without a bundle (outcome "stopped")
        self.stop_requested = threading.Event()
        # set by such a caller when the server stopped answering it: a stall, bundled live
        self.caller_stall: str | None = None
        self.child = SupervisedChild(self.on_event)
        self.capture = LogCapture(self.bundle, self.redactor, tail_lines=opts.log_tail_lines,
                                  on_line=self._on_line, on_partial=self._on_partial)
        self.watchdog = Watchdog()
        self.patience = {**LONG_PHASES, **opts.patience}
        self.judge = StallJudge(self.watchdog, stall_timeout=opts.stall_timeout,
                                patience=self.patience, phase=lambda: self.lines.current)
        self.sampler: ProgressSampler | None = None
        self.detect_to_bundle_s: float | None = None

    # --- views kept for callers (validate reads ready, and the tails under the lock) --------
    @property
    def ready(self) -> bool:
        return self.lines.ready

    @property
    def lock(self) -> Any:
        return self.capture.lock

    @property
    def tails(self) -> dict[str, Any]:
        return self.capture.tails

    def now(self) -> float:
        return time.time() - self.t0

    # --- output --------------------------------------------------------------------------
    def _on_partial(self) -> None:
        self.watchdog.touch("output")  # a long progress bar (\r, no \n) is still activity

    def _on_line(self, line: str, src: str, stream: str) -> None:
        t = self.now()
        new_phase, active = self.lines.feed(line, t, src)
        if active:
            self.watchdog.touch("output")
        if new_phase is not None:
            self.on_event(f"phase {new_phase} at +{t:.1f}s")

    # --- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        import subprocess

        proc = self.child.start(self.argv, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        if self.opts.progress:
            self.sampler = ProgressSampler(proc.pid, cache_dirs(self.env), nvml_used_reader())
            self.judge.sampler = self.sampler
        echo = self.opts.echo
        out_sink = ((sys.stderr.buffer if self.opts.stdout_to_stderr else sys.stdout.buffer)
                    if echo else None)
        assert proc.stdout is not None and proc.stderr is not None
        self.capture.start([(proc.stdout, "stdout", out_sink),
                            (proc.stderr, "stderr", sys.stderr.buffer if echo else None)])

    def stop(self) -> list[dict[str, Any]]:
        """Stop our child tree (SIGINT → SIGTERM → SIGKILL) and reap the child. What the tree
        prints from now on answers our own signals: it is not evidence (the capture is muted)."""
        if self.child.proc is None:
            return []
        self.capture.mute()
        plan = ((POLITE[0][0], self.opts.int_timeout), (POLITE[1][0], self.opts.term_timeout),
                POLITE[2])
        return self.child.stop(plan, on_step=lambda sig, left: self.on_event(
            f"stopping {len(left)} process(es) with {sig}"))

    def _context(self, reason: str, kind: str) -> CollectContext:
        tl, cur = self.lines.timeline()
        return launch_context(
            reason, kind, argv=self.argv, env=self.env, added=self.added, timeline=tl,
            current=cur, logs=self.capture.snapshot(), child=self.child,
            bundle_root=self.bundle.root, started=self.t0, note=self.watchdog_note)

    def _options(self) -> Options:
        o = self.opts
        return Options(deadline_s=o.deadline_s, sample_gap_s=o.sample_gap_s,
                       stack_method=o.stacks, ras_addr=self.env.get("NCCL_RAS_ADDR"),
                       log_tail_lines=o.log_tail_lines, doctor=o.doctor, hooks=o.hooks)

    def _bundle(self, reason: str, kind: str, *, live: bool = True) -> tuple[Path, Result | None]:
        w = write_stall_bundle(
            self.bundle, context=lambda: self._context(reason, kind), opts=self._options(),
            live=self.child.live() if live else [], known=list(self.child.known.values()),
            progress=self.judge.report(), close_logs=self.capture.close,
            remote=self.opts.remote, on_event=self.on_event)
        self.detect_to_bundle_s = w.seconds
        return w.path, w.result

    def report_stall(self, reason: str) -> None:
        """A caller driving the ready server saw it stop answering: bundle it live, then stop."""
        self.caller_stall = reason

    # --- main loop -----------------------------------------------------------------------
    def _decide(self, mono: float, grace_until: float | None) -> tuple[Stop | None, float | None]:
        """One look at every stop condition: the caller's (ready, a stall it saw, its work
        done), then the judge's (hang line, death, quiet)."""
        if self.opts.until_ready and self.ready:
            return Stop("ready", "", "the server is ready"), grace_until
        if self.caller_stall is not None:
            return Stop("stalled", "caller", self.caller_stall), grace_until
        if self.stop_requested.is_set():
            return Stop("stopped", "", "stopped by the caller after its work"), grace_until
        return self.judge.decide(mono, grace_until, hit=self.lines.hit(),
                                 deaths=self.child.deaths)

    def _watch(self) -> Stop:
        """Poll the child until a stop condition holds (KeyboardInterrupt passes through)."""
        last_scan = last_tick = 0.0
        grace: float | None = None
        while True:
            rc = self.child.poll()
            if rc is not None:
                self.capture.join()
                return Stop.exited(rc, self.child.deaths)
            mono = time.monotonic()
            if mono - last_scan > 1.0:
                try:
                    self.child.scan()
                    self.child.check_deaths()
                except Exception:
                    pass
                last_scan = mono
            if self.sampler is not None and mono - last_tick >= self.opts.progress_interval_s:
                last_tick = mono
                self.judge.tick(mono, self.opts.status_every_s, self.on_event)
            stop, grace = self._decide(mono, grace)
            if stop is not None:
                return stop
            time.sleep(self.opts.poll_s)

    def _after_stall(self, st: Stop) -> tuple[Path, Result | None]:
        o = self.opts
        live = self.child.poll() is None
        # the reason is said once, in the summary that follows the bundle (with --keep-running
        # that summary comes only when the command ends, so it is said here instead)
        said = f"{st.reason}; " if o.keep_running else f"{st.outcome}: "
        self.on_event(f"{said}collecting evidence (deadline {o.deadline_s:.0f}s)")
        bundle_path, res = self._bundle(st.reason or st.outcome, st.kind or st.outcome, live=live)
        self.on_event(f"bundle written: {bundle_path}")
        if o.keep_running and st.outcome == "stalled" and self.child.poll() is None:
            self.on_event("--keep-running: still supervising; Ctrl-C to stop")
            try:
                while self.child.poll() is None:
                    time.sleep(o.poll_s)
            except KeyboardInterrupt:
                st.outcome = "interrupted"
            self.capture.join()
        return bundle_path, res

    def run(self) -> LaunchResult:
        o = self.opts
        self.start()
        self.on_event(f"started pid {self.child.pid}; a bundle is written under {o.out_dir} only "
                      "if something goes wrong")
        if self.watchdog_note:
            self.on_event(self.watchdog_note)
        st = Stop("exited")
        bundle_path: Path | None = None
        res: Result | None = None
        steps: list[dict[str, Any]] = []
        detected: float | None = None
        frozen: tuple[list[dict[str, Any]], str | None] | None = None
        try:
            try:
                st = self._watch()
            except KeyboardInterrupt:
                st = Stop("interrupted", "interrupt", "interrupted by the user (Ctrl-C)")
            detected = time.time()
            frozen = self.lines.timeline()
            if st.outcome in ("stalled", "crashed", "interrupted") or o.always_bundle:
                bundle_path, res = self._after_stall(st)
        except KeyboardInterrupt:
            st.outcome, st.reason = "interrupted", "interrupted by the user (Ctrl-C)"
        finally:
            if self.child.any_alive():
                steps = self.stop()
            st.child_rc = self.child.poll() if st.child_rc is None else st.child_rc
            self.capture.join(2.0)
            if bundle_path is None:
                bundle_path, res = self._late_bundle(st)
            shutil.rmtree(self._tmp, ignore_errors=True)
        return self._result(st, bundle_path, res, steps, detected, frozen)

    def _late_bundle(self, st: Stop) -> tuple[Path | None, Result | None]:
        """After the tree is gone: no bundle for a clean end, else what is known."""
        if st.outcome in ("exited", "ready", "stopped") and not self.opts.always_bundle:
            self.capture.close()
            shutil.rmtree(self.bundle.root, ignore_errors=True)
            return None, None
        return self._bundle(st.reason or st.outcome, st.kind or st.outcome, live=False)

    def _result(self, st: Stop, bundle_path: Path | None, res: Result | None,
                steps: list[dict[str, Any]], detected: float | None,
                frozen: tuple[list[dict[str, Any]], str | None] | None) -> LaunchResult:
        tl, cur = frozen if frozen is not None else self.lines.timeline()
        kv = (kv_capacity(self.capture.text(), self.argv_user, self.env, self.on_event)
              if st.outcome in ("ready", "exited", "crashed", "stalled") else None)
        return LaunchResult(
            exit_code=st.exit_code(), outcome=st.outcome, reason=st.reason, bundle=bundle_path,
            timeline=tl, current_phase=cur, child_exit_code=st.child_rc,
            seconds=round(self.now(), 3),
            detect_to_bundle_s=self.detect_to_bundle_s if bundle_path is not None else None,
            stop_steps=steps, verdict=res.verdict if res else [],
            added_env=self.redactor.env(self.added), watchdog=self.watchdog_note,
            self_cpu_s=_self_cpu(), progress=self.judge.report(), kv_capacity=kv,
            quiet_s=st.quiet_s,
            detected_at=detected if st.outcome in ("stalled", "crashed") else None,
        )


def kv_capacity(text: str, argv: list[str], env: dict[str, str],
                on_event: Callable[[str], None]) -> dict[str, Any] | None:
    """KV numbers the launch printed, with the effective DCP where the model config is local."""
    cap = capacity_from_launch(text.splitlines(), argv, env)
    if cap is not None:
        on_event(f"KV cache: {cap.tokens if cap.tokens is not None else '?'} tokens, "
                 f"{cap.available_gib} GiB; DCP engaged: {cap.engaged}"
                 + (f" ({cap.note})" if cap.note else ""))
    return cap.to_dict() if cap is not None else None


def _self_cpu() -> float | None:
    try:
        import resource

        ru = resource.getrusage(resource.RUSAGE_SELF)
        return round(ru.ru_utime + ru.ru_stime, 3)
    except (ImportError, OSError):
        return None


def _never_raises(cb: Callable[[str], None]) -> Callable[[str], None]:
    """``cb`` that swallows a closed terminal/pipe: reporting must never stop us from stopping
    our own child tree."""

    def event(msg: str) -> None:
        try:
            cb(msg)
        except (OSError, ValueError):
            pass

    return event


def _print_event(msg: str) -> None:
    print(f"sm120kit collect: {msg}", file=sys.stderr, flush=True)


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
