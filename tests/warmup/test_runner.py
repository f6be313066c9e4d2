"""The multi-rank warmup run: real processes, real gloo collectives, real fp8_ds_mla caches.

Every test here starts the real launcher and N forked ranks on this machine's CPU. The only
thing not exercised is the FlashInfer SM120 kernel (``test_flashinfer_backend_on_sm120``, which
needs the GPU and skips elsewhere).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from sm120kit.errors import UserError
from sm120kit.warmup.config import RunConfig
from sm120kit.warmup.runner import run_warmup
from tests.support import sigint_default


def _gone(pids: list[int]) -> bool:
    """True when none of ``pids`` is a live (non-zombie) process."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        alive = []
        for p in pids:
            try:
                if psutil.Process(p).status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        if not alive:
            return True
        time.sleep(0.1)
    return False


def _tree(root: int) -> tuple[list[psutil.Process], list[psutil.Process]]:
    """(launcher, ranks) below the CLI process ``root`` (this test's processes only)."""
    try:
        kids = psutil.Process(root).children(recursive=True)
    except psutil.NoSuchProcess:
        return [], []
    launcher, ranks = [], []
    for p in kids:
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if "sm120kit.warmup.launcher" in cmd or "warmup_launcher" in cmd:
            launcher.append(p)
        elif "sm120kit::warmup_DCP" in cmd:
            ranks.append(p)
    return launcher, ranks


def _wait_tree(root: int, n: int) -> tuple[list[psutil.Process], list[psutil.Process]]:
    deadline = time.monotonic() + 60
    launcher, ranks = [], []
    while time.monotonic() < deadline and (len(ranks) < n or not launcher):
        time.sleep(0.2)
        launcher, ranks = _tree(root)
    assert len(ranks) == n and launcher
    return launcher, ranks


