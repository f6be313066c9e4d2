"""NVML snapshot and tier-1 checks through the FAKE seam (``RecordedSeam``, recorded values):
no NVIDIA driver or GPU exists here. The real pynvml path runs on the lead's H200 (device
issue); here only its no-driver branch runs for real (``test_real_pynvml_without_driver``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sm120kit.doctor import run_doctor
from sm120kit.facts import nvml
from sm120kit.facts.nvml_seam import NvmlError, RecordedSeam

GiB = 1 << 30


def h200_answers(n: int = 2) -> dict[str, Any]:
    """Values as an H200 host reports them (name, 9.0, 141 GB HBM3e), n GPUs."""
    return {
        "nvmlSystemGetDriverVersion": "570.133.20",
        "nvmlSystemGetCudaDriverVersion_v2": 12080,
        "nvmlSystemGetNVMLVersion": "12.570.133.20",
        "nvmlDeviceGetCount": n,
        "nvmlDeviceGetName": "NVIDIA H200",
        "nvmlDeviceGetUUID": {f"({i},)": f"GPU-{i}a1b2c3d-0000-1111-2222-33334444555{i}"
                              for i in range(n)},
        "nvmlDeviceGetPciInfo": {f"({i},)": {"busId": f"00000000:{0x18 + i:02X}:00.0".encode()}
                                 for i in range(n)},
        "nvmlDeviceGetCudaComputeCapability": [9, 0],
        "nvmlDeviceGetMemoryInfo": {"total": 150754820096, "used": 4 << 20,
                                    "free": 150754820096 - (4 << 20)},
        "nvmlDeviceGetBAR1MemoryInfo": {"bar1Total": 256 * GiB, "bar1Used": 1 << 20,
                                        "bar1Free": 256 * GiB - (1 << 20)},
        "nvmlDeviceGetUtilizationRates": {"gpu": 0, "memory": 0},
        "nvmlDeviceGetPowerUsage": 75000,
        "nvmlDeviceGetEnforcedPowerLimit": 700000,
        "nvmlDeviceGetTemperature": 30,
        "nvmlDeviceGetClockInfo": {"(0, 1)": 345, "(0, 2)": 3201, "(1, 1)": 345, "(1, 2)": 3201},
        "nvmlDeviceGetMaxClockInfo": 1980,
        "nvmlDeviceGetCurrentClocksEventReasons": 0x1,
        "nvmlDeviceGetCurrPcieLinkGeneration": 5,
        "nvmlDeviceGetMaxPcieLinkGeneration": 5,
        "nvmlDeviceGetGpuMaxPcieLinkGeneration": 5,
        "nvmlDeviceGetCurrPcieLinkWidth": 16,
        "nvmlDeviceGetMaxPcieLinkWidth": 16,
        "nvmlDeviceGetPcieReplayCounter": 0,
        "nvmlDeviceGetPersistenceMode": 1,
        "nvmlDeviceGetMigMode": [0, 0],
        "nvmlDeviceGetEccMode": [1, 1],
        "nvmlDeviceGetTotalEccErrors": 0,
        "nvmlDeviceGetComputeMode": 0,
        "nvmlDeviceGetComputeRunningProcesses": [],
        "nvmlDeviceGetP2PStatus": 0,
        "nvmlDeviceGetTopologyCommonAncestor": 10,
    }


def rtx_pro_answers(n: int = 2) -> dict[str, Any]:
    a = h200_answers(n)
    a.update({
        "nvmlDeviceGetName": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
        "nvmlDeviceGetCudaComputeCapability": [12, 0],
        "nvmlDeviceGetMemoryInfo": {"total": 102642139136, "used": 500 << 20,
                                    "free": 102642139136 - (500 << 20)},
        "nvmlDeviceGetMigMode": {"error": "not_supported"},
        "nvmlDeviceGetEccMode": {"error": "not_supported"},
        "nvmlDeviceGetPcieReplayCounter": {"error": "not_supported"},
    })
    return a


def _run(tmp_path: Path, seam: Any, only: list[str] | None = None, **env: str):  # type: ignore[no-untyped-def]
    e = {"HOME": str(tmp_path), "PATH": str(tmp_path), **env}
    return run_doctor(only=only or ["gpu", "cuda.driver"], nvml_seam=seam, environ=e,
                      root=str(tmp_path), paths=[str(tmp_path)])


def test_h200_is_not_sm120(tmp_path: Path) -> None:
    rep = _run(tmp_path, RecordedSeam(h200_answers()))
    c = rep.get("gpu.sm120")
    assert c.status == "fail"
    assert "GPU 0 NVIDIA H200 is SM90 (9.0), not SM120" in c.summary
    assert "GPU 1 NVIDIA H200 is SM90 (9.0)" in c.summary
    n = rep.get("gpu.nvml")
    assert n.status == "ok" and "driver 570.133.20, CUDA 12.8, 2 of 2" in n.summary
    assert rep.get("gpu.p2p").status == "ok"
    assert rep.get("gpu.settings").status == "ok"
    assert rep.exit_code == 2


def test_rtx_pro_sm120_ok_and_na_tolerated(tmp_path: Path) -> None:
    rep = _run(tmp_path, RecordedSeam(rtx_pro_answers()))
    assert rep.get("gpu.sm120").status == "ok"
    s = rep.get("gpu.settings")
    assert s.status == "ok" and s.evidence["gpus"]["0"]["na"] == {
        "mig_mode": "not_supported", "ecc_mode": "not_supported"}
    assert rep.get("gpu.pcie").status == "ok"
    snap = rep.get("gpu.nvml").evidence["snapshot"]
    assert snap["gpus"][0]["pci_bus_id"] == "0000:18:00.0"
    assert snap["gpus"][0]["compute_capability"] == [12, 0]


def test_p2p_uses_integer_cap_indices(tmp_path: Path) -> None:
    seam = RecordedSeam(rtx_pro_answers(3))
    snap = nvml.snapshot(seam=seam, environ={})
    idx = [c[1][2] for c in seam.calls if c[0] == "nvmlDeviceGetP2PStatus"]
    assert idx and all(type(i) is int for i in idx)
    assert sorted(set(idx)) == [0, 1, 2, 3, 4]
    assert snap.p2p["caps"]["read"][0][1] == 0 and snap.p2p["caps"]["read"][2][0] == 0
    assert snap.p2p["caps"]["read"][0][0] is None


def test_p2p_not_supported_and_topology(tmp_path: Path) -> None:
    a = rtx_pro_answers(2)
    a["nvmlDeviceGetP2PStatus"] = 1  # CHIPSET_NOT_SUPPORTED (stock driver, GeForce-class)
    c = _run(tmp_path, RecordedSeam(a), ["gpu.p2p"]).get("gpu.p2p")
    assert c.status == "warn" and "CHIPSET_NOT_SUPPORTED" in c.summary
    a = rtx_pro_answers(2)
    a["nvmlDeviceGetTopologyCommonAncestor"] = 50
    c = _run(tmp_path, RecordedSeam(a), ["gpu.p2p"]).get("gpu.p2p")
    assert c.status == "warn" and "SYS" in c.summary


def test_visible_devices_indices_uuids_and_stops(tmp_path: Path) -> None:
    a = h200_answers(4)
    snap = nvml.snapshot(seam=RecordedSeam(a), environ={"CUDA_VISIBLE_DEVICES": "2,0",
                                                         "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert [(g.index, g.nvml_index) for g in snap.gpus] == [(0, 2), (1, 0)]
    assert snap.visible_note is None
    snap = nvml.snapshot(seam=RecordedSeam(a), environ={"CUDA_VISIBLE_DEVICES": "GPU-3a1b"})
    assert [g.nvml_index for g in snap.gpus] == [3]
    snap = nvml.snapshot(seam=RecordedSeam(a), environ={"CUDA_VISIBLE_DEVICES": "1,7,2"})
    assert [g.nvml_index for g in snap.gpus] == [1]
    assert snap.visible_note and "'7'" in snap.visible_note
    snap = nvml.snapshot(seam=RecordedSeam(a), environ={"CUDA_VISIBLE_DEVICES": ""})
    assert snap.available and snap.gpus == []
    rep = _run(tmp_path, RecordedSeam(a), ["gpu.nvml", "gpu.sm120"], CUDA_VISIBLE_DEVICES="")
    assert rep.get("gpu.nvml").status == "warn"
    assert rep.get("gpu.sm120").status == "skip"


def test_no_driver_is_a_clear_failure(tmp_path: Path) -> None:
    seam = RecordedSeam({"nvmlInit": {"error": "library_not_found"}})
    rep = _run(tmp_path, seam)
    c = rep.get("gpu.nvml")
    assert c.status == "fail" and c.summary.startswith("no NVIDIA driver")
    assert rep.get("gpu.sm120").status == "skip"
    assert rep.get("cuda.driver").status == "skip"


def test_real_pynvml_without_driver(tmp_path: Path) -> None:
    """The real PynvmlSeam on this GPU-less machine: NVML's library is not found."""
    snap = nvml.snapshot(timeout=5.0, environ={})
    assert not snap.available and snap.error_kind in ("library_not_found", "driver_not_loaded")
    assert snap.error and snap.error.startswith("no NVIDIA driver")


