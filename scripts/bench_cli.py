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

Timed pairs alternate their order; medians are compared. Nothing is cached across runs by
sm120kit itself. Exit 0 always: a benchmark reports, it does not judge.

    python scripts/bench_cli.py [--runs 9] [--apply-rounds 5] [--anchor-runs 3]
                                [--release 0.34.0] [--skip apply,doctor] [--python PY]

``--python PY``: time the sm120kit *installed* in PY's environment (a regular wheel install, as
users have it: no source checkout on the path, no editable-install finder) instead of this
checkout; PY's ``-c pass`` is then the --help anchor. A wheel carries no ``patches/``: the
series is read from this checkout (``SM120KIT_PATCHES``) unless the package has ``_patches``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PY = sys.executable
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
ENV.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its byte-code
ENV.pop("SM120KIT_DEBUG", None)
CLI = [PY, "-m", "sm120kit"]


def wall(cmd: list[str], cwd: Path | None = None, ok: tuple[int, ...] = (0, 1, 2)) -> float:
    """Seconds one fresh process takes (output discarded; an unexpected exit aborts)."""
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, timeout=600)
    dt = time.perf_counter() - t0
    if p.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-2000:]}")
    return dt


def pair(name_a: str, a: Callable[[], float], name_b: str, b: Callable[[], float],
         runs: int) -> tuple[float, float]:
    """Medians of ``a`` and ``b`` over ``runs`` alternating rounds (one warm-up dropped)."""
    ta: list[float] = []
    tb: list[float] = []
    a()
    b()
    for i in range(runs):
        first, second = (a, b) if i % 2 else (b, a)
        x, y = first(), second()
        (ta, tb)[0 if first is a else 1].append(x)
        (ta, tb)[1 if first is a else 0].append(y)
    ma, mb = statistics.median(ta), statistics.median(tb)
    print(f"  {name_a:<44} median {ma * 1000:8.1f} ms  (min {min(ta) * 1000:.1f})")
    print(f"  {name_b:<44} median {mb * 1000:8.1f} ms  (min {min(tb) * 1000:.1f})")
    return ma, mb


def bench_help(runs: int) -> str:
    print("help:")
    h, p = pair("python -m sm120kit --help", lambda: wall([*CLI, "--help"]),
                "python -c pass", lambda: wall([PY, "-c", "pass"]), runs)
    return f"help / python -c pass      = {h / p:5.2f}x  (target <= 4x)"


def _apply_round(src: Path, mbox: Path, alias: str, base: Path, i: int) -> tuple[float, float]:
    a, b = base / f"am{i}", base / f"cli{i}"
    for d in (a, b):
        subprocess.run(["git", "clone", "-q", "--shared", str(src), str(d)], check=True, env=ENV)
        subprocess.run(["git", "-C", str(d), "checkout", "-q", "--detach", f"v{alias[5:]}"],
                       check=True, env=ENV)
    am = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "am", "-3", "-q",
          str(mbox)]
    if i % 2:
        t_am = wall(am, a, ok=(0,))
        t_cli = wall([*CLI, "apply", "--branch", alias, "--repo", str(b)], b, ok=(0,))
    else:
        t_cli = wall([*CLI, "apply", "--branch", alias, "--repo", str(b)], b, ok=(0,))
        t_am = wall(am, a, ok=(0,))
    for d in (a, b):
        shutil.rmtree(d)
    return t_cli, t_am


def bench_apply(rounds: int, release: str) -> str:
    from sm120kit.patchset.release import release_repo

    alias = f"vllm-{release}"
    print(f"apply ({alias}):")
    src = release_repo(release, progress=lambda m: print(f"  {m}", file=sys.stderr))
    with tempfile.TemporaryDirectory(prefix="sm120kit-bench-cli-") as td:
        base = Path(td)
        wall([*CLI, "export", "--branch", alias, "-o", str(base / "export")], ok=(0,))
        mbox = base / "export" / "series.mbox"
        cli_t, am_t = [], []
        for i in range(rounds + 1):  # round 0 warms the caches and is dropped
            c, a = _apply_round(src, mbox, alias, base, i)
            if i:
                cli_t.append(c)
                am_t.append(a)
    mc, ma = statistics.median(cli_t), statistics.median(am_t)
    print(f"  {'python -m sm120kit apply':<44} median {mc * 1000:8.1f} ms  (min {min(cli_t) * 1000:.1f})")
    print(f"  {'git am -3 series.mbox':<44} median {ma * 1000:8.1f} ms  (min {min(am_t) * 1000:.1f})")
    return f"apply / git am -3          = {mc / ma:5.2f}x  (target <= 1.5x)"


def bench_doctor(runs: int, anchor_runs: int) -> str:
    print("doctor:")
    d = statistics.median(wall([*CLI, "doctor", "--json"]) for _ in range(runs + 1))
    t = statistics.median(wall([PY, "-m", "torch.utils.collect_env"], ok=(0,))
                          for _ in range(anchor_runs))
    print(f"  {'python -m sm120kit doctor --json (tiers 0-1)':<44} median {d * 1000:8.1f} ms")
    print(f"  {'python -m torch.utils.collect_env':<44} median {t * 1000:8.1f} ms")
    return f"collect_env / doctor       = {t / d:5.2f}x  (target >= 15x faster)"


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--apply-rounds", type=int, default=5)
    ap.add_argument("--anchor-runs", type=int, default=3)
    ap.add_argument("--release", default="0.34.0")
    ap.add_argument("--skip", default="", help="comma-separated: help, apply, doctor")
    ap.add_argument("--python", default=None, metavar="PY",
                    help="time the sm120kit installed in this interpreter's environment")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    if a.python:
        _use_installed(a.python)
    else:
        subprocess.run([PY, "-m", "compileall", "-q", str(ROOT / "sm120kit")], env=ENV, check=True)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.2f}, sm120kit from "
          f"{'the environment of ' + a.python if a.python else 'this checkout'}")
    lines = []
    if "help" not in skip:
        lines.append(bench_help(a.runs))
    if "apply" not in skip:
        lines.append(bench_apply(a.apply_rounds, a.release))
    if "doctor" not in skip:
        lines.append(bench_doctor(a.runs, a.anchor_runs))
    print("ratios (this run):")
    for line in lines:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
