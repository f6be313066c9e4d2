"""KV-capacity model and vLLM KV-line reader, calibrated on the published GLM-5.2 measurements.

Data: tests/data/kv/README.md (hermia-ai/glm-5.2-sm120-stock-vllm, vLLM 0.25.1, 4x RTX PRO 6000).
Log lines: the two-line form is quoted from LMCache issue #1739 (vLLM 0.11-era EngineCore log),
the one-line form from a public vLLM 0.2x CPU-backend log; the GLM lines are the published
numbers in vLLM's own format strings (kv_cache_utils.py / gpu_worker.py of the cached releases).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sm120kit.models import kv as kc
from sm120kit.patchset.release import release_tree

DATA = Path(__file__).resolve().parents[1] / "data" / "kv"
GLM = json.loads((DATA / "glm52_reap_nvfp4_config.json").read_text())

# (available GiB, DCP, max_model_len, published tokens)
PUBLISHED = [
    (8.25, 1, 131072, 164_160),
    (6.97, 4, 250000, 554_759),
    (6.05, 4, 250000, 481_576),
]

TWO_LINE = [  # LMCache issue #1739
    "(EngineCore_DP0 pid=1133552) INFO 10-03 16:22:17 [gpu_worker.py:298] Available KV cache "
    "memory: 6.51 GiB",
    "(EngineCore_DP0 pid=1133552) INFO 10-03 16:22:17 [kv_cache_utils.py:864] GPU KV cache size: "
    "42,656 tokens",
    "(EngineCore_DP0 pid=1133552) INFO 10-03 16:22:17 [kv_cache_utils.py:868] Maximum concurrency "
    "for 32,768 tokens per request: 1.30x",
]
ONE_LINE = ("INFO 09-06 20:23:33 [kv_cache_utils.py:2312] GPU KV cache size: 23,296 tokens, "
            "Maximum concurrency for 4,096 tokens per request: 5.69x")


def glm_log(avail: float, tokens: int, mml: int, conc: float, one_line: bool) -> list[str]:
    pre = "(EngineCore_DP0 pid=4242) INFO 07-15 10:31:07 "
    out = [pre + f"[gpu_worker.py:539] Available KV cache memory: {avail} GiB"]
    if one_line:
        out.append(pre + f"[kv_cache_utils.py:1170] GPU KV cache size: {tokens:,} tokens, "
                   f"Maximum concurrency for {mml:,} tokens per request: {conc:.2f}x")
    else:
        out.append(pre + f"[kv_cache_utils.py:2146] GPU KV cache size: {tokens:,} tokens")
        out.append(pre + f"[kv_cache_utils.py:2148] Maximum concurrency for {mml:,} tokens per "
                   f"request: {conc:.2f}x")
    return out


@pytest.mark.network  # a vLLM/FlashInfer release wheel (PyPI)
@pytest.mark.parametrize("version,one_line", [("0.25.1", False), ("0.34.0", True)])
def test_vllm_sources_print_the_formats_we_read(version: str, one_line: bool) -> None:
    """The format strings in the release wheels match what the reader parses (both forms)."""
    tree = release_tree("vllm", version)
    src = (tree / "vllm" / "v1" / "core" / "kv_cache_utils.py").read_text()
    assert "Maximum concurrency for %s tokens per request: %.2fx" in src
    assert ('KV cache size: %s tokens, "' in src) is one_line
    assert ('"GPU KV cache size: %s tokens"' in src) is (not one_line)
    worker = (tree / "vllm" / "v1" / "worker" / "gpu_worker.py").read_text()
    assert "Available KV cache memory: %s GiB" in worker


def test_glm52_density_counts_indexcache_layers() -> None:
    d = kc.density_from_config(GLM, kv_cache_dtype="fp8")
    assert (d.layers, d.row_bytes, d.indexer_layers, d.indexer_row_bytes) == (78, 656, 21, 132)
    assert d.bytes_per_token == 78 * 656 + 21 * 132
    # without IndexCache every layer would carry an indexer: 12 % fewer tokens than measured
    no_ic = kc.density_from_config({**GLM, "index_topk_freq": 1}, kv_cache_dtype="fp8")
    assert no_ic.indexer_layers == 78
    t, _ = no_ic.capacity(8.25 * kc.GIB, 1, 131072)
    assert t < 0.9 * 164_160


@pytest.mark.parametrize("avail,dcp,mml,published", PUBLISHED)
def test_model_matches_published_tokens(avail: float, dcp: int, mml: int, published: int) -> None:
    d = kc.density_from_config(GLM, kv_cache_dtype="fp8")
    tokens, _ = d.capacity(avail * kc.GIB, dcp, mml)
    # the log rounds memory to 0.01 GiB: the model is within that rounding (0.1 %)
    assert abs(tokens - published) / published < 0.002, tokens


def test_mtp_no_fit_figure_matches_vllm_error() -> None:
    """'To serve at least one request ... (250000), 3.19 GiB KV cache is needed' (MTP 3, DCP 4)."""
    d = kc.density_from_config(GLM, kv_cache_dtype="fp8", mtp_tokens=3)
    assert d.draft_layers == 1
    assert round(d.bytes_for_request(250000, 4) / kc.GIB, 2) == 3.19


def test_density_ratio_is_the_dcp_size() -> None:
    d = kc.density_from_config(GLM, kv_cache_dtype="fp8")
    one = kc.capacity_from_lines(kc.read_kv_lines(glm_log(8.25, 164_160, 131072, 1.25, False)),
                                 d, 1)
    four = kc.capacity_from_lines(kc.read_kv_lines(glm_log(6.97, 554_759, 250000, 2.22, True)),
                                  d, 4)
    assert one is not None and four is not None
    assert one.effective_dcp == pytest.approx(1.0, abs=0.01)
    assert four.effective_dcp == pytest.approx(4.0, abs=0.01)
    assert four.tokens_per_gib / one.tokens_per_gib == pytest.approx(4.0, abs=0.01)
    assert four.engaged == "yes" and four.max_concurrency == 2.22


@pytest.mark.parametrize("one_line", [True, False])
def test_dcp_not_engaged_in_both_line_forms(one_line: bool) -> None:
    """DCP 4 asked for, the log shows the DCP-1 density: the 'did not engage' case."""
    kv = kc.read_kv_lines(glm_log(8.25, 164_160, 250000, 0.66, one_line))
    assert kv.form == ("one-line" if one_line else "two-line")
    cap = kc.capacity_from_lines(kv, kc.density_from_config(GLM, kv_cache_dtype="fp8"), 4)
    assert cap is not None and cap.not_engaged
    assert cap.requested_dcp == 4 and cap.max_model_len == 250000
    assert set(cap.to_dict()) >= {"tokens", "available_gib", "tokens_per_gib",
                                  "dcp1_tokens_per_gib", "effective_dcp", "requested_dcp",
                                  "max_model_len", "max_concurrency"}


def test_public_log_lines_parse() -> None:
    two = kc.read_kv_lines(TWO_LINE)
    assert (two.available_gib, two.tokens, two.max_model_len, two.max_concurrency, two.form) == \
        (6.51, 42_656, 32_768, 1.30, "two-line")
    one = kc.read_kv_lines([ONE_LINE])
    assert (one.tokens, one.max_model_len, one.max_concurrency, one.form) == \
        (23_296, 4_096, 5.69, "one-line")
    # no config: numbers reported, verdict unknown (never "engaged")
    cap = kc.capacity_from_lines(two, None, 4)
    assert cap is not None and cap.engaged == "unknown" and cap.effective_dcp is None


def test_no_fit_error_line() -> None:
    line = ("ValueError: To serve at least one request with the model max seq len (250000), 3.19 "
            "GiB KV cache is needed, which is larger than the available KV cache memory (0.01 "
            "GiB). Based on the available memory, the estimated maximum model length is 256.")
    kv = kc.read_kv_lines(["Available KV cache memory: 0.01 GiB", line])
    assert (kv.needed_gib, kv.available_gib, kv.max_model_len) == (3.19, 0.01, 250000)
    cap = kc.capacity_from_lines(kv, None, 4)
    assert cap is not None and cap.tokens is None and "could not fit" in cap.note


def test_unsupported_models_say_why() -> None:
    with pytest.raises(kc.UnsupportedModel, match="num_hidden_layers"):
        kc.density_from_config({"model_type": "x"})
    with pytest.raises(kc.UnsupportedModel, match="fp8_ds_mla"):
        kc.density_from_config(GLM, kv_cache_dtype="bfloat16")
    with pytest.raises(kc.UnsupportedModel, match="MLA"):
        kc.density_from_config({"num_hidden_layers": 32, "num_key_value_heads": 8})


def test_indexcache_rule_matches_vllm_source(vllm_tree: Path) -> None:
    """The skip rule we implement is the one in the release's deepseek_v2.py."""
    src = (vllm_tree / "vllm" / "model_executor" / "models" / "deepseek_v2.py").read_text()
    assert re.search(r"max\(layer_id - _index_skip_topk_offset \+ 1, 0\) % _index_topk_freq", src)
    assert 'getattr(config, "index_skip_topk_offset", 2)' in src
    assert "head_dim=self.head_dim + self.head_dim // self.quant_block_size * 4" in src
