"""The one way sm120kit starts and stops a process tree of its own.

:class:`SupervisedChild` starts a command in its own session and keeps the record of every
process of its tree (pid *and* start time), which processes are tracked for deaths, and which
died. :func:`stop_tree` is the only place that signals a tree: SIGINT → SIGTERM → SIGKILL, each
with a timeout, only to recorded processes (checked against their start time) and to the child's
own process group. Used by collect's launch mode, validate's launch mode, warmup's ranks and
launcher, and doctor's deep smoke test. The other direction, a child ending when its supervisor
is gone, is :func:`parent_alive` / :func:`exit_with_parent` (warmup's launcher and ranks).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sm120kit.evidence.procs import Proc, alive, describe, tree

#: the polite escalation (the child can dump its stacks and flush its logs)
POLITE = ((signal.SIGINT, 10.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0))
#: no grace (a rank or a smoke test whose output is already lost)
KILL_NOW = ((signal.SIGKILL, 5.0),)

TRACKED_ROLES = ("worker", "engine-core", "warmup-rank")


def _signal(procs: Iterable[Proc], sig: int) -> None:
    for pr in procs:
        if not alive(pr):
            continue
        try:
            os.kill(pr.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_tree(
    procs: list[Proc],
    *,
    pgid: int | None = None,
    int_timeout: float = 10.0,
    term_timeout: float = 5.0,
    on_step: Any = None,
    steps_plan: Sequence[tuple[int, float]] | None = None,
) -> list[dict[str, Any]]:
    """Stop processes *we started*, one signal after the other (``steps_plan``, default
    SIGINT/``int_timeout`` → SIGTERM/``term_timeout`` → SIGKILL/5 s) until none is left.

    ``pgid`` (the session/process group of our child) is signalled too, so late-born
    grandchildren are covered; every pid is checked against its recorded start time first.
    Returns the steps taken (signal, pids still alive before it).
    """
    plan = steps_plan or ((signal.SIGINT, int_timeout), (signal.SIGTERM, term_timeout),
                          (signal.SIGKILL, 5.0))
    steps: list[dict[str, Any]] = []
    for sig, wait_s in plan:
        left = [p for p in procs if alive(p)]
        if not left:
            break
        name = signal.Signals(sig).name
        steps.append({"signal": name, "pids": [p.pid for p in left]})
        if on_step is not None:
            try:
                on_step(name, left)
            except Exception:
                pass  # reporting must never prevent the stop
        _killpg(pgid, sig)
        _signal(left, sig)
        end = time.monotonic() + wait_s
        while time.monotonic() < end and any(alive(p) for p in left):
            time.sleep(0.05)
    return steps


def _killpg(pgid: int | None, sig: int) -> None:
    if pgid is None:
        return
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_pids(pids: Iterable[int], *, pgid: int | None = None,
              steps_plan: Sequence[tuple[int, float]] = KILL_NOW) -> list[dict[str, Any]]:
    """:func:`stop_tree` for processes known by pid only (recorded now, so a reused pid that
    started later is never hit)."""
    procs = [p for p in (describe_pid(pid) for pid in pids) if p is not None]
    return stop_tree(procs, pgid=pgid, steps_plan=steps_plan)


def describe_pid(pid: int) -> Proc | None:
    try:
        import psutil

        return describe(psutil.Process(pid))
    except Exception:
        return None


def parent_alive(pid: int) -> bool:
    """``pid`` (our supervisor) still exists; signal 0 probes without signalling."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def exit_with_parent(parent_pid: int, *, code: int = 3, interval: float = 0.5) -> threading.Event:
    """End this process with ``code`` (``os._exit``: no cleanup that could block) once
    ``parent_pid`` is gone, checked every ``interval`` seconds from a daemon thread, so no child
    outlives its supervisor. Setting the returned event ends the watch."""
    done = threading.Event()

    def loop() -> None:
        while not done.wait(interval):
            if not parent_alive(parent_pid):
                os._exit(code)

    threading.Thread(target=loop, name="parent-watch", daemon=True).start()
    return done


class SupervisedChild:
    """A command started here in its own session, and the record of its process tree."""

    def __init__(self, on_event: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.known: dict[int, Proc] = {}
        self.tracked: dict[int, Proc] = {}
        self.deaths: list[dict[str, Any]] = []
        self.on_event = on_event or (lambda _m: None)
        self.clock = clock
        self.t0 = clock()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, argv: list[str], *, env: dict[str, str] | None = None,
              **popen: Any) -> subprocess.Popen[bytes]:
        popen.setdefault("stdin", subprocess.DEVNULL)
        popen.setdefault("close_fds", True)
        self.proc = subprocess.Popen(argv, env=env, start_new_session=True, **popen)
        root = describe_pid(self.proc.pid)
        if root is not None:
            self.known[root.pid] = root
        return self.proc

    def poll(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    # --- the record --------------------------------------------------------------------------
    def scan(self) -> None:
        """Record new processes of the tree, refresh titles, pick the processes to track."""
        assert self.proc is not None
        for p in tree(self.proc.pid):
            old = self.known.get(p.pid)
            if old is None or abs(old.create_time - p.create_time) > 0.05:
                self.known[p.pid] = p
            elif p.cmdline and p.status != "zombie":
                # titles change after start (setproctitle); an exiting process has no cmdline
                old.label, old.role, old.rank, old.cmdline = p.label, p.role, p.rank, p.cmdline
        labelled = [p for p in self.known.values() if p.role in TRACKED_ROLES]
        now = time.time()
        cand = labelled or [p for p in self.known.values()
                            if p.ppid == self.proc.pid and p.is_python
                            and now - p.create_time > 2.0]
        for p in cand:
            self.tracked.setdefault(p.pid, p)

    def add(self, pid: int, label: str | None = None) -> None:
        """Record (and track) a process the caller learnt about itself (warmup's rank pids)."""
        if pid in self.known:
            return
        p = describe_pid(pid)
        if p is not None:
            if label:
                p.label = label
            self.known[pid] = p
            self.tracked[pid] = p

    def check_deaths(self) -> list[dict[str, Any]]:
        """Tracked processes gone since the last look (also appended to ``deaths``)."""
        gone = []
        for pid, p in list(self.tracked.items()):
            if not alive(p):
                d = {"pid": pid, "label": p.label, "role": p.role,
                     "t": self.clock() - self.t0}
                gone.append(d)
                self.deaths.append(d)
                del self.tracked[pid]
                self.on_event(f"process {p.label} (pid {pid}) is gone")
        return gone

    def live(self) -> list[Proc]:
        return [p for p in self.known.values() if alive(p)]

    def any_alive(self) -> bool:
        return self.poll() is None or any(alive(p) for p in self.known.values())

    # --- stop --------------------------------------------------------------------------------
    def stop(self, steps_plan: Sequence[tuple[int, float]] = POLITE,
             on_step: Any = None, reap_s: float = 5.0) -> list[dict[str, Any]]:
        """Stop the whole tree (see :func:`stop_tree`) and reap the child."""
        if self.proc is None:
            return []
        try:
            self.scan()
        except Exception:
            pass
        steps = stop_tree(list(self.known.values()), pgid=self.proc.pid,
                          steps_plan=steps_plan, on_step=on_step)
        try:
            self.proc.wait(timeout=reap_s)
        except subprocess.TimeoutExpired:
            pass
        return steps
