"""Host checks on procfs/sysfs/etc trees laid out in tmp dirs (``root=``), and real rlimits
changed in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sm120kit.doctor import run_doctor
from sm120kit.facts import host, kernlog

GPU_A, GPU_B = "0000:41:00.0", "0000:c1:00.0"
BRIDGE_A, BRIDGE_B = "0000:40:01.1", "0000:c0:01.1"


def w(root: Path, rel: str, text: str | bytes) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


def acs_config(ctl: int) -> bytes:
    """4 KiB PCIe config space: an AER ext cap at 0x100 -> ACS (id 0x000d) at 0x148."""
    cfg = bytearray(4096)
    cfg[0x100:0x104] = (0x0001 | (1 << 16) | (0x148 << 20)).to_bytes(4, "little")
    cfg[0x148:0x14C] = (0x000D | (1 << 16) | (0 << 20)).to_bytes(4, "little")
    cfg[0x14C:0x14E] = (0x001F).to_bytes(2, "little")  # capability register
    cfg[0x14E:0x150] = ctl.to_bytes(2, "little")
    return bytes(cfg)


def make_host(root: Path, *, iommu_type: str = "identity", cmdline: str = "quiet",
              acs_ctl: int = 0, uvm: str | None = "Y", fs: str = "ext4") -> Path:
    w(root, "proc/cmdline", cmdline + "\n")
    w(root, "proc/self/mounts", f"overlay / overlay rw 0 0\n/dev/nvme0n1p2 / {fs} rw 0 0\n"
      "tmpfs /dev/shm tmpfs rw 0 0\n")
    w(root, "proc/driver/nvidia/version",
      "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  595.58.03  Release Build\n")
    (root / "dev" / "shm").mkdir(parents=True, exist_ok=True)
    for n, (gpu, bridge) in enumerate(((GPU_A, BRIDGE_A), (GPU_B, BRIDGE_B))):
        dom = f"pci0000:{bridge[5:7]}"
        real = root / "sys" / "devices" / dom / bridge / gpu
        real.mkdir(parents=True)
        w(real, "vendor", "0x10de\n")
        w(real, "class", "0x030000\n")
        w(real, "aer_dev_correctable", "RxErr 0\nBadTLP 0\nTOTAL_ERR_COR 0\n")
        w(root / "sys" / "devices" / dom / bridge, "config", acs_config(acs_ctl))
        w(root / "sys" / "devices" / dom / bridge, "vendor", "0x1022\n")
        w(root / "sys" / "devices" / dom / bridge, "class", "0x060400\n")
        links = root / "sys" / "bus" / "pci" / "devices"
        links.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(real, links), links / gpu)
        os.symlink(os.path.relpath(real.parent, links), links / bridge)
        grp = root / "sys" / "kernel" / "iommu_groups" / str(30 + n)
        w(grp, "type", iommu_type + "\n")
        os.symlink(os.path.relpath(grp, real), real / "iommu_group")
    if iommu_type:
        (root / "sys" / "class" / "iommu" / "ivhd0").mkdir(parents=True)
    if uvm is not None:
        w(root, "sys/module/nvidia_uvm/parameters/uvm_disable_hmm", uvm + "\n")
    return root


def _run(root: Path, only: list[str], **env: str):  # type: ignore[no-untyped-def]
    return run_doctor(only=only, root=str(root), environ={"HOME": str(root), **env},
                      paths=[str(root)], tiers=(0, 1, 2))


def test_facts_from_tree(tmp_path: Path) -> None:
    root = make_host(tmp_path, iommu_type="DMA-FQ", cmdline="amd_iommu=on quiet")
    assert host.nvidia_pci_devices(str(root)) == [GPU_A, GPU_B]
    i = host.iommu(str(root))
    assert i["groups"][GPU_A] == {"group": "30", "type": "DMA-FQ"} and i["units"] == ["ivhd0"]
    assert host.upstream_bridges(str(root), GPU_A) == [BRIDGE_A]
    assert host.root_fstype(str(root)) == "ext4"
    assert host.cmdline_params(host.cmdline(str(root))) == {"amd_iommu": "on", "quiet": ""}


def test_translated_iommu_and_cmdline_warn(tmp_path: Path) -> None:
    root = make_host(tmp_path, iommu_type="DMA-FQ", cmdline="amd_iommu=on quiet")
    rep = _run(root, ["host.iommu_groups", "host.cmdline"])
    g = rep.get("host.iommu_groups")
    assert g.status == "warn" and GPU_A in g.summary and "iommu=pt" in (g.fix or "")
    c = rep.get("host.cmdline")
    assert c.status == "warn" and "pcie_port_pm=off" in c.summary


def test_good_host_is_ok(tmp_path: Path) -> None:
    root = make_host(tmp_path, cmdline="amd_iommu=on iommu=pt pcie_aspm=off pcie_port_pm=off")
    rep = _run(root, ["host.iommu_groups", "host.cmdline", "host.uvm_hmm", "host.zfs_root",
                      "host.nvidia_driver", "deep.acs", "deep.aer"])
    assert {c.id: c.status for c in rep.checks} == {
        "host.iommu_groups": "ok", "host.cmdline": "ok", "host.uvm_hmm": "ok",
        "host.zfs_root": "ok", "host.nvidia_driver": "ok", "deep.acs": "ok", "deep.aer": "ok"}
    assert "595.58.03" in rep.get("host.nvidia_driver").summary


def test_uvm_hmm_and_zfs(tmp_path: Path) -> None:
    root = make_host(tmp_path, uvm="N", fs="zfs")
    rep = _run(root, ["host.uvm_hmm", "host.zfs_root"])
    assert rep.get("host.uvm_hmm").status == "warn"
    assert rep.get("host.zfs_root").status == "warn"
    w(root, "etc/modprobe.d/nvidia-uvm.conf", "options nvidia_uvm uvm_disable_hmm=1\n")
    (root / "sys/module/nvidia_uvm/parameters/uvm_disable_hmm").unlink()
    assert _run(root, ["host.uvm_hmm"]).get("host.uvm_hmm").status == "ok"


def test_acs_redirect_bits(tmp_path: Path) -> None:
    root = make_host(tmp_path, acs_ctl=0x1D)  # SrcValid ReqRedir CmpltRedir UpstreamFwd
    a = host.acs_control(str(root), BRIDGE_A)
    assert a["present"] and a["bits"] == ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"]
    c = _run(root, ["deep.acs"]).get("deep.acs")
    assert c.status == "warn" and "ReqRedir" in c.summary and "setpci" in (c.fix or "")
    # a non-root read of config space returns only 64 bytes -> skip with the reason
    for b in (BRIDGE_A, BRIDGE_B):
        p = Path(os.path.realpath(root / "sys/bus/pci/devices" / b)) / "config"
        p.write_bytes(acs_config(0x1D)[:64])
    c = _run(root, ["deep.acs"]).get("deep.acs")
    assert c.status == "skip" and "root" in c.summary


def test_aer_and_xid(tmp_path: Path) -> None:
    root = make_host(tmp_path)
    real = Path(os.path.realpath(root / "sys/bus/pci/devices" / GPU_A))
    w(real, "aer_dev_correctable", "RxErr 3\nBadTLP 1\nTOTAL_ERR_COR 4\n")
    c = _run(root, ["deep.aer"]).get("deep.aer")
    assert c.status == "warn" and GPU_A in c.summary
    w(real, "aer_dev_fatal", "SurpriseDown 1\nTOTAL_ERR_FATAL 1\n")
    assert _run(root, ["deep.aer"]).get("deep.aer").status == "fail"
    assert _run(root, ["deep.xid"]).get("deep.xid").status == "skip"
    w(root, "var/log/kern.log",
      "[  12.0] nvidia: loading out-of-tree module\n"
      "[ 812.5] NVRM: Xid (PCI:0000:41:00): 79, pid='<unknown>', name=<unknown>, GPU has "
      "fallen off the bus.\n[ 900.1] NVRM: Xid (PCI:0000:c1:00): 13, Graphics Exception\n")
    x = kernlog.xids((root / "var/log/kern.log").read_text())
    assert [e["xid"] for e in x] == [79, 13] and x[0]["pci"] == "0000:41:00"
    c = _run(root, ["deep.xid"]).get("deep.xid")
    assert c.status == "fail" and "79" in c.summary


def test_no_gpu_host_skips_gpu_host_checks(tmp_path: Path) -> None:
    w(tmp_path, "proc/cmdline", "quiet\n")
    rep = _run(tmp_path, ["host.cmdline", "host.iommu_groups", "host.nvidia_driver", "deep.acs"])
    assert all(c.status == "skip" for c in rep.checks), rep.to_dict()


def test_container_and_shm(tmp_path: Path) -> None:
    root = make_host(tmp_path)
    w(root, ".dockerenv", "")
    w(root, "proc/1/cgroup", "0::/system.slice/docker-abc.scope\n")
    c = _run(root, ["host.container"]).get("host.container")
    assert c.status == "ok" and c.evidence["kind"] == "docker" and c.evidence["in_container"]
    s = _run(root, ["host.shm"]).get("host.shm")
    st = os.statvfs(root / "dev" / "shm")
    assert s.evidence["total"] == st.f_blocks * st.f_frsize
    total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    want = ("fail" if total < 512 << 20 else "warn" if total < 8 << 30 or free < 1 << 30
            else "ok")
    assert s.status == want
    (root / "dev" / "shm").rmdir()
    assert _run(root, ["host.shm"]).get("host.shm").status == "fail"


def test_rlimits_in_a_child_with_lowered_limits(tmp_path: Path) -> None:
    code = (
        "import json, resource\n"
        "resource.setrlimit(resource.RLIMIT_MEMLOCK, (65536, 65536))\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 4096))\n"
        "from sm120kit.doctor import run_doctor\n"
        "r = run_doctor(only=['host.rlimits'])\n"
        "print(json.dumps(r.get('host.rlimits').to_dict()))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    c = json.loads(out)
    assert c["status"] == "warn" and "memlock 0 MiB" in c["summary"]
    assert "nofile hard 4096" in c["summary"]
    assert c["evidence"]["RLIMIT_NOFILE"] == {"soft": 1024, "hard": 4096}


def test_nccl_env_traps_and_library(tmp_path: Path) -> None:
    rep = _run(tmp_path, ["nccl.env"], NCCL_GRAPH_FILE="", NCCL_P2P_LEVEL="SYS")
    c = rep.get("nccl.env")
    assert c.status == "fail" and "empty string" in c.summary and "NCCL_P2P_LEVEL" in c.summary
    rep = run_doctor(only=["nccl.env"], root=str(tmp_path), paths=[str(tmp_path)],
                     environ={"NCCL_P2P_DISABLE": "1"},
                     launch_argv=["vllm", "serve", "m", "-tp", "2"])
    assert "--disable-custom-all-reduce" in (rep.get("nccl.env").fix or "")
    lib = w(tmp_path, "site/nvidia/nccl/lib/libnccl.so.2", b"\x7fELF")
    di = tmp_path / "site" / "nvidia_nccl_cu12-2.26.2.dist-info"
    di.mkdir()
    (di / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-nccl-cu12\n"
                                 "Version: 2.26.2\n")
    rep = run_doctor(only=["nccl.library"], root=str(tmp_path), environ={},
                     paths=[str(tmp_path / "site")])
    c = rep.get("nccl.library")
    assert c.status == "warn" and "2.26.2" in c.summary and c.evidence["selected"] == str(lib)
    rep = run_doctor(only=["nccl.library", "nccl.ld_preload"], root=str(tmp_path),
                     environ={"VLLM_NCCL_SO_PATH": "/nonexistent/libnccl.so.2",
                              "LD_PRELOAD": str(lib)},
                     paths=[str(tmp_path / "site")])
    assert rep.get("nccl.library").status == "fail"
    assert rep.get("nccl.ld_preload").status == "warn"
