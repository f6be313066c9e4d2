"""The stall decision of a supervised launch: how much quiet is allowed now, and what a quiet
launch is (a spin, a silence).

Quiet is the time since *any* channel of the :class:`~sm120kit.services.watchdog.Watchdog` moved
(output lines, process births/exits, compiler CPU, bytes read, JIT cache growth, GPU memory, and
py-spy frames only when they change). The allowed quiet is ``--stall-timeout``; inside a
known-long phase (weight load, JIT compile, graph capture, autotune) it grows towards the phase's
patience only while a progress channel is *moving slowly*: three times the longest gap between its
moves since the phase began, capped by the patience. A long phase where nothing moves is stalled after
``--stall-timeout`` like any other (issue 23 item 1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sm120kit.evidence.stacks import py_spy_dump, signature
from sm120kit.services.linewatch import DEATH_SIGNALS
from sm120kit.services.progress import PROGRESS, ProgressSampler
from sm120kit.services.watchdog import Watchdog

SPIN_CORES = 0.2  # CPU use over the quiet window that makes it a spin rather than a block
#: the channels whose slow movement earns a long phase its patience (output does not: a phase
#: printing a line now and then without doing anything else is no progress)
SLOW_CHANNELS = tuple(sorted(PROGRESS - {"output"}))
SLOW_FACTOR = 3.0


@dataclass
class Stop:
    """Why the watch loop ended."""

    outcome: str  # ready | exited | crashed | stalled | interrupted | stopped
    kind: str = ""
    reason: str = ""
    child_rc: int | None = None
    quiet_s: float | None = None

    @classmethod
    def exited(cls, rc: int, deaths: list[dict[str, Any]]) -> Stop:
        """The command exited by itself: code 0 is a clean end, any other an exit (kind
        ``exit``), never a stall."""
        if rc == 0:
            return cls("exited", "", "the command exited with code 0", rc)
        reason = f"the command exited with code {rc}"
        if deaths:
            d = deaths[0]
            reason += f"; first gone: {d['label']} (pid {d['pid']}) at +{d['t']:.1f}s"
        return cls("crashed", "exit", reason, rc)

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


class StallJudge:
    def __init__(self, watchdog: Watchdog, *, stall_timeout: float, patience: dict[str, float],
                 phase: Callable[[], str | None]) -> None:
        self.watchdog = watchdog
        self.stall_timeout = stall_timeout
        self.patience = patience
        self.phase = phase
        self.sampler: ProgressSampler | None = None
        self._spy: dict[int, tuple[tuple[str, str], ...]] = {}
        self._spy_t = 0.0
        self.spy_same = False
        self._status_t = 0.0
        self.last_activity: str | None = None
        self._act: str | None = None
        self._act_since = watchdog.started
        self._tick_t = watchdog.started

    # --- how much quiet ----------------------------------------------------------------------
    def activity(self) -> str | None:
        return self.sampler.activity(self.phase()) if self.sampler is not None else None

    def limit(self, mono: float) -> float:
        """``--stall-timeout``, or more inside a known-long phase while a channel moves slowly."""
        act = self.activity()
        if act != self._act:  # the rhythm that earns patience is this phase's own
            self._act, self._act_since = act, mono
        pat = self.patience.get(act or "", 0.0)
        if pat <= self.stall_timeout:
            return self.stall_timeout
        gap = self.watchdog.longest_gap(SLOW_CHANNELS, since=max(mono - pat, self._act_since))
        if gap is None:
            return self.stall_timeout
        return min(pat, max(self.stall_timeout, SLOW_FACTOR * gap))

    def quiet_stop(self, mono: float) -> Stop | None:
        silent = self.watchdog.quiet(mono)
        if silent <= self.limit(mono):
            return None
        kind, reason = self.verdict(silent)
        return Stop("stalled", kind, reason, quiet_s=round(silent, 2))

    def decide(self, mono: float, grace_until: float | None, *, hit: tuple[str, str] | None,
               deaths: list[dict[str, Any]]) -> tuple[Stop | None, float | None]:
        """The launch's own stop conditions, first match wins: a known hang/death line
        (``hit``: name, line), a tracked process gone (after a 2 s grace for its traceback and
        the command's exit), the quiet. Returns the stop and the grace deadline to pass back."""
        if hit is not None:
            return Stop("crashed" if hit[0] in DEATH_SIGNALS else "stalled", "signal",
                        f"known hang message ({hit[0]}): {hit[1]}{self.cold_hint(hit[1])}"
                        ), grace_until
        if deaths:
            if grace_until is None:
                return None, mono + 2.0
            if mono >= grace_until:
                d = deaths[0]
                return Stop("crashed", "death", f"{d['label']} (pid {d['pid']}) died while the "
                            "command kept running"), grace_until
        return self.quiet_stop(mono), grace_until

    # --- the progress channels beyond output -------------------------------------------------
    def tick(self, mono: float, status_every_s: float, on_event: Callable[[str], None]) -> None:
        """One sample of the tree: moved channels reset their clocks (CPU alone does not; when
        only CPU moves, py-spy frames decide); a status line when the activity changes or the
        output stays quiet."""
        assert self.sampler is not None
        printed = self.watchdog.last(["output"]) > self._tick_t
        self._tick_t = mono
        tick = self.sampler.sample(output=printed)
        for ch in tick.moved & PROGRESS:
            self.watchdog.touch(ch, mono)
        if not tick.moved & PROGRESS and "cpu" in tick.moved and tick.busy_python is not None:
            self.frames(tick.busy_python, mono)
        act = self.activity()
        quiet_out = self.watchdog.quiet(mono, ["output"])
        every = status_every_s
        if act != self.last_activity or (quiet_out >= every and mono - self._status_t >= every):
            self.last_activity, self._status_t = act, mono
            if act is not None or quiet_out >= every:
                on_event(self.sampler.status(act, self.patience.get(act or "")))

    def report(self) -> dict[str, Any] | None:
        if self.sampler is None:
            return None
        rep = self.sampler.report()
        rep["patience_s"] = dict(self.patience)
        rep["activity"] = self.last_activity
        return rep

    # --- what the quiet is -------------------------------------------------------------------
    def verdict(self, silent: float) -> tuple[str, str]:
        cur = self.phase()
        if self.sampler is None:
            return "silence", (f"no output and no phase change for {silent:.0f}s "
                               f"(phase {cur or 'unknown'})")
        act = self.activity()
        inside = (f"; inside {act}, whose patience applies only while a progress channel moves"
                  if act in self.patience else "")
        rate = self.sampler.cpu_rate(min(silent, 10.0))
        if rate >= SPIN_CORES:
            same = " with the same Python frames in two py-spy samples" if self.spy_same else ""
            return "spin", (f"spinning: CPU busy ({rate:.1f} cores){same} but no output, no "
                            f"process births/exits, no IO, no cache growth for {silent:.0f}s "
                            f"(phase {cur or 'unknown'}; an NCCL busy-wait looks like this"
                            f"{inside})")
        moved = self.sampler.report()["moved_last"]
        return "silence", (f"no output and no progress on any channel for {silent:.0f}s (phase "
                           f"{cur or 'unknown'}; last moved: {moved or 'nothing'}{inside})")

    def frames(self, pid: int, mono: float) -> None:
        """py-spy the busiest Python process when only CPU moves: new frames are progress,
        the same frames twice are a spin (stays not-progress)."""
        quiet = self.watchdog.quiet(mono)
        if quiet < self.stall_timeout * 0.3 or mono - self._spy_t < max(
                1.0, self.stall_timeout / 5):
            return
        self._spy_t = mono
        smp = py_spy_dump(pid, native=False, timeout=3.0, retry_plain=False)
        if not smp.ok:
            return
        sig = tuple((n, f) for n, f, _ in signature(smp, depth=12))
        prev = self._spy.get(pid)
        self._spy[pid] = sig
        if prev is None:
            return
        if sig == prev:
            self.spy_same = True
            return
        if self.sampler is not None:
            self.sampler.mark("frames")
        self.watchdog.touch("frames", mono)

    def cold_hint(self, line: str) -> str:
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
