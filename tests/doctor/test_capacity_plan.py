"""The capacity planner against the published GLM-5.2 figures (tests/data/kv/README.md), planning
from doctor's flags alone, and ``doctor --log`` (kv_capacity + dcp-not-engaged), through the real
CLI in subprocesses. The checkpoint is a model directory holding the real config.json fields and
a safetensors index whose total_size is the published 317.9 GB (weights are not needed)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sm120kit.doctor import run_doctor

DATA = Path(__file__).resolve().parents[1] / "data" / "kv"
RTX_PRO_6000_GIB = "94.97"  # "96 GB each (94.97 GiB usable)" in the published README


@pytest.fixture()
def glm_dir(tmp_path: Path) -> Path:
    d = tmp_path / "GLM-5.2-504B-Nvidia"
    d.mkdir()
    shutil.copy(DATA / "glm52_reap_nvfp4_config.json", d / "config.json")
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 317_900_000_000}, "weight_map": {}}))
    return d


def doctor(*args: str) -> tuple[int, dict]:
    p = subprocess.run([sys.executable, "-m", "sm120kit", "doctor", "--tier", "0", "--json",
                        *args], capture_output=True, text=True, timeout=120)
    assert p.stdout, p.stderr
    return p.returncode, json.loads(p.stdout)


def check(d: dict, cid: str) -> dict:
    return next(c for c in d["checks"] if c["id"] == cid)


def serve(model: Path, dcp: int, mml: int, *extra: str) -> list[str]:
    return ["--", "vllm", "serve", str(model), "-tp", "4", "--enable-expert-parallel",
            "--decode-context-parallel-size", str(dcp), "--kv-cache-dtype", "fp8",
            "--max-model-len", str(mml), "--gpu-memory-utilization", "0.92", *extra]


@pytest.mark.parametrize("dcp,mml,published_tokens,published_conc", [
    (1, 131072, 164_160, 1.25), (4, 250000, 554_759, 2.22)])
def test_planner_within_10_percent_of_published(glm_dir: Path, dcp: int, mml: int,
                                                published_tokens: int,
                                                published_conc: float) -> None:
    rc, d = doctor("--only", "launch.kv_capacity", "--gpu-mem-gib", RTX_PRO_6000_GIB,
                   *serve(glm_dir, dcp, mml))
    c = check(d, "launch.kv_capacity")
    assert c["status"] == "ok" and rc == 0, c
    ev = c["evidence"]
    assert ev["estimate"] is True and any("ESTIMATE" in h for h in ev["how"])
    assert abs(ev["tokens"] - published_tokens) / published_tokens < 0.10, ev["tokens"]
    assert abs(ev["max_concurrency"] - published_conc) / published_conc < 0.10
    assert "safetensors" in ev["weights_how"] and ev["requested_dcp"] == dcp


def test_planner_fails_when_one_request_does_not_fit_and_names_a_dcp(glm_dir: Path) -> None:
    """DCP 1 at 250K: the published 0.66x, 'not one request fits'."""
    rc, d = doctor("--only", "launch.kv_capacity", "--gpu-mem-gib", RTX_PRO_6000_GIB,
                   *serve(glm_dir, 1, 250000))
    c = check(d, "launch.kv_capacity")
    assert rc == 2 and c["status"] == "fail"
    assert "not one 250,000-token request fits" in c["summary"]
    assert c["evidence"]["dcp_that_fits"] in (2, 4)
    assert f"--decode-context-parallel-size {c['evidence']['dcp_that_fits']}" in c["fix"]


def test_planner_mtp_leaves_almost_nothing(glm_dir: Path) -> None:
    """MTP 3 + DCP 4 at 250K: the published run had 0.01 GiB left and could not start."""
    rc, d = doctor("--only", "launch.kv_capacity", "--gpu-mem-gib", RTX_PRO_6000_GIB,
                   *serve(glm_dir, 4, 250000, "--speculative-config",
                          '{"method": "mtp", "num_speculative_tokens": 3}'))
    c = check(d, "launch.kv_capacity")
    assert c["status"] == "fail" and "MTP (3 speculative tokens)" in c["summary"]
    assert c["evidence"]["kv_gib"] < 0.5 and c["evidence"]["density"]["draft_layers"] == 1


def test_flags_alone_build_a_plan_and_run_launch_checks(glm_dir: Path) -> None:
    rc, d = doctor("--tp", "8", "--dcp", "3")
    assert rc == 2
    assert check(d, "launch.tp_dcp")["status"] == "fail"
    assert "plan built from doctor's flags" in check(d, "launch.config")["summary"]
    assert check(d, "launch.kv_capacity")["status"] == "skip"  # no config: says so
    rc, d = doctor("--tp", "4", "--dcp", "4", "--max-model-len", "250000", "--gpu-mem-gib",
                   RTX_PRO_6000_GIB, "--config", str(glm_dir))
    assert check(d, "launch.tp_dcp")["status"] == "ok"
    assert check(d, "launch.kv_capacity")["evidence"]["requested_dcp"] == 4


def test_unusable_flags_say_why(tmp_path: Path) -> None:
    for args, msg in ((("--dcp", "0"), "Invalid value for '--dcp': 0 is not in the range x>=1"),
                      (("--max-model-len", "-5"), "--max-model-len must be >= 1"),
                      (("--gpu-mem-gib", "96"), "--gpu-mem-gib is only used by the capacity"),
                      (("--log", str(tmp_path / "missing.log")), "cannot read log")):
        p = subprocess.run([sys.executable, "-m", "sm120kit", "doctor", "--tier", "0", *args],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and msg in p.stderr, p.stderr  # --dcp: a usage error now


def _glm_log(model: Path, dcp: int, avail: float, tokens: int, mml: int, conc: float) -> str:
    pre = "(EngineCore_DP0 pid=4242) INFO 07-15 10:31:07 "
    return "\n".join([
        f"(APIServer pid=4100) INFO 07-15 10:20:01 [utils.py:253] non-default args: "
        f"{{'model_tag': '{model}', 'model': '{model}', 'trust_remote_code': True, "
        f"'max_model_len': {mml}, 'quantization': 'modelopt_fp4', 'tensor_parallel_size': 4, "
        f"'decode_context_parallel_size': {dcp}, 'enable_expert_parallel': True, "
        f"'gpu_memory_utilization': 0.92, 'kv_cache_dtype': 'fp8'}}",
        pre + f"[gpu_worker.py:539] Available KV cache memory: {avail} GiB",
        pre + f"[kv_cache_utils.py:2146] GPU KV cache size: {tokens:,} tokens",
        pre + f"[kv_cache_utils.py:2148] Maximum concurrency for {mml:,} tokens per request: "
        f"{conc:.2f}x",
        "(APIServer pid=4100) INFO 07-15 10:33:40 [api_server.py:1000] Application startup "
        "complete.",
    ]) + "\n"


def test_doctor_log_reports_dcp_not_engaged(glm_dir: Path, tmp_path: Path) -> None:
    """DCP 4 on the command line, the DCP-1 numbers in the log (the recipe's 'did not engage')."""
    log = tmp_path / "serve.log"
    log.write_text(_glm_log(glm_dir, 4, 8.25, 164_160, 250000, 0.66))
    rc, d = doctor("--log", str(log))
    kv = d["kv_capacity"]
    assert kv["requested_dcp"] == 4 and kv["engaged"] == "no"
    assert kv["effective_dcp"] == pytest.approx(1.0, abs=0.05)
    assert (kv["tokens"], kv["available_gib"], kv["max_model_len"], kv["max_concurrency"]) == \
        (164_160, 8.25, 250000, 0.66)
    c = check(d, "log.dcp_engaged")
    assert c["status"] == "fail" and c["evidence"]["finding"] == "dcp-not-engaged" and rc == 2


def test_doctor_log_engaged(glm_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    log.write_text(_glm_log(glm_dir, 4, 6.97, 554_759, 250000, 2.22))
    rep = run_doctor(tiers=(0,), log_path=str(log), only=["log"])
    assert rep.kv_capacity is not None and rep.kv_capacity["engaged"] == "yes"
    assert rep.kv_capacity["effective_dcp"] == pytest.approx(4.0, abs=0.05)
    assert rep.get("log.dcp_engaged").status == "ok"
