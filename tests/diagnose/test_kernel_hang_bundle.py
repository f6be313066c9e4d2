"""A kernel hang in a bundle is named (issue 29 item 5): a real process blocks in a native
``cudaDeviceSynchronize`` under a real ``sm120kit collect``; py-spy --native reads its stack.

The GPU is the only fake: there is none here, so the test compiles a tiny library whose
``cudaDeviceSynchronize`` blocks forever (as the real one does behind a kernel that never
returns), and after collect wrote the bundle it replaces the bundle's ``nvml.json`` (NVML was
unavailable) with one busy GPU that lists the process, as NVML shows a spinning kernel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from sm120kit.diagnose.engine import diagnose

HERE = Path(__file__).resolve().parents[1]
JOB = HERE / "collect" / "cuda_sync_job.py"
_C = "#include <unistd.h>\nint cudaDeviceSynchronize(void) { for (;;) pause(); return 0; }\n"


def _busy_gpu(bundle: Path, pid: int, util: int) -> None:
    gpu = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "utilization_gpu": util,
           "power_draw_w": 310.0, "power_limit_w": 700.0,
           "compute_processes": [{"pid": pid, "used_memory": 1 << 30}]}
    (bundle / "nvml.json").write_text(json.dumps({"samples": [
        {"available": True, "driver_version": "570.124.06", "gpus": [gpu]}] * 2}))


@pytest.fixture(scope="module")
def hang_bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    from tests.collect.helpers import only_bundle, run_collect

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in CUDA runtime library")
    tmp = tmp_path_factory.mktemp("kernel-hang")
    (tmp / "fakecuda.c").write_text(_C)
    lib = tmp / "libfakecudart.so"
    subprocess.run([cc, "-shared", "-fPIC", "-g", "-O0", "-o", str(lib), str(tmp / "fakecuda.c")],
                   check=True, timeout=60)
    out = tmp / "out"
    r = run_collect(["-o", str(out), "--stall-timeout", "6", "--deadline", "30", "--json", "--",
                     sys.executable, str(JOB), str(lib)], env=dict(os.environ))
    assert r.returncode == 1, r.stderr[-2000:]
    with tarfile.open(only_bundle(out)) as tf:
        tf.extractall(tmp / "x", filter="data")
    bundle = next((tmp / "x").iterdir())
    pid = int(next(iter(json.loads((bundle / "processes.json").read_text()))))
    return bundle, pid


def test_native_cuda_wait_with_busy_gpu_is_a_kernel_hang(hang_bundle: tuple[Path, int]) -> None:
    bundle, pid = hang_bundle
    before = diagnose([bundle])  # NVML unavailable: no GPU state, no kernel-hang claim
    assert not any(f.rule == "cuda-sync-hang" for f in before.findings)
    _busy_gpu(bundle, pid, 100)
    res = diagnose([bundle])
    top = res.findings[0]
    assert (top.category, top.rule, top.ranks, top.phase) == (
        "kernel-hang", "cuda-sync-hang", [0], "weight-load"), res.findings
    assert "cudaDeviceSynchronize" in top.summary and f"pid {pid}" in top.summary
    assert top.confidence >= 0.7 and res.verdict.startswith("kernel-hang:")
    assert "NCCL" not in top.fix


def test_idle_gpu_is_not_a_kernel_hang(hang_bundle: tuple[Path, int]) -> None:
    bundle, pid = hang_bundle
    _busy_gpu(bundle, pid, 0)
    assert not any(f.rule == "cuda-sync-hang" for f in diagnose([bundle]).findings)