def test_no_pynvml(tmp_path: Path) -> None:
    def factory() -> Any:
        raise NvmlError("no_pynvml", "nvidia-ml-py (pynvml) is not importable")

    snap = nvml.snapshot(seam=factory, environ={})
    assert not snap.available and "pip install nvidia-ml-py" in (snap.error or "")


def test_hung_nvml_times_out(tmp_path: Path) -> None:
    class Hung:
        def call(self, fn: str, *args: Any) -> Any:
            time.sleep(3)
            return None

    t0 = time.perf_counter()
    snap = nvml.snapshot(timeout=0.3, seam=Hung(), environ={})
    assert time.perf_counter() - t0 < 2
    assert not snap.available and snap.error_kind == "timeout"


def test_driver_cuda_vs_torch(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("")
    (site / "torch" / "version.py").write_text(
        "from typing import Optional\n__version__ = '2.9.0+cu130'\ncuda: Optional[str] = '13.0'\n")
    a = h200_answers(1)
    rep = run_doctor(only=["cuda.driver", "cuda.torch"], nvml_seam=RecordedSeam(a),
                     environ={"HOME": str(tmp_path)}, root=str(tmp_path), paths=[str(site)])
    c = rep.get("cuda.driver")
    assert c.status == "fail" and "12.8 < torch's CUDA 13.0" in c.summary
    assert rep.get("cuda.torch").status == "ok"


def test_gpu_findings(tmp_path: Path) -> None:
    a = rtx_pro_answers(2)
    a.update({
        "nvmlDeviceGetBAR1MemoryInfo": {"bar1Total": 256 << 20, "bar1Used": 0,
                                        "bar1Free": 256 << 20},
        "nvmlDeviceGetMaxPcieLinkGeneration": 4,
        "nvmlDeviceGetMaxPcieLinkWidth": 8,
        "nvmlDeviceGetPcieReplayCounter": 12,
        "nvmlDeviceGetCurrentClocksEventReasons": 0x40 | 0x4,
        "nvmlDeviceGetPersistenceMode": 0,
        "nvmlDeviceGetComputeRunningProcesses": [{"pid": 4242, "usedGpuMemory": 3 * GiB}],
        "nvmlDeviceGetEccMode": [1, 1],
        "nvmlDeviceGetTotalEccErrors": 2,
    })
    rep = _run(tmp_path, RecordedSeam(a))
    assert rep.get("gpu.bar1").status == "warn"
    p = rep.get("gpu.pcie")
    assert p.status == "warn" and "Gen4" in p.summary and "x8" in p.summary and "12 PCIe" in p.summary
    assert "HwThermalSlowdown" in rep.get("gpu.clocks").summary
    assert "4242" in rep.get("gpu.memory").summary
    st = rep.get("gpu.settings")
    assert st.status == "fail" and "2 uncorrected ECC" in st.summary and "persistence" in st.summary


def test_one_gpu_unreachable(tmp_path: Path) -> None:
    a = h200_answers(2)
    a["nvmlDeviceGetHandleByIndex"] = {"(0,)": 0, "(1,)": {"error": "gpu_is_lost"}}
    rep = _run(tmp_path, RecordedSeam(a), ["gpu.nvml", "gpu.p2p", "gpu.sm120"])
    c = rep.get("gpu.nvml")
    assert c.status == "fail" and "GPU 1 (NVML 1: gpu_is_lost)" in c.summary
    snap = c.evidence["snapshot"]
    assert snap["gpus"][1]["na"] == {"handle": "gpu_is_lost"}
    assert snap["p2p"]["caps"]["read"][0][1] is None
    assert rep.get("gpu.sm120").status == "fail"  # GPU 0 is still an H200 (SM90)


def test_record_and_replay_round_trip(tmp_path: Path) -> None:
    """RecordingSeam over a fake inner seam that answers like pynvml does (opaque handle objects,
    ctypes structs, bytes), replayed through RecordedSeam: the same snapshot."""
    import ctypes
    import json

    class Mem(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                    ("used", ctypes.c_ulonglong)]

    class Handle:
        pass

    handles = [Handle(), Handle()]
    base = RecordedSeam(rtx_pro_answers(2))

    class PynvmlLike:
        def call(self, fn: str, *args: Any) -> Any:
            if fn == "nvmlDeviceGetHandleByIndex":
                return handles[args[0]]
            plain = tuple(handles.index(a) if isinstance(a, Handle) else a for a in args)
            if fn == "nvmlDeviceGetMemoryInfo":
                return Mem(total=100 * GiB, free=99 * GiB, used=1 * GiB)
            return base.call(fn, *plain)

    from sm120kit.facts.nvml_seam import RecordingSeam

    rec = RecordingSeam(PynvmlLike())
    first = nvml.snapshot(seam=rec, environ={})
    answers = json.loads(json.dumps(rec.answers))
    assert answers["nvmlDeviceGetMemoryInfo"]["(0,)"] == {"total": 100 * GiB, "free": 99 * GiB,
                                                          "used": 1 * GiB}
    again = nvml.snapshot(seam=RecordedSeam(answers), environ={})
    a, b = first.to_dict(), again.to_dict()
    a.pop("duration_s")
    b.pop("duration_s")
    assert a == b and a["gpus"][1]["memory_total"] == 100 * GiB
