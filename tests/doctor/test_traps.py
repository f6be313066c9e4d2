"""Preflight traps on real-shaped inputs: the REAP GLM-5.2 config (tests/data/kv), the real
FlashInfer 0.6.14 wheel tree beside a flashinfer-cubin 0.6.13 install record (its dist-info,
as pip writes it: the cubin payload is irrelevant to the guard), real vLLM wheels for the
indexer's interleave rule, and an NVML recording shaped like 4x RTX PRO 6000 on PCIe (no SM120
GPU exists here, so the NVML answers are recorded values, not a live device)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from sm120kit.doctor import run_doctor
from sm120kit.facts.nvml_seam import RecordedSeam
from sm120kit.patchset.release import release_tree

DATA = Path(__file__).resolve().parents[1] / "data" / "kv"


def _run(tmp_path: Path, only: list[str], argv: list[str] | None = None,
         paths: list[Path] | None = None, env: dict[str, str] | None = None,
         **kw: Any):  # type: ignore[no-untyped-def]
    e = {"HOME": str(tmp_path / "home"), "PATH": str(tmp_path), **(env or {})}
    return run_doctor(launch_argv=argv, only=only, environ=e, root=str(tmp_path),
                      paths=[str(p) for p in (paths or [tmp_path])], **kw)


def test_stale_num_experts(tmp_path: Path) -> None:
    model = tmp_path / "GLM-5.2-504B-Nvidia"
    model.mkdir()
    cfg = json.loads((DATA / "glm52_reap_nvfp4_config.json").read_text())
    (model / "config.json").write_text(json.dumps(cfg))
    argv = ["vllm", "serve", str(model), "-tp", "4", "--enable-expert-parallel"]
    c = _run(tmp_path, ["launch.stale_num_experts"], argv).get("launch.stale_num_experts")
    assert c.status == "fail" and "num_experts 256 and n_routed_experts 168" in c.summary
    assert "Local/global number of experts: 64/256" in c.summary  # the published log line
    assert 'delete "num_experts"' in (c.fix or "") and "MTP draft" in (c.fix or "")
    del cfg["num_experts"]
    (model / "config.json").write_text(json.dumps(cfg))
    c = _run(tmp_path, ["launch.stale_num_experts"], argv).get("launch.stale_num_experts")
    assert c.status == "ok"


def _cubin_record(site: Path, version: str) -> None:
    di = site / f"flashinfer_cubin-{version}.dist-info"
    di.mkdir(parents=True)
    (di / "METADATA").write_text(f"Metadata-Version: 2.1\nName: flashinfer-cubin\n"
                                 f"Version: {version}\n")


@pytest.mark.network  # a vLLM/FlashInfer release wheel (PyPI)
def test_flashinfer_version_guard(tmp_path: Path) -> None:
    fi = release_tree("flashinfer-python", "0.6.14")
    src = (fi / "flashinfer" / "jit" / "env.py").read_text()
    assert 'not os.getenv("FLASHINFER_DISABLE_VERSION_CHECK")' in src  # the real guard
    assert "flashinfer_version != flashinfer_cubin_version" in src
    site = tmp_path / "site"
    _cubin_record(site, "0.6.13")
    c = _run(tmp_path, ["flashinfer.version_guard"], paths=[fi, site]).get(
        "flashinfer.version_guard")
    assert c.status == "fail" and "flashinfer-cubin 0.6.13" in c.summary
    assert "FLASHINFER_DISABLE_VERSION_CHECK=1" in (c.fix or "")
    assert "newer than its cubin" in (c.fix or "")
    c = _run(tmp_path, ["flashinfer.version_guard"], paths=[fi, site],
             env={"FLASHINFER_DISABLE_VERSION_CHECK": "1"}).get("flashinfer.version_guard")
    assert c.status == "ok" and "bypassed" in c.summary
    shutil.rmtree(site)
    _cubin_record(site, "0.6.14")
    c = _run(tmp_path, ["flashinfer.version_guard"], paths=[fi, site]).get(
        "flashinfer.version_guard")
    assert c.status == "ok"


def _pcie_box(n: int, nvlink_status: int, cc: list[int] | None = None) -> RecordedSeam:
    p2p: dict[str, int] = {}
    for i in range(n):
        for j in range(n):
            if i != j:
                for cap in range(5):
                    p2p[repr((i, j, cap))] = nvlink_status if cap == 2 else 0
    return RecordedSeam({
        "nvmlDeviceGetCount": n,
        "nvmlDeviceGetName": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
        "nvmlDeviceGetCudaComputeCapability": cc or [12, 0],
        "nvmlDeviceGetUUID": {f"({i},)": f"GPU-{i:08d}-aaaa" for i in range(n)},
        "nvmlDeviceGetP2PStatus": p2p,
        "nvmlDeviceGetTopologyCommonAncestor": 30,
    })


def test_p2p_on_sm120_pcie(tmp_path: Path) -> None:
    c = _run(tmp_path, ["nccl.p2p_pcie"], nvml_seam=_pcie_box(4, 5)).get("nccl.p2p_pcie")
    assert c.status == "warn" and "deadlock" in c.summary
    assert "NCCL_P2P_DISABLE=1" in (c.fix or "") and "-18 %" in (c.fix or "")
    assert "NCCL_RUN_DIAGNOSTICS=1" in (c.fix or "")
    c = _run(tmp_path, ["nccl.p2p_pcie"], nvml_seam=_pcie_box(4, 5),
             env={"NCCL_P2P_DISABLE": "1"}).get("nccl.p2p_pcie")
    assert c.status == "ok" and "cost" in c.summary
    # NVLink present (status OK on the NVLink capability), or not SM120: not this trap
    assert _run(tmp_path, ["nccl.p2p_pcie"], nvml_seam=_pcie_box(4, 0)).get(
        "nccl.p2p_pcie").status == "ok"
    assert _run(tmp_path, ["nccl.p2p_pcie"], nvml_seam=_pcie_box(4, 5, [9, 0])).get(
        "nccl.p2p_pcie").status == "ok"


@pytest.mark.network  # a vLLM/FlashInfer release wheel (PyPI)
@pytest.mark.parametrize("version,status", [("0.25.1", "fail"), ("0.33.0", "ok")])
def test_interleave_on_rejecting_indexer(tmp_path: Path, version: str, status: str) -> None:
    tree = release_tree("vllm", version)
    src = (tree / "vllm" / "v1" / "attention" / "backends" / "mla" / "indexer.py").read_text()
    assert ("dcp_world_size > 1 and self.cp_kv_cache_interleave_size > 1" in src) is \
        (status == "fail")
    argv = ["vllm", "serve", "m", "-tp", "4", "-dcp", "4", "--cp-kv-cache-interleave-size", "16"]
    c = _run(tmp_path, ["launch.interleave_indexer"], argv, paths=[tree]).get(
        "launch.interleave_indexer")
    assert c.status == status, c.summary
    argv = ["vllm", "serve", "m", "-tp", "4", "-dcp", "4"]
    assert _run(tmp_path, ["launch.interleave_indexer"], argv, paths=[tree]).get(
        "launch.interleave_indexer").status == "ok"
