"""Bundles: written with the collect side's own ``Bundle`` writer (same layout), one produced by a
real ``sm120kit collect`` of a real stalled gloo job, and malicious/truncated tarballs.

NVML and RAS content in the synthetic bundles is a fake (no GPU or NCCL job can exist here); the
stack JSON is the py-spy ``dump --json`` thread format.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from sm120kit.diagnose.engine import diagnose
from sm120kit.errors import UserError
from sm120kit.evidence import bundle_reader as bundle_read
from sm120kit.services.bundles import Bundle

from . import lines as L


def _thread(frames: list[tuple[str, str, int]]) -> dict[str, Any]:
    return {"pid": 1, "thread_id": 1, "thread_name": "MainThread", "os_thread_id": 1,
            "active": False, "owns_gil": False,
            "frames": [{"name": n, "filename": f"/usr/lib/python3.12/site-packages/{f}",
                        "short_filename": f, "line": ln, "module": None, "locals": None,
                        "is_entry": False, "is_shim_entry": False} for n, f, ln in frames]}


WAIT = [("all_reduce", "torch/distributed/distributed_c10d.py", 3252),
        ("wrapper", "torch/distributed/c10d_logger.py", 83),
        ("all_reduce", "vllm/distributed/parallel_state.py", 520),
        ("forward", "vllm/model_executor/models/deepseek_v2.py", 900)]
ELSEWHERE = [("compile", "triton/compiler/compiler.py", 300),
             ("_run_flashinfer_sparse_mla_decode_autotune",
              "vllm/model_executor/warmup/flashinfer_sparse_mla_warmup.py", 130)]


def _write_bundle(tmp: Path, *, odd_rank: int | None = 1, gpu_spin: bool = False) -> Bundle:
    b = Bundle(tmp / "sm120kit-bundle-host-20261202T000000Z")
    rows = L.startup(4, 4)
    rows += [L.KERNEL_WARMUP.format(name=L.worker(r, 4), pid=400 + r, ts=L.ts(100)) for r in range(4)]
    rows += [L.SHM_WAIT.format(pid=300, ts=L.ts(200 + 60 * k)) for k in range(3)]
    b.write_text("logs/child.log", "\n".join(rows) + "\n")
    b.write_text("logs/by-source/Worker_TP0_DCP0.log", "\n".join(rows[:3]) + "\n")  # duplicates
    procs = {}
    for r in range(4):
        pid = 400 + r
        procs[str(pid)] = {"label": L.worker(r, 4), "role": "worker", "rank": r}
        frames = ELSEWHERE if r == odd_rank else WAIT
        b.write_json(f"stacks/{pid}.json", {"label": L.worker(r, 4), "pid": pid, "ok": True,
                                            "method": "py-spy", "threads": [_thread(frames)]})
    b.write_json("processes.json", procs)
    gpus = [{"index": i, "name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
             "utilization_gpu": 99 if gpu_spin else 3, "power_draw_w": 80.0,
             "power_limit_w": 600.0} for i in range(4)]
    b.write_json("nvml.json", {"samples": [{"available": True, "driver_version": "580.95.05",
                                            "gpus": gpus}] * 2})
    b.write_text("ras/status-1.txt", "Group  Comms  Nodes  Ranks  Status   Errors\n"
                 "    0      1      1      4  RUNNING  MISMATCH\n")
    b.write_text("ras/status-2.txt", "    0      1      1      4  RUNNING  MISMATCH\n")
    if odd_rank is not None:
        b.write_json("flight/index.json", {"groups": [{"dir": "flight/dumps", "summary": {
            "ranks": [0, 1, 2, 3], "not_joined": [{"pg": "0", "seq": 4, "op": ["gloo:all_reduce"],
                                                   "ranks_with": [0, 2, 3],
                                                   "missing_ranks": [odd_rank]}]}}]})
    b.write_manifest()
    return b


def test_bundle_dir_and_tarball_give_the_same_diagnosis(tmp_path: Path) -> None:
    b = _write_bundle(tmp_path)
    tb = b.make_tarball()
    for target in (b.root, tb):
        res = diagnose([target])
        assert res.kind == "bundle"
        rules = {f.rule: f for f in res.findings}
        assert rules["stack-asymmetry"].ranks == [1]
        assert "Worker_TP1_DCP1" in rules["stack-asymmetry"].summary
        assert rules["flight-recorder-desync"].ranks == [1]
        assert "ras-state" in rules and rules["ras-state"].category == "collective-desync"
        assert "dcp-warmup-stall" in rules  # stacks in the sparse-MLA autotune + DCP 4
        assert res.versions["driver"] == "580.95.05"
        assert res.versions["gpu_count"] == 4
        assert len(res.stalls["stacks"]) == 4
        # logs/child.log wins over logs/by-source: no line counted twice
        assert [s["source"] for s in res.sources] == ["logs/child.log"]
        assert res.findings[0].tier in ("dead-rank", "disagreement")


def test_all_ranks_waiting_with_spinning_gpus_is_a_kernel_hang(tmp_path: Path) -> None:
    b = _write_bundle(tmp_path, odd_rank=None, gpu_spin=True)
    res = diagnose([b.root])
    f = next(f for f in res.findings if f.rule == "all-ranks-in-collective")
    assert f.category == "kernel-hang" and "low power" in f.summary
    assert "stack-asymmetry" not in {x.rule for x in res.findings}


@pytest.mark.slow  # a multi-rank gloo job run to a stall/crash: 15-30 s on 2 busy cores
def test_real_collect_bundle_of_a_stalled_gloo_job(tmp_path: Path) -> None:
    """End to end: `sm120kit collect` supervises a real 3-rank gloo job where rank 1 skips a
    collective; diagnose must name rank 1 from the stacks and the Flight Recorder dumps."""
    from tests.collect.helpers import GLOO_JOB, only_bundle, run_collect

    out = tmp_path / "out"
    r = run_collect(["-o", str(out), "--stall-timeout", "12", "--deadline", "30", "--json", "--",
                     sys.executable, str(GLOO_JOB), "--world", "3", "--mode", "stall"],
                    env=dict(os.environ))
    assert r.returncode == 1, r.stderr[-2000:]
    tb = only_bundle(out)
    res = diagnose([tb])
    rules = {f.rule: f for f in res.findings}
    assert "stack-asymmetry" in rules, (res.findings, res.stalls["stacks"], res.notes)
    assert rules["stack-asymmetry"].ranks == [1]
    assert "skip_collective_forever" in rules["stack-asymmetry"].summary
    assert res.findings[0].ranks == [1]
    with tarfile.open(tb) as tf:
        has_fr = any("/flight/dumps/" in n for n in tf.getnames())
    if has_fr:  # the ranks' FR dump threads fire a few seconds after they diverge
        assert rules["flight-recorder-desync"].ranks == [1]
    assert res.exit_code == 1


@pytest.mark.slow  # a multi-rank gloo job run to a stall/crash: 15-30 s on 2 busy cores
def test_real_collect_bundle_of_a_crashed_rank(tmp_path: Path) -> None:
    """`collect` of the real gloo job where rank 1 raises in warmup and the survivors then fail
    in gloo ("Connection closed by peer"): the first dead rank is rank 1, not the cascade."""
    from tests.collect.helpers import GLOO_JOB, only_bundle, run_collect

    out = tmp_path / "out"
    r = run_collect(["-o", str(out), "--stall-timeout", "12", "--deadline", "30", "--json", "--",
                     sys.executable, str(GLOO_JOB), "--world", "3", "--mode", "crash"],
                    env=dict(os.environ))
    assert r.returncode != 0, r.stderr[-2000:]
    res = diagnose([only_bundle(out)])
    top = res.findings[0]
    assert top.rule == "first-dead-rank" and top.category == "rank-crashed", res.findings
    assert top.ranks == [1] and "simulated failure" in top.summary
    assert any(e.source == "logs/child.log" and e.line > 0 for e in top.evidence)
    # the first error of rank 1 is its traceback header (torch `[rank1]:` prefix), by line order
    assert "Traceback" in top.evidence[0].text and "[rank1]:" in top.evidence[0].text


# --- hostile and broken inputs ---------------------------------------------------------------
def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tf:
        for ti, data in members:
            tf.addfile(ti, io.BytesIO(data) if data is not None else None)
    return path


def _ti(name: str, data: bytes = b"", **kw: Any) -> tuple[tarfile.TarInfo, bytes | None]:
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    for k, v in kw.items():
        setattr(ti, k, v)
    return ti, (data if ti.isreg() else None)


def test_malicious_tarball_is_read_without_writing_anything(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    log = ("\n".join(L.startup(2, 1)) + "\n" + L.OOM.format(r=1) + "\n").encode()
    members = [
        _ti("b/manifest.json", b'{"collectors": []}'),
        _ti("b/logs/child.log", log),
        _ti("../../victim/evil.txt", b"escaped"),
        _ti("/tmp/sm120kit-evil-abs", b"escaped"),
        _ti("b/logs/link.log", type=tarfile.SYMTYPE, linkname="/etc/passwd"),
        _ti("b/logs/hard.log", type=tarfile.LNKTYPE, linkname="b/manifest.json"),
        _ti("b/dev/null", type=tarfile.CHRTYPE, devmajor=1, devminor=3),
        _ti("b/fifo", type=tarfile.FIFOTYPE),
        _ti("b/stacks/400.json", b"{not json"),
        _ti("b/nvml.json", b"[1, 2"),
    ]
    tb = _tar(tmp_path / "evil.tar.gz", members)
    before = set(os.listdir(tmp_path))
    res = diagnose([tb])
    assert set(os.listdir(tmp_path)) == before and not (victim / "evil.txt").exists()
    assert not Path("/tmp/sm120kit-evil-abs").exists()
    notes = " ".join(res.notes)
    for word in ("unsafe member name", "symlink", "hard link", "device/fifo/other", "not valid JSON"):
        assert word in notes, notes
    assert "out-of-memory" in {f.category for f in res.findings}


def test_truncated_tarball_keeps_what_was_readable(tmp_path: Path) -> None:
    rows = L.startup(2, 1)
    # numbered lines: realistic entropy, so the cut lands inside the log member
    log = "".join(f"{rows[i % len(rows)]} req={i * 7919 % 100003}\n" for i in range(6000)).encode()
    tb = _tar(tmp_path / "full.tar.gz", [_ti("b/manifest.json", b"{}"), _ti("b/logs/child.log", log),
                                          _ti("b/processes.json", b"{}")])
    data = tb.read_bytes()
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(data[: len(data) // 2])
    res = diagnose([cut])
    assert any("truncated" in n or "stopped reading" in n for n in res.notes), res.notes
    assert res.sources and 100 < res.sources[0]["lines"] < 6000


def test_tar_bomb_member_header_stops_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle_read, "MAX_MEMBER", 1000)
    tb = _tar(tmp_path / "bomb.tar.gz", [_ti("b/manifest.json", b"{}"),
                                          _ti("b/logs/child.log", b"\0" * 5000),
                                          _ti("b/logs/late.log", b"x\n")])
    res = diagnose([tb])
    assert any("tar bomb" in n for n in res.notes)
    assert [s["source"] for s in res.sources] == []


def test_too_many_members(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle_read, "MAX_MEMBERS", 20)
    members = [_ti("b/manifest.json", b"{}")] + [_ti(f"b/logs/r{i}.log", b"x\n") for i in range(50)]
    res = diagnose([_tar(tmp_path / "many.tar", members, mode="w")])
    assert any("more than 20 members" in n for n in res.notes)


def test_garbage_named_tar_gz_and_empty_inputs(tmp_path: Path) -> None:
    g = tmp_path / "x.tar.gz"
    g.write_bytes(b"\x1f\x8b" + os.urandom(200))
    with pytest.raises(UserError):
        diagnose([g])
    e = tmp_path / "empty.log"
    e.write_bytes(b"")
    with pytest.raises(UserError, match="empty"):
        diagnose([e])
    junk = tmp_path / "junk.bin"
    junk.write_bytes(os.urandom(5000))
    with pytest.raises(UserError, match="no text evidence"):
        diagnose([junk])
    with pytest.raises(UserError, match="no such file"):
        diagnose([tmp_path / "missing.log"])


def test_directory_of_per_rank_logs_with_symlink(tmp_path: Path) -> None:
    d = tmp_path / "ranks"
    d.mkdir()
    (d / "rank0.log").write_text(L.WD_24.format(r=0, seq=9, op="ALLREDUCE", nin=8, nout=8,
                                                tmo=600000, ran=600001) + "\n")
    (d / "rank1.log").write_text(L.WD_24.format(r=1, seq=8, op="ALLREDUCE", nin=8, nout=8,
                                                tmo=600000, ran=600001) + "\n")
    (d / "link.log").symlink_to("/etc/passwd")
    res = diagnose([d])
    assert res.kind == "logs"
    assert any("symlink" in n for n in res.notes)
    f = next(f for f in res.findings if f.rule == "watchdog-desync")
    assert f.ranks == [1]
    assert json.loads(json.dumps(res.to_dict()))["findings"][0]["rule"]


def test_doctor_failures_are_config_context_only_on_failed_runs(tmp_path: Path) -> None:
    b = _write_bundle(tmp_path)
    b.write_json("doctor.json", {"checks": [
        {"id": "host.shm", "area": "host", "status": "fail", "summary": "/dev/shm is 64 MiB",
         "fix": "docker run --ipc=host"},
        {"id": "gpu.nvml", "area": "gpu", "status": "fail", "summary": "no NVIDIA driver"},
        {"id": "nccl.env", "area": "nccl", "status": "ok", "summary": "fine"}]})
    res = diagnose([b.root])
    docs = [f for f in res.findings if f.rule == "doctor-check"]
    assert [f.category for f in docs] == ["shared-memory"]
    assert docs[0].confidence <= 0.5 and docs[0].fix == "docker run --ipc=host"
    assert res.findings[0].rule != "doctor-check"


def test_a_doctor_warning_never_outranks_a_crash_with_its_own_error(tmp_path: Path) -> None:
    # CI's collecting host runs a CPU-only torch: doctor warns; the bundle's rank still crashed
    # with its own exception, which stays the top finding (CI at 476b16d had the warning first)
    b = Bundle(tmp_path / "sm120kit-bundle-host-20261202T000000Z")
    rows = L.startup(2, 2) + [
        "(Worker_TP1 pid=401) ERROR 05-15 05:34:10 [multiproc_executor.py:527] Traceback (most "
        "recent call last):",
        "(Worker_TP1 pid=401) ERROR 05-15 05:34:10 [multiproc_executor.py:527] RuntimeError: "
        "rank 1: simulated failure in warmup"]
    b.write_text("logs/child.log", "\n".join(rows) + "\n")
    b.write_json("processes.json", {"401": {"label": L.worker(1, 2), "role": "worker", "rank": 1}})
    b.write_json("doctor.json", {"checks": [
        {"id": "cuda.torch", "area": "cuda", "status": "warn",
         "summary": "torch 2.13.0+cpu is a CPU-only build"}]})
    res = diagnose([b.root])
    assert res.findings[0].rule != "doctor-check", res.findings
    assert any(f.rule == "doctor-check" for f in res.findings)


def test_ras_json_counts_and_vllm_watchdog_dumps(tmp_path: Path) -> None:
    """RAS JSON (NCCL >= 2.28 ``SET FORMAT json``; a fake: no NCCL job here) with rank 2 one
    collective behind in both snapshots, and vLLM --watchdog-config faulthandler dumps instead
    of py-spy stacks."""
    b = Bundle(tmp_path / "sm120kit-bundle-h-20261202T000000Z")
    b.write_text("logs/child.log", "\n".join(L.startup(4, 1)) + "\n")

    def snap(counts: dict[int, int]) -> dict[str, Any]:
        return {"nccl_version": "2.30.7", "communicators": [{"hash": "0xabc", "size": 4, "ranks": [
            {"rank": r, "pid": 400 + r, "collective_counts": {"AllReduce": c, "AllGather": 7}}
            for r, c in counts.items()]}]}

    counts = {0: 6650, 1: 6650, 2: 6649, 3: 6650}
    b.write_text("ras/status-1.json", json.dumps(snap(counts)))
    b.write_text("ras/status-2.json", json.dumps(snap(counts)))
    for r in range(4):
        inner = ('  File "/v/vllm/distributed/device_communicators/pynccl.py", line 140 in all_reduce\n'
                 if r != 2 else
                 '  File "/v/triton/compiler/compiler.py", line 300 in compile\n')
        b.write_text(f"vllm-watchdog/VLLM_STACK_DUMP_for_worker_{r}_{400 + r}.log",
                     ">>> Call stack dump #1 at Wed Dec  2 10:00:00 2026 due to feed timeout\n"
                     "Thread 0x00007f0000000001 (most recent call first):\n" + inner +
                     '  File "/v/vllm/v1/executor/multiproc_executor.py", line 700 in worker_busy_loop\n')
    b.write_json("manifest.json", {"collectors": []})
    res = diagnose([b.root])
    rules = {f.rule: f for f in res.findings}
    assert rules["ras-state"].ranks == [2] and "unchanged" in rules["ras-state"].summary
    assert rules["stack-asymmetry"].ranks == [2]
    assert {s["rank"] for s in res.stalls["stacks"]} == {0, 1, 2, 3}


def test_attach_mode_bundle_reads_tail_json(tmp_path: Path) -> None:
    b = Bundle(tmp_path / "sm120kit-bundle-h-20261202T000001Z")
    tails = {"Worker_TP1_DCP1": L.startup(2, 2)[:1] + [
        "(Worker_TP1_DCP1 pid=401) Traceback (most recent call last):",
        f"(Worker_TP1_DCP1 pid=401) {L.DCP_LSE}"]}
    b.write_json("logs/tail.json", tails)
    b.write_json("manifest.json", {"collectors": []})
    res = diagnose([b.root])
    assert res.findings[0].rule == "dcp-unsupported"
    assert res.findings[0].evidence[0].source == "logs/tail.json:Worker_TP1_DCP1"
