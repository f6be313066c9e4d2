"""Replays of what sm120kit recorded on a real NVIDIA H200 (the lent device machine, issue 8).

``tests/data/h200/`` holds, from one run of ``scripts/device_validate.sh`` (driver 580.159.04,
CUDA 13.0, torch 2.11.0+cu130, NCCL 2.28.9):

* ``nvml-record.json``: every NVML answer of ``python -m sm120kit.facts.nvml --record``, and
  ``nvidia-smi-query.csv`` / ``nvidia-smi-q-excerpt.txt``: nvidia-smi on the same machine, minutes
  apart. The recording is replayed through ``RecordedSeam`` (not a live driver: none exists here).
* ``bundle-nccl-timeout.tar.gz``: ``sm120kit collect`` of a single-rank NCCL all_reduce queued
  behind a 40 s ``torch.cuda._sleep`` kernel with a 10 s process-group timeout (Flight Recorder
  dump included).
* ``bundle-warmup-stall-dcp4.tar.gz``: ``sm120kit warmup run --device cuda --dist-backend gloo
  --dcp 4 --inject-stall 2:merge`` handing over to collect.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from sm120kit.diagnose.engine import diagnose
from sm120kit.doctor import run_doctor
from sm120kit.facts.nvml import snapshot
from sm120kit.facts.nvml_seam import RecordedSeam

DATA = Path(__file__).parent / "data" / "h200"


def _smi() -> dict[str, str]:
    with open(DATA / "nvidia-smi-query.csv") as fh:
        row = next(csv.DictReader(fh, skipinitialspace=True))
    return {k.split(" [")[0].strip(): v.strip() for k, v in row.items()}


def _num(s: str) -> int:
    m = re.search(r"\d+", s)
    assert m, s
    return int(m.group(0))


def test_recorded_nvml_matches_nvidia_smi() -> None:
    snap = snapshot(seam=RecordedSeam(json.loads((DATA / "nvml-record.json").read_text())),
                    environ={})
    assert snap.available, snap.error
    smi = _smi()
    q = (DATA / "nvidia-smi-q-excerpt.txt").read_text()
    g = snap.gpus[0]
    assert g.name == smi["name"] == "NVIDIA H200"
    assert g.uuid == smi["uuid"]
    assert snap.driver_version == smi["driver_version"]
    cuda = re.search(r"CUDA Version\s*:\s*([\d.]+)", q)
    assert cuda and snap.cuda_driver_version is not None
    assert f"{snap.cuda_driver_version // 1000}.{snap.cuda_driver_version % 1000 // 10}" == cuda.group(1)
    assert g.compute_capability == (9, 0) and smi["compute_cap"] == "9.0"
    assert (g.memory_total or 0) >> 20 == _num(smi["memory.total"])
    # nvmlMemory_v2: `used` without the driver-reserved memory, as nvidia-smi reports it
    assert (g.memory_used or 0) >> 20 == _num(smi["memory.used"])
    assert g.memory_reserved is not None and g.memory_reserved > 0
    assert g.pcie_gen_max == _num(smi["pcie.link.gen.max"])
    assert g.pcie_width_max == _num(smi["pcie.link.width.max"])
    assert g.persistence_mode is (smi["persistence_mode"] == "Enabled")
    assert g.ecc_mode_current == (1 if smi["ecc.mode.current"] == "Enabled" else 0)
    assert g.clock_sm_max_mhz == _num(smi["clocks.max.sm"])
    assert g.clock_mem_max_mhz == _num(smi["clocks.max.memory"])


def test_recorded_h200_fails_the_sm120_check(tmp_path: Path) -> None:
    seam = RecordedSeam(json.loads((DATA / "nvml-record.json").read_text()))
    rep = run_doctor(only=["gpu"], nvml_seam=seam, environ={"HOME": str(tmp_path)},
                     root=str(tmp_path), paths=[str(tmp_path)])
    c = rep.get("gpu.sm120")
    assert c.status == "fail"
    assert c.summary == "GPU 0 NVIDIA H200 is SM90 (9.0), not SM120"
    assert rep.get("gpu.nvml").status == "ok"
    assert rep.exit_code == 2


@pytest.mark.parametrize(
    ("bundle", "rule", "category"),
    [
        ("bundle-nccl-timeout.tar.gz", "collective-not-started", "kernel-hang"),
        ("bundle-warmup-stall-dcp4.tar.gz", "bundle-stall", "collective-desync"),
    ],
)
def test_real_gpu_bundles_are_named(bundle: str, rule: str, category: str) -> None:
    res = diagnose([DATA / bundle])
    top = res.findings[0]
    if "nccl-timeout" in bundle:
        # the real H200 process blocks in torch.cuda.synchronize() behind a long kernel: its
        # --native sample (cudaDeviceSynchronize -> cuCtxSynchronize_v2) and NVML's 100 % busy
        # GPU name the wait (issue 29 item 5); the collective behind it never started
        assert (top.rule, top.category) == ("cuda-sync-hang", category), res.findings
        assert "cudaDeviceSynchronize → cuCtxSynchronize_v2" in top.summary
        assert "pid 1484" in top.summary and "torch/cuda/__init__.py" in top.evidence[0].text
        top = next(f for f in res.findings if f.rule == rule)
    assert (top.rule, top.category) == (rule, category), [f.rule for f in res.findings]
    if "warmup-stall" in bundle:
        # the stall record names the rank and its phase; the stacks agree (issue 12, item 6)
        assert "rank 2 (pid" in top.summary and "phase merge" in top.summary
        asym = next(f for f in res.findings if f.rule == "stack-asymmetry")
        assert "Warmup_DCP2" in asym.summary