def _cli(*args: str, timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sm120kit", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )


@pytest.mark.parametrize("dcp", [1, 2, 4, 8])
def test_glm5_shapes_pass(dcp: int) -> None:
    """GLM-5-like decode (kv_lora_rank 512, rope 64, top-k 2048, 8 heads/rank), fixed plan."""
    res = run_warmup(RunConfig(dcp=dcp, stall_timeout=60))
    assert res.status == "ok" and res.exit_code == 0, res.message
    assert set(res.errors) == {"ag_rs", "a2a"}
    for e in res.errors.values():
        assert e["max_abs"] <= 1e-4 and e["empty_rows_match"]
    assert res.shapes["q_gathered"] == [1, 8 * dcp, 576]
    assert res.shapes["topk"] == [1, 2048]
    assert res.shapes["merged_out"] == [1, 8, 512]
    assert res.shapes["kv_cache_pages"][1:] == [64, 656]
    # the fixed plan: every rank holds a full block of the N*64-token prompt
    expected = [65] + [64] * (dcp - 1) if dcp > 1 else [3]
    assert [sum(r["local_kv_tokens"]) for r in res.ranks] == expected
    assert res.zero_local_kv_ranks == []
    assert _gone([r["pid"] for r in res.ranks])


def test_unpatched_plan_reports_zero_local_ranks() -> None:
    res = run_warmup(RunConfig(dcp=8, plan="unpatched", stall_timeout=60))
    assert res.passed and res.exit_code == 1
    assert res.zero_local_kv_ranks == [3, 4, 5, 6, 7]
    assert res.work_per_rank == [1, 1, 1, 0, 0, 0, 0, 0] and res.asymmetric
    assert res.zero_valid_rows == {str(r): [0] for r in range(3, 8)}
    assert res.plan["unpatched"]["zero_local_kv_ranks"] == [3, 4, 5, 6, 7]


@pytest.mark.parametrize("interleave", [1, 64])
def test_interleave_with_long_context(interleave: int) -> None:
    """4096-token context: top-k picks a random half, some ranks own rows with no selection."""
    cfg = RunConfig(dcp=4, interleave=interleave, seq_len=4096, batch=2, stall_timeout=60)
    res = run_warmup(cfg)
    assert res.passed, res.errors
    assert sum(res.work_per_rank) == 2 * 2048
    assert [sum(r["local_kv_tokens"]) for r in res.ranks] == [2 * 1024] * 4


def test_some_ranks_own_no_selected_tokens_interleave() -> None:
    """I = 64 with a 70-token context: ranks 2, 3 own nothing, rank 1 only 6 tokens."""
    res = run_warmup(RunConfig(dcp=4, interleave=64, seq_len=70, stall_timeout=60))
    assert res.passed and res.exit_code == 1
    assert res.zero_local_kv_ranks == [2, 3]
    assert res.work_per_rank == [64, 6, 0, 0]


def test_mtp_batch_base_e_pow2_single_merge() -> None:
    cfg = RunConfig(
        dcp=2, batch=3, mtp=2, lse_base="e", scale_format="pow2_fp32", merge="a2a",
        stall_timeout=60,
    )  # fmt: skip
    res = run_warmup(cfg)
    assert res.passed and list(res.errors) == ["a2a"]
    assert res.shapes["topk"] == [9, 2048]
    assert res.config["prompt_len"] == 128 and res.config["kv_len"] == 131


def test_nope_rows() -> None:
    res = run_warmup(RunConfig(dcp=2, rope_dim=0, heads_per_rank=4, stall_timeout=60))
    assert res.passed
    assert res.shapes["kv_cache_pages"][2] == 528 and res.shapes["q_gathered"][2] == 512


def test_bad_input_is_one_line_user_error() -> None:
    for cfg in (
        RunConfig(dcp=2, interleave=48),
        RunConfig(dcp=2, topk=100),
        RunConfig(dcp=32, heads_per_rank=8),
        RunConfig(dcp=2, inject_stall=(5, "merge")),
        RunConfig(dcp=2, backend="flashinfer"),
    ):
        with pytest.raises(UserError):
            run_warmup(cfg)
    r = _cli("warmup", "run", "--dcp", "2", "--inject-stall", "x:merge")
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "hint:" in r.stderr


@pytest.mark.parametrize("rank,phase", [(2, "convert"), (1, "merge"), (3, "init")])
def test_inject_stall_detected_and_cleaned_up(rank: int, phase: str, tmp_path: Path) -> None:
    """The stalled rank sleeps before its phase's collective; the others really block in it."""
    timeout = 3.0
    t0 = time.monotonic()
    r = _cli(
        "warmup", "run", "--dcp", "4", "--inject-stall", f"{rank}:{phase}",
        "--stall-timeout", str(timeout), "--json",
    )  # fmt: skip
    elapsed = time.monotonic() - t0
    assert r.returncode == 2, r.stderr
    d = json.loads(r.stdout)
    assert d["status"] == "stall"
    st = d["stall"]
    assert st["suspects"] == [rank]
    assert timeout <= st["silent_for_s"] <= timeout + 2.0
    assert f"rank {rank}" in d["message"] and f"phase {phase}" in d["message"]
    rows = {row["rank"]: row for row in st["ranks"]}
    assert rows[rank]["phase"] == phase and rows[rank]["collective"] is None
    for other in set(rows) - {rank}:
        assert rows[other]["collective"] is not None  # blocked inside a collective
    assert f"(Warmup_DCP{rank} pid={rows[rank]['pid']}) inject-stall" in r.stderr
    assert elapsed < 60
    assert _gone([row["pid"] for row in st["ranks"]] + [d["launcher_pid"]])


def test_stall_bundle_handed_to_collect(tmp_path: Path) -> None:
    res = run_warmup(
        RunConfig(
            dcp=2,
            inject_stall=(1, "attend"),
            stall_timeout=2,
            bundle_dir=str(tmp_path),
            bundle_deadline=15,
        )  # fmt: skip
    )
    assert res.status == "stall" and res.stall is not None and res.stall.suspects == [1]
    assert res.bundle_error is None and res.bundle is not None
    assert Path(res.bundle).exists()
    manifest = json.loads((Path(res.bundle.removesuffix(".tar.gz")) / "manifest.json").read_text())
    assert "rank 1" in manifest["reason"]
    assert _gone([row["pid"] for row in res.stall.ranks] + [res.launcher_pid])


def test_ctrl_c_kills_everything() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "sm120kit", "warmup", "run", "--dcp", "2",
         "--inject-stall", "0:merge", "--stall-timeout", "300"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=sigint_default,  # Ctrl-C reaches it even when pytest runs with SIGINT ignored
    )  # fmt: skip
    try:
        launcher, ranks = _wait_tree(proc.pid, 2)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert _gone([p.pid for p in ranks + launcher])


