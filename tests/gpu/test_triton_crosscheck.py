"""vLLM's Triton ``triton_filter_and_convert_dcp_index`` vs sm120kit's reference conversion.

Runs the real helper from a real vLLM release's ``sparse_utils.py`` (JIT-compiled by this machine's
Triton on a CUDA GPU) on random block tables and top-k sets for DCP 1/2/4/8 and interleaves 1/16/64,
and requires identical slot sets and valid counts on every rank. Needs a GPU, Triton, and an
importable vLLM release tree: ``SM120KIT_VLLM_TREE`` (a directory holding ``vllm/`` and its
``vllm-X.dist-info/``, with vLLM's import chain on ``PYTHONPATH``; ``scripts/device_validate.sh
--prepare`` builds both) or an installed ``vllm``. Skips with the reason elsewhere.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

HERE = Path(__file__).parent


def _tree() -> str:
    env = os.environ.get("SM120KIT_VLLM_TREE")
    if env:
        return env
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.origin:
        pytest.skip("no vLLM tree: set SM120KIT_VLLM_TREE or install vllm")
    return str(Path(spec.origin).parent.parent)


def test_triton_dcp_index_matches_reference() -> None:
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    tree = _tree()
    proc = subprocess.run(
        [sys.executable, str(HERE / "crosscheck_dcp_index.py"), tree, "--cases", "48"],
        capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(HERE.parent.parent), tree, *filter(None, [os.environ.get("PYTHONPATH")])])},
    )
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        tail = (proc.stderr or "").strip().splitlines()[-3:]
        if any("ModuleNotFoundError" in line or "ImportError" in line for line in tail):
            pytest.skip(f"vLLM tree at {tree} does not import here: {tail[-1]}")
        raise AssertionError(f"cross-check crashed (rc={proc.returncode}):\n{proc.stderr[-3000:]}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["checks"] >= 48
    assert report["selected_slots"] > 0
    assert report["mismatches"] == [], report["mismatches"]
