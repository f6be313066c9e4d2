#!/usr/bin/env python3
"""The CLI's three speed targets (issue 22 item 4), each a ratio against an anchor measured in
the same run, every process fresh (cold interpreter, warm OS page cache, byte-code compiled
once before timing, as an installed package has it):

* ``python -m sm120kit --help`` vs ``python -c pass``                  target <= 4x
* ``python -m sm120kit apply --branch ALIAS --repo CLONE`` on a clone of the cached release
  repository vs ``git am -3 series.mbox`` (the mbox ``sm120kit export`` writes) on another
  clone of the same repository                                          target <= 1.5x
* ``python -m sm120kit doctor --json`` (tiers 0-1) vs
  ``python -m torch.utils.collect_env``                                 target >= 15x faster

Timed pairs alternate their order; medians are compared. Each command is timed twice over:
wall clock, and CPU time (user + sys of the process and every child it waited for, from
``getrusage(RUSAGE_CHILDREN)``), which a loaded box inflates much less than wall time. Both
ratios and the absolute medians are printed, with the load average before and after. Nothing is
cached across runs by sm120kit itself. Exit 0 always: a benchmark reports, it does not judge.

    python scripts/bench_cli.py [--runs 9] [--apply-rounds 9] [--anchor-runs 3]
                                [--release 0.34.0] [--skip apply,doctor] [--python PY]
                                [--load "CMD"]

``--load CMD``: run the shell command CMD in a loop in the background while timing (e.g. a
parallel test run, ``"python -m pytest -q -p no:cacheprovider tests/patchset -x"``), stopped when
the benchmark ends: the ratios under load.

``--index fresh|refreshed``: ``git am`` first refreshes the index, which on a clone made a moment
ago re-hashes every file written in the same second as the index (racily clean: 50-200 ms, as
the clock falls), while ``sm120kit apply`` looks at the files it changes only. ``fresh`` (the
default) times the clones as made; ``refreshed`` runs ``git update-index --refresh`` on both
clones in a later second first, as a checkout any git command has looked at since.

``--python PY``: time the sm120kit *installed* in PY's environment (a regular wheel install, as
users have it: no source checkout on the path, no editable-install finder) instead of this
checkout; PY's ``-c pass`` is then the --help anchor. A wheel carries no ``patches/``: the
series is read from this checkout (``SM120KIT_PATCHES``) unless the package has ``_patches``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PY = sys.executable
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
ENV.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its byte-code
ENV.pop("SM120KIT_DEBUG", None)
CLI = [PY, "-m", "sm120kit"]


@dataclass(frozen=True)
class Run:
    wall: float  # seconds
    cpu: float  # user + sys seconds of the process and its waited-for children


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd: list[str], cwd: Path | None = None, ok: tuple[int, ...] = (0, 1, 2)) -> Run:
    """Wall and CPU time of one fresh process (output discarded; an unexpected exit aborts)."""
    c0, t0 = _cpu(), time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, timeout=600)
    dt, dc = time.perf_counter() - t0, _cpu() - c0
    if p.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-2000:]}")
    return Run(dt, dc)


@dataclass
class Series:
    """Runs of one command: medians of wall and CPU time."""

    name: str
    runs: list[Run] = field(default_factory=list)

    @property
    def wall(self) -> float:
        return statistics.median(r.wall for r in self.runs)

    @property
    def cpu(self) -> float:
        return statistics.median(r.cpu for r in self.runs)

    def line(self) -> str:
        return (f"  {self.name:<44} wall median {self.wall * 1000:7.1f} ms "
                f"(min {min(r.wall for r in self.runs) * 1000:6.1f})   cpu median "
                f"{self.cpu * 1000:7.1f} ms")


def ratios(label: str, a: Series, b: Series, target: str, inverse: bool = False) -> str:
    """``a/b`` (``b/a`` when ``inverse``) for wall and CPU medians."""
    w, c = (b.wall / a.wall, b.cpu / a.cpu) if inverse else (a.wall / b.wall, a.cpu / b.cpu)
    return f"{label:<27}= {w:5.2f}x wall, {c:5.2f}x cpu  (target {target})"


def pair(name_a: str, a: Callable[[], Run], name_b: str, b: Callable[[], Run],
         runs: int) -> tuple[Series, Series]:
    """``a`` and ``b`` over ``runs`` alternating rounds (one warm-up dropped)."""
    sa, sb = Series(name_a), Series(name_b)
    a()
    b()
    for i in range(runs):
        order = ((a, sa), (b, sb)) if i % 2 else ((b, sb), (a, sa))
        for fn, into in order:
            into.runs.append(fn())
    print(sa.line())
    print(sb.line())
    return sa, sb


def bench_help(runs: int) -> str:
    print("help:")
    h, p = pair("python -m sm120kit --help", lambda: timed([*CLI, "--help"]),
                "python -c pass", lambda: timed([PY, "-c", "pass"]), runs)
    return ratios("help / python -c pass", h, p, "<= 4x")


def _apply_round(src: Path, mbox: Path, alias: str, base: Path, i: int,
                 refreshed: bool = False) -> tuple[Run, Run]:
    a, b = base / f"am{i}", base / f"cli{i}"
    for d in (a, b):
        subprocess.run(["git", "clone", "-q", "--shared", str(src), str(d)], check=True, env=ENV)
        subprocess.run(["git", "-C", str(d), "checkout", "-q", "--detach", f"v{alias[5:]}"],
                       check=True, env=ENV)
    if refreshed:  # in a later second than every file: no entry is racily clean any more
        time.sleep(1.05 - time.time() % 1)
        for d in (a, b):
            subprocess.run(["git", "-C", str(d), "update-index", "-q", "--refresh"], check=True,
                           env=ENV)
    am = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "am", "-3", "-q",
          str(mbox)]
    if i % 2:
        t_am = timed(am, a, ok=(0,))
        t_cli = timed([*CLI, "apply", "--branch", alias, "--repo", str(b)], b, ok=(0,))
    else:
        t_cli = timed([*CLI, "apply", "--branch", alias, "--repo", str(b)], b, ok=(0,))
        t_am = timed(am, a, ok=(0,))
    for d in (a, b):
        shutil.rmtree(d)
    return t_cli, t_am


def bench_apply(rounds: int, release: str, refreshed: bool = False) -> str:
    from sm120kit.patchset.release import release_repo

    alias = f"vllm-{release}"
    print(f"apply ({alias}, {'refreshed' if refreshed else 'fresh'} index):")
    src = release_repo(release, progress=lambda m: print(f"  {m}", file=sys.stderr))
    with tempfile.TemporaryDirectory(prefix="sm120kit-bench-cli-") as td:
        base = Path(td)
        timed([*CLI, "export", "--branch", alias, "-o", str(base / "export")], ok=(0,))
        mbox = base / "export" / "series.mbox"
        cli, am = Series("python -m sm120kit apply"), Series("git am -3 series.mbox")
        for i in range(rounds + 1):  # round 0 warms the caches and is dropped
            c, a = _apply_round(src, mbox, alias, base, i, refreshed)
            if i:
                cli.runs.append(c)
                am.runs.append(a)
    print(cli.line())
    print(am.line())
    return ratios("apply / git am -3", cli, am, "<= 1.5x; <= 1.7x under load")


def bench_doctor(runs: int, anchor_runs: int) -> str:
    print("doctor:")
    d = Series("python -m sm120kit doctor --json (tiers 0-1)",
               [timed([*CLI, "doctor", "--json"]) for _ in range(runs + 1)][1:])
    t = Series("python -m torch.utils.collect_env",
               [timed([PY, "-m", "torch.utils.collect_env"], ok=(0,)) for _ in range(anchor_runs)])
    print(d.line())
    print(t.line())
    return ratios("collect_env / doctor", d, t, ">= 15x faster", inverse=True)


def _use_installed(python: str) -> None:
    """Run PY's installed sm120kit: no checkout on PYTHONPATH, the series from this checkout."""
    global PY, CLI
    PY = python
    CLI = [PY, "-m", "sm120kit"]
    ENV.pop("PYTHONPATH", None)
    where = subprocess.run([PY, "-c", "import sm120kit, os; print(os.path.dirname(sm120kit.__file__))"],
                           env=ENV, capture_output=True, text=True, check=True, cwd="/").stdout.strip()
    if not os.path.isdir(os.path.join(where, "_patches")):
        ENV.setdefault("SM120KIT_PATCHES", str(ROOT / "patches"))
    print(f"installed sm120kit: {where}")