def test_supervisor_killed_ranks_exit() -> None:
    """SIGKILL of the supervising CLI (no cleanup code runs): the ranks end themselves."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sm120kit", "warmup", "run", "--dcp", "2",
         "--inject-stall", "1:convert", "--stall-timeout", "300"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        launcher, ranks = _wait_tree(proc.pid, 2)
    finally:
        proc.kill()
        proc.wait()
    assert _gone([p.pid for p in ranks + launcher])


def test_cli_json_run_and_plan() -> None:
    r = _cli("warmup", "run", "--dcp", "2", "--merge", "ag_rs", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["tool"] == "sm120kit" and d["command"] == "warmup run"
    assert d["passed"] and set(d["timings"]["phase_max_s"]) >= {"init", "attend", "merge"}
    assert "(Warmup_DCP0 pid=" in r.stderr
    r = _cli(
        "warmup", "plan", "--json", "--", "vllm", "serve", "m", "-dcp", "8", "--block-size", "64"
    )
    assert r.returncode == 0
    d = json.loads(r.stdout)
    assert d["fixed_prompt_len"] == 512 and d["unpatched"]["zero_local_kv_ranks"] == [3, 4, 5, 6, 7]
    r = _cli("warmup", "plan", "--dcp", "4", "--max-model-len", "3")
    assert r.returncode == 1  # clamped to 2 tokens: rank 3 has no local KV
    assert "zero" in r.stdout.lower() or "without local KV" in r.stdout
    r = _cli("warmup", "plan")
    assert r.returncode == 2 and r.stderr.startswith("error: no DCP size")


def test_torchrun_mode() -> None:
    import socket

    env = dict(os.environ, OMP_NUM_THREADS="1")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--master-port", port, "-m", "sm120kit", "warmup", "run", "--json"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout)
    assert d["passed"] and len(d["ranks"]) == 2


def test_flashinfer_refusals_off_sm120() -> None:
    """The refusal logic itself; the API check runs on the FlashInfer-signature stand-in."""
    from sm120kit.warmup import fi_backend
    from sm120kit.warmup.reference import trtllm_batch_decode_with_kv_cache_mla_ref

    with pytest.raises(UserError, match="--device cuda"):
        fi_backend.check_flashinfer_backend("cpu", 2)
    missing, has_base = fi_backend.check_signature(trtllm_batch_decode_with_kv_cache_mla_ref)
    assert missing == set() and has_base

    def old_api(query, kv_cache, workspace_buffer, qk_nope_head_dim, kv_lora_rank,
                qk_rope_head_dim, block_tables, seq_lens, max_seq_len, out=None):  # fmt: skip
        return None

    missing, has_base = fi_backend.check_signature(old_api)
    assert "sparse_mla_top_k" in missing and "return_lse" in missing and not has_base
    r = _cli("warmup", "run", "--dcp", "2", "--backend", "flashinfer", "--device", "cuda")
    assert r.returncode == 2 and r.stderr.startswith("error: ")


@pytest.mark.sm120
def test_flashinfer_backend_on_sm120(tmp_path: Path) -> None:
    import torch

    n = min(2, torch.cuda.device_count())
    cache = tmp_path / "autotune.json"
    res = run_warmup(
        RunConfig(dcp=n, backend="flashinfer", device="cuda", autotune_cache=str(cache))
    )
    assert res.passed, (res.message, res.errors)
    assert res.ranks[0]["process_group"] == "nccl"


@pytest.mark.gpu
def test_cuda_reference_with_nccl() -> None:
    """The reference backend on CUDA tensors with NCCL collectives (one GPU per rank)."""
    import torch

    n = min(4, torch.cuda.device_count())
    res = run_warmup(RunConfig(dcp=n, device="cuda", stall_timeout=120))
    assert res.passed, (res.message, res.errors)
    assert all(r["process_group"] == "nccl" for r in res.ranks)
    assert all(r["device"].startswith("cuda") for r in res.ranks)


@pytest.mark.gpu
@pytest.mark.parametrize("dcp", [2, 4, 8])
def test_cuda_reference_gloo_ranks_share_gpus(dcp: int) -> None:
    """Several DCP ranks compute on CUDA tensors on one GPU; the collectives run over gloo on
    host copies (NCCL refuses two ranks on one device)."""
    res = run_warmup(RunConfig(dcp=dcp, device="cuda", dist_backend="gloo", stall_timeout=120))
    assert res.passed, (res.message, res.errors)
    assert all(r["process_group"] == "gloo" for r in res.ranks)
    assert all(r["device"].startswith("cuda") for r in res.ranks)


def test_gloo_dist_backend_on_cpu_is_the_default_path() -> None:
    """--dist-backend gloo on CPU is the plain gloo run; nccl without cuda is refused."""
    res = run_warmup(RunConfig(dcp=2, dist_backend="gloo", batch=1))
    assert res.passed, (res.message, res.errors)
    with pytest.raises(UserError, match="needs --device cuda"):
        RunConfig(dcp=2, dist_backend="nccl").validate()


def test_rank_killed_mid_run_is_reported_at_once() -> None:
    """SIGKILL of one rank (no error report from it): the run stops long before the stall
    timeout and names that rank."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sm120kit", "warmup", "run", "--dcp", "3", "--json",
         "--inject-stall", "0:merge", "--stall-timeout", "300"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        launcher, ranks = _wait_tree(proc.pid, 3)
        victim = next(p for p in ranks if "warmup_DCP2" in " ".join(p.cmdline()))
        time.sleep(0.5)
        t0 = time.monotonic()
        victim.kill()
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, err
    d = json.loads(out)
    assert d["status"] == "error" and "rank 2" in d["message"] and "died" in d["message"]
    assert took < 30
    assert _gone([p.pid for p in ranks + launcher])


