"""CLI exit codes and JSON schema (real subprocesses), runner isolation/timeouts, the
no-torch-import guarantee, --layout (real CPU torch) and --deep's smoke test on this GPU-less
machine (real torch: it must skip with the reason)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sm120kit.doctor import registry, run_doctor
from sm120kit.doctor.model import Outcome, ok
from sm120kit.doctor.render import render_markdown

CHECK_KEYS = {"id", "area", "tier", "status", "summary", "evidence", "fix", "duration_s"}


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sm120kit", "doctor", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_json_schema_and_exit_code() -> None:
    p = cli("--json")
    d = json.loads(p.stdout)
    assert d["tool"] == "sm120kit" and d["command"] == "doctor" and d["schema"] == 1
    assert p.returncode == d["exit_code"]
    assert d["tiers"] == [0, 1]
    assert set(d["counts"]) == {"ok", "warn", "fail", "skip", "error"}
    ids = [c["id"] for c in d["checks"]]
    assert len(ids) == len(set(ids)) >= 25
    for c in d["checks"]:
        assert set(c) == CHECK_KEYS and c["status"] in d["counts"]
        assert isinstance(c["evidence"], dict)
    # no GPU here: a clear "no NVIDIA driver" result, never a traceback
    nv = next(c for c in d["checks"] if c["id"] == "gpu.nvml")
    assert nv["status"] == "fail" and nv["summary"].startswith("no NVIDIA driver")
    assert p.returncode == 2 and "Traceback" not in p.stderr


def test_json_does_not_import_torch_or_rich() -> None:
    code = ("import io, sys, contextlib\n"
            "from sm120kit.cli import run\n"
            "buf = io.StringIO()\n"
            "with contextlib.redirect_stdout(buf):\n"
            "    rc = run(['doctor', '--json'])\n"
            "bad = [m for m in ('torch', 'rich', 'vllm', 'flashinfer') if m in sys.modules]\n"
            "print(rc, bad)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert out[1:] == ["[]"], out


def test_exit_codes_0_1_2(tmp_path: Path) -> None:
    assert cli("--only", "flashinfer.disable_jit", "--json").returncode == 0
    # a GPU-less machine without vLLM/FlashInfer: packages.installed warns
    p = cli("--only", "packages.installed", "--json")
    assert p.returncode == 1 and json.loads(p.stdout)["checks"][0]["status"] == "warn"
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"model_type": "glm_moe_dsa", "num_attention_heads": 64}))
    p = cli("--only", "launch.tp_dcp", "--config", str(cfg), "--json", "--",
            "vllm", "serve", "m", "-tp", "4", "-dcp", "8")
    assert p.returncode == 2
    assert json.loads(p.stdout)["checks"][0]["status"] == "fail"


def test_bad_input_is_one_line_user_error(tmp_path: Path) -> None:
    p = cli("--only", "no.such.check")
    assert p.returncode == 2 and p.stderr.startswith("error: unknown check 'no.such.check'")
    assert "Traceback" not in p.stderr
    p = cli("--config", str(tmp_path / "missing.json"))
    assert p.returncode == 2 and p.stderr.startswith("error: cannot read config")
    p = cli("--", "vllm", "serve", "m", "-tp", "eight")
    assert p.returncode == 2 and "error:" in p.stderr and "Traceback" not in p.stderr


def test_table_and_markdown_render() -> None:
    p = cli("--only", "host", "--only", "gpu.nvml")
    assert "host" in p.stdout and "doctor:" in p.stdout and "fix:" in p.stdout
    p = cli("--markdown", "--only", "gpu.nvml")
    assert p.stdout.startswith("## sm120kit doctor") and "| `gpu.nvml` | **FAIL** |" in p.stdout


def test_worst_first_grouping() -> None:
    rep = run_doctor(only=["host", "gpu.nvml", "flashinfer.disable_jit"])
    order = [c.id for c in rep.sorted_checks()]
    assert order[0] == "gpu.nvml"  # the failing area comes first
    md = render_markdown(rep)
    assert md.index("gpu.nvml") < md.index("flashinfer.disable_jit")


@pytest.fixture()
def temp_checks():  # type: ignore[no-untyped-def]
    added: list[str] = []

    def add(cid: str, fn, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
        registry.all_checks()
        registry.check(cid, tier=0, title=cid, timeout=timeout)(fn)
        added.append(cid)

    yield add
    for cid in added:
        registry._REGISTRY.pop(cid, None)


def test_exception_becomes_error_not_crash(temp_checks) -> None:  # type: ignore[no-untyped-def]
    def boom(ctx) -> Outcome:  # type: ignore[no-untyped-def]
        raise RuntimeError("kaput")

    def slow(ctx) -> Outcome:  # type: ignore[no-untyped-def]
        time.sleep(5)
        return ok("late")

    temp_checks("zz.boom", boom)
    temp_checks("zz.slow", slow, timeout=0.2)
    t0 = time.perf_counter()
    rep = run_doctor(only=["zz", "host.zfs_root"])
    assert time.perf_counter() - t0 < 3
    b, s = rep.get("zz.boom"), rep.get("zz.slow")
    assert b.status == "error" and "RuntimeError: kaput" in b.summary
    assert "kaput" in b.evidence["traceback_tail"]
    assert s.status == "error" and "did not finish within 0.2 s" in s.summary
    assert rep.get("host.zfs_root").status in ("ok", "warn", "skip")
    assert rep.exit_code >= 1


def test_layout_self_test_real_torch_cpu() -> None:
    rep = run_doctor(layout=True, only=["layout"])
    c = rep.get("layout.fp8_ds_mla")
    assert c.status == "ok", c
    rows = sorted((x["scale_format"], x["row_bytes"]) for x in c.evidence["cases"])
    assert rows == [("arbitrary_fp32", 528), ("arbitrary_fp32", 656), ("pow2_fp32", 528),
                    ("pow2_fp32", 656)]
    k = rep.get("layout.sm120_kernel")
    assert k.status == "skip" and "SM120" in k.summary


def test_deep_smoke_skips_without_cuda() -> None:
    rep = run_doctor(tiers=(0, 1, 2), only=["deep.p2p_smoke"])
    c = rep.get("deep.p2p_smoke")
    assert c.status == "skip" and "no CUDA device" in c.summary


def test_every_check_runs_here_without_error(tmp_path: Path) -> None:
    """All tiers, --layout, a launch and a --log on this real machine: no check may end in
    `error` (a crash or a timeout in a reader); skips and findings are fine."""
    log = tmp_path / "serve.log"
    log.write_text("INFO 09-06 20:23:33 [kv_cache_utils.py:2312] GPU KV cache size: 23,296 "
                   "tokens, Maximum concurrency for 4,096 tokens per request: 5.69x\n")
    rep = run_doctor(tiers=(0, 1, 2), layout=True, log_path=str(log),
                     launch_argv=["vllm", "serve", "zai-org/GLM-5", "-tp", "8", "-dcp", "8"])
    ids = {c.id for c in rep.checks}
    assert {c.id for c in registry.all_checks()} <= ids
    errors = [(c.id, c.summary) for c in rep.checks if c.status == "error"]
    assert not errors, errors
