"""Fixtures for doctor tests: real release trees, a patched vLLM copy, real model configs.

* FlashInfer trees are the unpacked PyPI wheels (``release_tree``) of 0.6.13 (no SM120 API),
  0.6.14 (first with it) and 0.7.2.post1.
* vLLM 0.33.0 is the unpacked PyPI wheel; the patched copy gets the real series from
  ``patches/v0.32-0.33`` applied with ``git apply``.
* Model configs carry the public Hugging Face ``config.json`` values that doctor reads, written
  from the published configs: ``zai-org/GLM-5`` (model_type ``glm_moe_dsa``: 64 heads,
  kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim 192, index_topk 2048) and
  ``deepseek-ai/DeepSeek-V3.2-Exp`` (``deepseek_v32``: 128 heads, kv_lora_rank 512, rope 64,
  nope 128, index_topk 2048, one MTP layer).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sm120kit.patchset.release import release_tree
from tests.support.paths import ROOT

GLM5_CONFIG: dict[str, Any] = {
    "architectures": ["GlmMoeDsaForCausalLM"],
    "model_type": "glm_moe_dsa",
    "hidden_size": 6144,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "kv_lora_rank": 512,
    "q_lora_rank": 2048,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 192,
    "v_head_dim": 256,
    "index_topk": 2048,
    "index_head_dim": 128,
    "index_n_heads": 32,
    "num_hidden_layers": 78,
    "num_nextn_predict_layers": 1,
    "torch_dtype": "bfloat16",
}

DSV32_CONFIG: dict[str, Any] = {
    "architectures": ["DeepseekV32ForCausalLM"],
    "model_type": "deepseek_v32",
    "hidden_size": 7168,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "index_topk": 2048,
    "index_head_dim": 128,
    "index_n_heads": 64,
    "num_hidden_layers": 61,
    "num_nextn_predict_layers": 1,
    "torch_dtype": "bfloat16",
}

REPO = ROOT


@pytest.fixture(scope="session")
def fi_trees() -> dict[str, Path]:
    return {v: release_tree("flashinfer-python", v) for v in ("0.6.13", "0.6.14", "0.7.2.post1")}


@pytest.fixture(scope="session")
def vllm_tree() -> Path:
    return release_tree("vllm", "0.33.0")


@pytest.fixture(scope="session")
def vllm_patched(tmp_path_factory: pytest.TempPathFactory, vllm_tree: Path) -> Path:
    """A copy of vLLM 0.33.0 with the real series (variant v0.32-0.33) applied by git apply."""
    series = REPO / "patches" / "v0.32-0.33"
    patches = sorted(series.glob("*.patch"))
    if not patches:
        pytest.fail(f"no patch series in {series}")
    dest = tmp_path_factory.mktemp("vllm-patched") / "tree"
    shutil.copytree(vllm_tree, dest, ignore=shutil.ignore_patterns("*.lock", ".complete"))
    for p in patches:
        subprocess.run(["git", "apply", str(p)], cwd=dest, check=True, capture_output=True,
                       env={**os.environ, "GIT_CEILING_DIRECTORIES": str(dest.parent)})
    return dest


@pytest.fixture()
def glm5_config() -> dict[str, Any]:
    return dict(GLM5_CONFIG)


@pytest.fixture()
def dsv32_config() -> dict[str, Any]:
    return dict(DSV32_CONFIG)


@pytest.fixture()
def model_dir(tmp_path: Path):  # type: ignore[no-untyped-def]
    def make(cfg: dict[str, Any], name: str = "model") -> Path:
        d = tmp_path / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(cfg))
        return d

    return make
