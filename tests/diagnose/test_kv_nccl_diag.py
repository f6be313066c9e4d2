"""diagnose: kv_capacity / dcp-not-engaged from vLLM's KV lines in both line forms, and NCCL's
own 'NCCL DIAG' report (NCCL >= 2.31).

The GLM lines are the published GLM-5.2 numbers (tests/data/kv/README.md) in vLLM's format
strings; the NCCL DIAG lines are built from the format strings in libnccl.so.2 of the
nvidia-nccl-cu13 2.32.3 wheel (checked by test_nccl_diag_formats_in_the_real_library)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sm120kit.diagnose.engine import diagnose
from sm120kit.evidence.logs.nccl_diag import NcclDiag
from tests.support import releases

DATA = Path(__file__).resolve().parents[1] / "data" / "kv"


def _model(tmp_path: Path) -> Path:
    d = tmp_path / "models" / "GLM-5.2-504B-Nvidia"
    d.mkdir(parents=True)
    shutil.copy(DATA / "glm52_reap_nvfp4_config.json", d / "config.json")
    return d


def _log(model: str, dcp: int, avail: float, tokens: int, mml: int, conc: float,
         one_line: bool) -> str:
    pre = "(EngineCore_DP0 pid=4242) INFO 07-15 10:31:07 "
    kv = ([pre + f"[kv_cache_utils.py:1170] GPU KV cache size: {tokens:,} tokens, Maximum "
           f"concurrency for {mml:,} tokens per request: {conc:.2f}x"] if one_line else
          [pre + f"[kv_cache_utils.py:2146] GPU KV cache size: {tokens:,} tokens",
           pre + f"[kv_cache_utils.py:2148] Maximum concurrency for {mml:,} tokens per request: "
           f"{conc:.2f}x"])
    return "\n".join([
        "(APIServer pid=4100) INFO 07-15 10:20:01 [utils.py:253] non-default args: "
        f"{{'model_tag': '{model}', 'model': '{model}', 'max_model_len': {mml}, "
        f"'tensor_parallel_size': 4, 'decode_context_parallel_size': {dcp}, "
        "'enable_expert_parallel': True, 'kv_cache_dtype': 'fp8'}",
        pre + "[core.py:97] Initializing a V1 LLM engine (v0.25.1) with config: model='x'",
        pre + f"[gpu_worker.py:539] Available KV cache memory: {avail} GiB",
        *kv,
        "(APIServer pid=4100) INFO 07-15 10:33:40 [api_server.py:1000] Application startup "
        "complete.",
    ]) + "\n"


@pytest.mark.parametrize("one_line", [True, False])
def test_dcp_not_engaged_from_a_local_model_dir(tmp_path: Path, one_line: bool) -> None:
    model = _model(tmp_path)
    log = tmp_path / "serve.log"
    log.write_text(_log(str(model), 4, 8.25, 164_160, 250000, 0.66, one_line))
    res = diagnose([log], environ={"HOME": str(tmp_path)})
    kv = res.kv_capacity
    assert kv is not None and kv["engaged"] == "no" and kv["requested_dcp"] == 4
    assert kv["effective_dcp"] == pytest.approx(1.0, abs=0.05)
    f = next(f for f in res.findings if f.rule == "dcp-not-engaged")
    assert f.category == "dcp-not-engaged" and "did not engage" in f.summary
    assert any("GPU KV cache size" in e.text for e in f.evidence)


def test_config_option_and_engaged_run(tmp_path: Path) -> None:
    """The log names a hub id that is not in the local cache: --config supplies the model."""
    model = _model(tmp_path)
    log = tmp_path / "serve.log"
    log.write_text(_log("0xSero/GLM-5.2-504B-Nvidia", 4, 6.97, 554_759, 250000, 2.22, True))
    res = diagnose([log], environ={"HOME": str(tmp_path)})
    assert res.kv_capacity is not None and res.kv_capacity["engaged"] == "unknown"
    res = diagnose([log], config=model / "config.json", environ={"HOME": str(tmp_path)})
    assert res.kv_capacity is not None and res.kv_capacity["engaged"] == "yes"
    assert res.kv_capacity["effective_dcp"] == pytest.approx(4.0, abs=0.05)
    assert not [f for f in res.findings if f.rule == "dcp-not-engaged"]


def test_cli_config_and_json(tmp_path: Path) -> None:
    model = _model(tmp_path)
    log = tmp_path / "serve.log"
    log.write_text(_log("0xSero/GLM-5.2-504B-Nvidia", 4, 8.25, 164_160, 250000, 0.66, False))
    p = subprocess.run([sys.executable, "-m", "sm120kit", "diagnose", str(log), "--config",
                        str(model), "--json"], capture_output=True, text=True, timeout=60)
    d = json.loads(p.stdout)
    assert p.returncode == 1 and d["kv_capacity"]["engaged"] == "no"
    assert any(f["rule"] == "dcp-not-engaged" for f in d["findings"])
    p = subprocess.run([sys.executable, "-m", "sm120kit", "diagnose", str(log), "--config",
                        str(tmp_path / "nope")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "error: cannot read model config" in p.stderr


# --- NCCL DIAG ------------------------------------------------------------------------------
PAIR = ("srcRank=1 srcCudaDev=1 srcNvmlDev=1 dstRank=2 dstCudaDev=2 dstNvmlDev=2 path=P2P/IPC "
        "handle=cuMem")
DIAG_FAIL = [
    "gpu-box:52114 NCCL DIAG === NCCL Diagnostics ===",
    "gpu-box:52114 NCCL DIAG [OK]   net bw: skipped (single host or no network transport)",
    f"gpu-box:52114 NCCL DIAG [INFO] p2p: write mismatch {PAIR} expected=0x00000000deadbeef "
    "got=0x0000000000000000 verify=0x0000000000000000; check IOMMU/ACS settings",
    "gpu-box:52114 NCCL DIAG [INFO] p2p: only 10/12 GPU-to-GPU peer accesses passed verification",
    "gpu-box:52114 NCCL DIAG NCCL diagnostics completed in 41.7 ms across 4 ranks",
]
DIAG_OK = [
    "gpu-box:52114 NCCL DIAG === NCCL Diagnostics ===",
    "gpu-box:52114 NCCL DIAG [OK]   p2p: verified P2P access in both directions between every "
    "GPU pair (12 peer accesses)",
    "gpu-box:52114 NCCL DIAG NCCL diagnostics completed in 38.2 ms across 4 ranks",
]


def test_nccl_diag_reader() -> None:
    d = NcclDiag()
    for ln in DIAG_FAIL:
        assert d.feed(ln)
    assert not d.feed("gpu-box:52114:52200 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM")
    assert d.p2p_failed and (d.p2p_passed, d.p2p_total) == (10, 12)
    assert d.failures[0] == {"what": "write mismatch", "src_rank": 1, "src_dev": 1,
                             "dst_rank": 2, "dst_dev": 2, "path": "P2P/IPC"}
    assert (d.completed_ms, d.ranks, d.reports) == (41.7, 4, 1)
    assert "rank 1->2 via P2P/IPC" in d.summary()
    ok = NcclDiag()
    for ln in DIAG_OK:
        ok.feed(ln)
    assert not ok.p2p_failed and ok.p2p_ok == 12


def test_diagnose_names_the_failing_pair(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    log.write_text("(EngineCore_DP0 pid=4242) INFO 07-15 10:31:07 [core.py:97] Initializing a V1 "
                   "LLM engine (v0.25.1) with config: model='x'\n" + "\n".join(DIAG_FAIL) + "\n")
    res = diagnose([log])
    f = next(f for f in res.findings if f.rule == "nccl-diag-p2p")
    assert f.category == "p2p-transport" and "10/12" in f.summary and f.ranks == [1]
    assert res.nccl_diag is not None and res.nccl_diag["p2p_failed"]
    log.write_text("(EngineCore_DP0 pid=4242) INFO 07-15 10:31:07 [core.py:97] Initializing a V1 "
                   "LLM engine (v0.25.1) with config: model='x'\n" + "\n".join(DIAG_OK) + "\n")
    res = diagnose([log])
    assert not [f for f in res.findings if f.rule == "nccl-diag-p2p"]
    assert res.nccl_diag is not None and res.nccl_diag["p2p_ok"] == 12


@pytest.mark.network
@pytest.mark.slow
def test_nccl_diag_formats_in_the_real_library() -> None:
    """The variable names and the report lines we parse, in NCCL 2.32.3's libnccl.so.2."""
    whl = releases.wheel("nvidia-nccl-cu13", "2.32.3")
    with zipfile.ZipFile(whl) as z:
        name = next(n for n in z.namelist() if n.endswith("lib/libnccl.so.2"))
        blob = z.read(name)
    for s in (b"NCCL_RUN_DIAGNOSTICS", b"NCCL_RUN_RAS_DIAGNOSTICS",
              b"%s:%d NCCL DIAG === NCCL Diagnostics ===",
              b"p2p: only %llu/%llu GPU-to-GPU peer accesses passed verification",
              b"p2p: verified P2P access in both directions between every GPU pair "
              b"(%llu peer accesses)",
              b"NCCL diagnostics completed in %.1f ms across %d ranks",
              b"srcRank=%d srcCudaDev=%d srcNvmlDev=%d dstRank=%d dstCudaDev=%d dstNvmlDev=%d "
              b"path=%s handle=%s"):
        assert s in blob, s
    assert re.search(rb"p2p: write mismatch %s expected=", blob)
