"""The one watchdog (:mod:`sm120kit.services.watchdog`): channel clocks and the guard thread that
a torchrun rank uses instead of a loop of its own (issue 22 items 1 and 5)."""

from __future__ import annotations

import threading
import time

from sm120kit.services.watchdog import Watchdog
from sm120kit.warmup.rank import Reporter


def test_guard_fires_once_after_the_channel_is_quiet() -> None:
    wd = Watchdog()
    calls: list[float] = []
    fired = threading.Event()
    t0 = time.monotonic()
    wd.guard(["rank0"], 0.3, lambda q: (calls.append(q), fired.set()), poll_s=0.02)
    assert fired.wait(5.0)
    elapsed = time.monotonic() - t0
    time.sleep(0.2)  # the guard ended: no second call
    assert len(calls) == 1 and calls[0] > 0.3
    assert 0.3 <= elapsed < 2.0


def test_guard_stays_quiet_while_the_channel_moves_and_ends_on_request() -> None:
    wd = Watchdog()
    calls: list[float] = []
    done = wd.guard(["rank0"], 0.3, calls.append, poll_s=0.02)
    end = time.monotonic() + 1.0
    while time.monotonic() < end:  # moves every 50 ms for a second: three limits long
        wd.touch("rank0")
        wd.touch("other")
        time.sleep(0.05)
    done.set()
    time.sleep(0.5)  # quiet past the limit, but the watch was ended
    assert calls == []


def test_guard_watches_only_its_channels() -> None:
    wd = Watchdog()
    fired = threading.Event()
    wd.guard(["rank1"], 0.2, lambda q: fired.set(), poll_s=0.02)
    end = time.monotonic() + 0.6
    while time.monotonic() < end and not fired.is_set():
        wd.touch("rank0")  # another rank's progress is not rank 1's
        time.sleep(0.02)
    assert fired.is_set()


def test_reporter_moves_its_rank_channel_but_not_for_log_lines() -> None:
    wd = Watchdog()
    rep = Reporter(3, None, wd)
    assert rep.channel == "rank3"
    rep.send("log", text="x")
    assert wd.moves(["rank3"], 0.0) == []
    rep.send("coll", phase="merge", name="all_gather")
    rep.send("tick", phase="merge")
    assert len(wd.moves(["rank3"], 0.0)) == 2 and rep.collective is None