def test_stall_bundle_without_py_spy_names_the_stalled_rank(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 12: a stall bundle collected with no stacks (py-spy missing) is never an
    all-clear; diagnose (and the bundle's own verdict) name the stalled rank and its phase from
    the stall record. py-spy is made unavailable by hiding it from the collector."""
    from sm120kit.cli.compose import bundle_hooks
    from sm120kit.diagnose.engine import diagnose
    from sm120kit.evidence import stacks

    monkeypatch.setattr(stacks, "py_spy_path", lambda: None)
    res = run_warmup(RunConfig(dcp=2, inject_stall=(1, "convert"), stall_timeout=2,
                               bundle_dir=str(tmp_path), bundle_deadline=15),
                      hooks=bundle_hooks())  # composed as the CLI composes it
    assert res.status == "stall" and res.bundle is not None
    d = diagnose([res.bundle])
    assert d.exit_code == 1
    top = d.findings[0]
    assert top.rule == "bundle-stall" and top.ranks == [1], [f.summary for f in d.findings]
    assert "rank 1" in top.summary and "phase convert" in top.summary
    assert "rank 1" in d.verdict and d.state == "stalled"
    summary = (Path(res.bundle.removesuffix(".tar.gz")) / "summary.md").read_text()
    assert "stopped in phase convert" in summary.split("## Verdict", 1)[1].split("##", 1)[0]
    assert _gone([row["pid"] for row in res.stall.ranks] + [res.launcher_pid])


def test_torchrun_stall_ends_each_rank_through_the_watchdog_guard() -> None:
    """Under torchrun there is no supervisor process: a rank's guard (the one watchdog) ends it
    with exit 2 and says where it stopped; rank 1 sleeps before convert's collective, rank 0
    really blocks inside it."""
    import socket

    env = dict(os.environ, OMP_NUM_THREADS="1")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--master-port", port, "-m", "sm120kit", "warmup", "run", "--json",
         "--inject-stall", "1:convert", "--stall-timeout", "2"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert r.returncode != 0
    assert time.monotonic() - t0 < 90
    err = r.stderr
    assert "(Warmup_DCP1 pid=" in err and "inject-stall: stopping before" in err
    # whichever rank's guard fires first ends the job (torchrun then stops the other): each
    # guard line says where its rank sits -- rank 1 (the suspect) outside any collective, rank 0
    # inside the one rank 1 never entered
    fired = re.findall(r"\(Warmup_DCP(\d) pid=\d+\) stall: no progress for [\d.]+s "
                       r"\(limit 2s\) in phase convert, (.*)", err)
    assert fired, err[-3000:]
    for rank, where in fired:
        assert where == "outside any collective" if rank == "1" else where.startswith(
            "waiting in "), (rank, where)
    assert re.search(r"exitcode\s*:\s*2\b", err), err[-2000:]  # torchrun's failure summary
