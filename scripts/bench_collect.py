"""Benchmark ``sm120kit collect`` on a real 8-rank gloo job (tests/collect/gloo_job.py).

1. **Stall → bundle.** The job stalls (rank 1 never enters an all_reduce); collect detects the
   silence and writes the bundle. Reported: seconds from detection to the finished tarball
   (target <= 10 s), as a ratio against an anchor measured in the same run: one sequential
   plain ``py-spy dump`` of every rank (the least any stack collection can cost).
2. **Overhead on a healthy run.** The same job in healthy mode (N all_reduces, then exit 0), run
   bare and under ``collect`` alternately; ratio of median wall times (target <= 1.02), and
   collect's own CPU time relative to the job's (robust against a busy machine).

3. **Progress sampling.** The healthy job under collect with the per-second sampling of the
   tree (processes, compiler CPU, IO, JIT caches, GPU memory) and with ``--no-progress``,
   alternating, plus bare: ratio of median wall times sampling/bare (target <= 1.02) and the
   sampler's CPU (``progress.sampling_s``; collect's own CPU with vs without sampling) relative
   to the job's CPU.

4. **A hang inside a long phase** (issue 23 item 1). ``tests/collect/fake_vllm_serve.py
   load-spin`` prints vLLM's "Starting to load model" line, then spins in one frame; the anchor
   is the same spin outside any long phase (``spin``). Reported: detection latency of each
   (from the child's mark to collect's decision) and the ratio long-phase/outside (target
   <= 1.5: the weight-load patience must not apply when nothing moves).

    python scripts/bench_collect.py [--world 8] [--repeats 3] [--steps 300] [--sampling-only]
                                    [--long-phase-only]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "tests" / "collect" / "gloo_job.py"


def _collect(args: list[str], timeout: float = 300) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "sm120kit", "collect", *args], capture_output=True,
                       text=True, timeout=timeout)
    return time.monotonic() - t0, r


def stall(world: int, out: Path) -> dict[str, float]:
    wall, r = _collect(["-o", str(out), "--stall-timeout", "5", "--deadline", "30", "--json",
                        "--", sys.executable, str(JOB), "--world", str(world), "--mode", "stall"])
    if r.returncode != 1:
        raise SystemExit(f"stall run failed (rc {r.returncode}):\n{r.stderr[-3000:]}")
    res = json.loads(r.stdout)
    return {"detect_to_bundle_s": float(res["detect_to_bundle_s"]), "wall_s": wall}


def anchor_pyspy(world: int) -> float:
    """Sequential plain py-spy dumps of every rank of a fresh stalled job."""
    import psutil

    from sm120kit.evidence.stacks import py_spy_path

    exe = py_spy_path()
    if exe is None:
        raise SystemExit("py-spy is not installed")
    p = subprocess.Popen([sys.executable, str(JOB), "--world", str(world), "--mode", "stall"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        seen = 0
        assert p.stdout is not None
        for line in p.stdout:
            if "entering all_reduce" in line or "skipping the next" in line:
                seen += 1
                if seen == world:
                    break
        ranks = [c.pid for c in psutil.Process(p.pid).children(recursive=True)
                 if " ".join(c.cmdline()).startswith("VLLM::Worker_TP")]
        time.sleep(0.5)
        t0 = time.monotonic()
        for pid in ranks:
            subprocess.run([exe, "dump", "--pid", str(pid)], capture_output=True, timeout=30)
        return time.monotonic() - t0
    finally:
        import os
        import signal

        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def healthy(world: int, steps: int, repeats: int, out: Path) -> dict[str, Any]:
    """Alternating bare / under-collect runs. Wall times on a shared machine are noisy, so the
    CPU time is reported too: the job's (bare runs) and collect's own (``self_cpu_s``)."""
    job = [sys.executable, str(JOB), "--world", str(world), "--mode", "healthy", "--steps",
           str(steps), "--step-sleep", "0.01"]
    bare: list[float] = []
    under: list[float] = []
    job_cpu: list[float] = []
    self_cpu: list[float] = []
    for _ in range(repeats):
        c0 = _children_cpu()
        t0 = time.monotonic()
        r = subprocess.run(job, capture_output=True, text=True, timeout=300)
        bare.append(time.monotonic() - t0)
        job_cpu.append(_children_cpu() - c0)
        if r.returncode != 0:
            raise SystemExit(f"bare healthy run failed:\n{r.stderr[-2000:]}")
        wall, rc = _collect(["-o", str(out), "--json", "--"] + job)
        if rc.returncode != 0:
            raise SystemExit(f"collect healthy run failed:\n{rc.stderr[-2000:]}")
        under.append(wall)
        self_cpu.append(float(json.loads(rc.stdout)["self_cpu_s"]))
    return {"bare_median_s": statistics.median(bare), "collect_median_s": statistics.median(under),
            "bare_all": bare, "collect_all": under, "job_cpu_median_s": statistics.median(job_cpu),
            "collect_self_cpu_median_s": statistics.median(self_cpu)}


def sampling(world: int, steps: int, repeats: int, out: Path) -> dict[str, Any]:
    job = [sys.executable, str(JOB), "--world", str(world), "--mode", "healthy", "--steps",
           str(steps), "--step-sleep", "0.01"]
    bare: list[float] = []
    on: list[float] = []
    off: list[float] = []
    job_cpu: list[float] = []
    cpu_on: list[float] = []
    cpu_off: list[float] = []
    sampler_s: list[float] = []
    for _ in range(repeats):
        c0 = _children_cpu()
        t0 = time.monotonic()
        subprocess.run(job, capture_output=True, text=True, timeout=300, check=True)
        bare.append(time.monotonic() - t0)
        job_cpu.append(_children_cpu() - c0)
        for flag, walls, cpus in ((None, on, cpu_on), ("--no-progress", off, cpu_off)):
            args = ["-o", str(out), "--json"] + ([flag] if flag else []) + ["--"] + job
            wall, rc = _collect(args)
            if rc.returncode != 0:
                raise SystemExit(f"collect run failed:\n{rc.stderr[-2000:]}")
            res = json.loads(rc.stdout)
            walls.append(wall)
            cpus.append(float(res["self_cpu_s"]))
            if flag is None:
                sampler_s.append(float((res.get("progress") or {}).get("sampling_s") or 0.0))
    return {"bare": statistics.median(bare), "on": statistics.median(on),
            "off": statistics.median(off), "job_cpu": statistics.median(job_cpu),
            "cpu_on": statistics.median(cpu_on), "cpu_off": statistics.median(cpu_off),
            "sampler_s": statistics.median(sampler_s), "all": {"bare": bare, "on": on,
                                                                "off": off}}


def report_sampling(sm: dict[str, Any]) -> None:
    ratio = sm["on"] / sm["bare"]
    print(f"sampling: bare median {sm['bare']:.2f} s, collect+sampling {sm['on']:.2f} s, "
          f"collect --no-progress {sm['off']:.2f} s -> ratio sampling/bare {ratio:.3f} "
          f"(target <= 1.02: {'ok' if ratio <= 1.02 else 'MISSED'}), sampling/no-progress "
          f"{sm['on'] / sm['off']:.3f}")
    print(f"  CPU: job {sm['job_cpu']:.2f} s; sampler itself {sm['sampler_s']:.3f} s "
          f"(+{sm['sampler_s'] / sm['job_cpu']:.2%} of the job's CPU); collect's own CPU "
          f"{sm['cpu_on']:.2f} s with sampling vs {sm['cpu_off']:.2f} s without")
    print(f"  runs {json.dumps({k: [round(x, 2) for x in v] for k, v in sm['all'].items()})}")


FAKE = ROOT / "tests" / "collect" / "fake_vllm_serve.py"


def _spin_latency(mode: str, out: Path, stall_s: float) -> float:
    mark = out / f"{mode}.mark"
    _, r = _collect(["-o", str(out / mode), "--stall-timeout", str(stall_s), "--deadline", "15",
                     "--no-doctor", "--json", "--", sys.executable, str(FAKE), mode, "--mark",
                     str(mark)], timeout=120 + 10 * stall_s)
    res = json.loads(r.stdout)
    if res.get("outcome") != "stalled":
        raise SystemExit(f"{mode}: expected a stall, got {res.get('outcome')}: {res.get('reason')}")
    return float(res["detected_at"]) - float(mark.read_text())


def long_phase(out: Path, repeats: int, stall_s: float = 5.0) -> None:
    inside, outside = [], []
    for _ in range(repeats):
        outside.append(_spin_latency("spin", out, stall_s))
        inside.append(_spin_latency("load-spin", out, stall_s))
    a, b = statistics.median(outside), statistics.median(inside)
    print(f"long phase: stall-timeout {stall_s:g} s; spin outside any phase detected after "
          f"{a:.2f} s (anchor), inside weight-load after {b:.2f} s -> ratio {b / a:.2f} "
          f"(target <= 1.5: {'ok' if b / a <= 1.5 else 'MISSED'}; budget stall-timeout + 5 s: "
          f"{'ok' if b <= stall_s + 5 else 'MISSED'})")
    print(f"  runs outside {[round(x, 2) for x in outside]}, inside {[round(x, 2) for x in inside]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--sampling-only", action="store_true",
                    help="only part 3 (progress sampling overhead)")
    ap.add_argument("--long-phase-only", action="store_true",
                    help="only part 4 (a hang inside a long phase)")
    a = ap.parse_args()
    if a.long_phase_only:
        with tempfile.TemporaryDirectory(prefix="bench-collect-") as tmp:
            long_phase(Path(tmp), a.repeats)
        return 0
    if a.sampling_only:
        with tempfile.TemporaryDirectory(prefix="bench-collect-") as tmp:
            report_sampling(sampling(a.world, a.steps, a.repeats, Path(tmp)))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-collect-") as tmp:
        out = Path(tmp)
        anchor = anchor_pyspy(a.world)
        st = stall(a.world, out / "stall")
        h = healthy(a.world, a.steps, a.repeats, out / "healthy")
        sm = sampling(a.world, a.steps, a.repeats, out / "sampling")
        long_phase(out / "long-phase", a.repeats)
    d2b = st["detect_to_bundle_s"]
    ratio = h["collect_median_s"] / h["bare_median_s"]
    print(f"world={a.world}")
    print(f"anchor: sequential plain py-spy dump of {a.world} ranks: {anchor:.3f} s")
    print(f"stall: detection -> finished bundle {d2b:.2f} s  (x{d2b / anchor:.1f} the anchor; "
          f"target <= 10 s: {'ok' if d2b <= 10 else 'MISSED'})")
    print(f"healthy: bare median {h['bare_median_s']:.2f} s, under collect "
          f"{h['collect_median_s']:.2f} s -> ratio {ratio:.3f} (target <= 1.02: "
          f"{'ok' if ratio <= 1.02 else 'MISSED'})")
    print(f"  bare runs {[round(x, 2) for x in h['bare_all']]}, collect runs "
          f"{[round(x, 2) for x in h['collect_all']]}")
    cpu_ratio = h["collect_self_cpu_median_s"] / h["job_cpu_median_s"]
    print(f"  CPU: job {h['job_cpu_median_s']:.2f} s, collect itself "
          f"{h['collect_self_cpu_median_s']:.2f} s -> +{cpu_ratio:.1%} of the job's CPU")
    report_sampling(sm)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