@contextmanager
def background_load(cmd: str | None) -> Iterator[None]:
    """Run ``cmd`` (a shell command) over and over in its own process group until the block ends."""
    if not cmd:
        yield
        return
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # e.g. the tests of this checkout
    loop = subprocess.Popen(["bash", "-c", f"while true; do {cmd}; done"], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        time.sleep(2)  # let it get going
        yield
    finally:
        os.killpg(loop.pid, signal.SIGTERM)
        try:
            loop.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(loop.pid, signal.SIGKILL)
            loop.wait()


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--apply-rounds", type=int, default=9)
    ap.add_argument("--anchor-runs", type=int, default=3)
    ap.add_argument("--release", default="0.34.0")
    ap.add_argument("--skip", default="", help="comma-separated: help, apply, doctor")
    ap.add_argument("--python", default=None, metavar="PY",
                    help="time the sm120kit installed in this interpreter's environment")
    ap.add_argument("--index", choices=("fresh", "refreshed"), default="fresh",
                    help="time on clones as made, or after git update-index --refresh")
    ap.add_argument("--load", default=None, metavar="CMD",
                    help="shell command run in a loop in the background while timing")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    if a.python:
        _use_installed(a.python)
    else:
        subprocess.run([PY, "-m", "compileall", "-q", str(ROOT / "sm120kit")], env=ENV, check=True)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load (1/5/15 min) "
          f"{_load()}, sm120kit from "
          f"{'the environment of ' + a.python if a.python else 'this checkout'}"
          + (f", background load: {a.load}" if a.load else ""))
    lines = []
    with background_load(a.load):
        if "help" not in skip:
            lines.append(bench_help(a.runs))
        if "apply" not in skip:
            lines.append(bench_apply(a.apply_rounds, a.release, a.index == "refreshed"))
        if "doctor" not in skip:
            lines.append(bench_doctor(a.runs, a.anchor_runs))
        print(f"load at the end (1/5/15 min): {_load()}")
    print("ratios (this run, medians):")
    for line in lines:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
