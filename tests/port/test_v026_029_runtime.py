"""Run the patched 0.26-0.29 ``run_mixed_prefill_decode_warmup`` for real, on CPU.

vLLM 0.26.0 and 0.29.0 (the two warmup layouts of the family: the plain ``cdiv`` block counts and
the ``_warmup_block_counter`` rewrite) are imported from their PyPI trees, patched and upstream,
each in its own subprocess, with the runtime harness of ``tests/runtime`` (real ``VllmConfig`` /
``KVCacheConfig``, a minimal runner carrying only the attributes the function reads, recording
``execute_model`` / ``sample_tokens`` callbacks). For DCP = 1 the recorded scheduler outputs equal
upstream's; for DCP in {2, 4, 8} and block sizes 64/128 the synthetic decode request has the
planned length ``N * B`` (clamped) with consistent block allocations.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sm120kit.models.dcp import warmup_decode_prompt_len

# release trees (PyPI wheels); each case runs a patched vLLM warmup in subprocesses (75-90 s)
pytestmark = [pytest.mark.network, pytest.mark.slow]

RUNTIME = Path(__file__).resolve().parents[1] / "runtime"
WORKER = Path(__file__).resolve().parent / "rt_warmup_worker.py"
DECODE_ID = "_v2_mixed_warmup_decode_"


def _harness() -> Any:
    """``tests/runtime/conftest.py`` (release trees, worker env) loaded under its own name."""
    import importlib.util

    name = "sm120kit_tests_runtime_harness"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, RUNTIME / "conftest.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _run(release: str, kind: str, tmp: Path) -> list[dict[str, Any]]:
    rt = _harness()
    tree = rt.patched_tree(release) if kind == "patched" else rt.upstream_tree(release)
    proc = subprocess.run([sys.executable, str(WORKER)], env=rt.worker_env(tree), cwd=tmp,
                          capture_output=True, text=True, timeout=600)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("SM120KIT-RESULT ")), None)
    assert proc.returncode == 0 and line, proc.stderr[-3000:]
    result: list[dict[str, Any]] = json.loads(line.split(" ", 1)[1])
    return result


def _blocks(v: Any) -> list[list[int]]:
    return [list(g) for g in (v["__tuple__"] if isinstance(v, dict) else v)]


@pytest.mark.parametrize("release", ["0.26.0", "0.29.0"])
def test_patched_warmup_runs_with_dcp_prompt(release: str, tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    _harness()  # load it once, before the threads
    with ThreadPoolExecutor(2) as pool:  # the two subprocesses side by side (2 cores)
        fp = pool.submit(_run, release, "patched", tmp_path)
        fu = pool.submit(_run, release, "upstream", tmp_path)
        patched, upstream = fp.result(), fu.result()
    assert [c["case"] for c in patched] == [c["case"] for c in upstream]
    for p, u in zip(patched, upstream, strict=True):
        dcp, block, mml, mnbt, num_tokens = p["case"]
        assert p["returned"] is True and u["returned"] is True
        # the patch reads only real GPUModelRunner attributes; with DCP = 1 just the DCP size
        extra = {"vllm_config"} | ({"scheduler_config", "max_model_len", "speculative_config"}
                                   if dcp > 1 else set())
        assert set(p["reads"]) <= set(u["reads"]) | extra
        if dcp == 1:
            assert p["calls"] == u["calls"]  # DCP = 1: byte-for-byte upstream's scheduler outputs
            continue
        want = warmup_decode_prompt_len(dcp, block, max_model_len=mml,
                                        max_num_batched_tokens=mnbt)
        assert want == max(2, min(dcp * block, mml - 2, mnbt))
        first = p["calls"][0]
        (req,) = first["scheduled_new_reqs"]
        assert req["req_id"] == DECODE_ID
        assert req["prompt_token_ids"] == list(range(want))
        assert first["num_scheduled_tokens"] == {DECODE_ID: want}
        (prefill_blocks,) = _blocks(req["block_ids"])
        assert len(prefill_blocks) == -(-want // block)  # cdiv(L, B) blocks for the prompt
        mixed = next(c for c in p["calls"][1:] if "scheduled_cached_reqs" in c
                     and c["scheduled_cached_reqs"]["req_ids"] == [DECODE_ID])
        assert mixed["scheduled_cached_reqs"]["num_computed_tokens"] == [want]
        assert mixed["num_scheduled_tokens"][DECODE_ID] == 1
        assert mixed["total_num_scheduled_tokens"] == num_tokens
        # every block id handed out once, from 1 up (block 0 is the null block)
        ids: list[int] = list(prefill_blocks)
        for c in p["calls"]:
            for r in c.get("scheduled_new_reqs") or []:
                if r is not req:
                    ids += [b for g in _blocks(r["block_ids"]) for b in g]
            cached = c.get("scheduled_cached_reqs") or {}
            for nb in cached.get("new_block_ids") or []:
                if nb:
                    ids += [b for g in _blocks(nb) for b in g]
        assert sorted(ids) == list(range(1, len(ids) + 1))
