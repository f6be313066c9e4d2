"""The progress series the report page draws (``ProgressSampler.series``): one point a sample
over the whole run, the output flag the supervisor passes, thinned (never dropped at the start)
once it passes ``SERIES_MAX`` points. The sampler samples this real process tree."""

from __future__ import annotations

import os

import pytest

from sm120kit.services import progress
from sm120kit.services.progress import ProgressSampler


def test_series_keeps_the_whole_run_thinned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "SERIES_MAX", 40)
    now = [1000.0]
    s = ProgressSampler(root_pid=os.getpid(), clock=lambda: now[0])
    for i in range(200):
        now[0] += 1.0
        s.sample(output=i % 10 == 0)
    pts = s.series
    assert len(pts) <= 41
    assert pts[0]["t"] == 1.0 and pts[-1]["t"] >= 190.0  # the start kept, the end recent
    ts = [p["t"] for p in pts]
    assert ts == sorted(ts)
    assert {"output", "cpu_s", "compile_cpu_s", "io_read_bytes", "gpu_used_bytes",
            "compilers"} <= set(pts[0])
    assert any(p["output"] for p in pts)
    assert all(h["t"] > 0 for h in s.history)
    assert any("output" in h["moved"] for h in s.history)
    assert s.report()["series"] == pts
