"""How many bytes of weights a checkpoint holds: the safetensors index / files when the model is
local, else an estimate from config.json (parameter count x bytes per parameter of its quantization).

The estimate covers DeepSeek-V3-style MLA MoE models (DeepSeek-V3/V3.2, GLM-5.x): per layer the
MLA projections (q_a, q_b, kv_a, kv_b, o), the sparse indexer (wq_b, wk, weights_proj) where the
layer builds one, the routed + shared experts (or the dense MLP for the first
``first_k_dense_replace`` layers), plus embeddings and LM head. Quantized checkpoints: NVFP4
(``modelopt`` ``NVFP4``/``modelopt_fp4``) = 4 bits + one fp8 scale per 16 values (0.5625 B) on
the experts, FP8 = 1 B on the experts, everything else in the checkpoint dtype (2 B).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sm120kit.models.kv import indexer_layer_ids, text_config


@dataclass(frozen=True)
class WeightSize:
    total_bytes: int
    draft_bytes: int          # one MTP layer (the draft), when the model has one
    how: str


def checkpoint_bytes(model_dir: str | Path) -> int | None:
    """Bytes of the local checkpoint: index metadata.total_size, else the .safetensors sizes."""
    d = Path(model_dir)
    idx = d / "model.safetensors.index.json"
    if idx.is_file():
        try:
            meta = json.loads(idx.read_text(encoding="utf-8")).get("metadata") or {}
            if int(meta.get("total_size") or 0) > 0:
                return int(meta["total_size"])
        except (OSError, ValueError, TypeError):
            pass
    total = 0
    for f in d.glob("*.safetensors"):
        try:
            total += f.stat().st_size
        except OSError:
            continue
    return total or None


def _expert_bytes_per_param(cfg: Mapping[str, Any]) -> tuple[float, str]:
    q = cfg.get("quantization_config") or {}
    method = str(q.get("quant_method") or "").lower()
    algo = str(q.get("quant_algo") or q.get("fmt") or "").lower()
    if "fp4" in algo or "fp4" in method or "nvfp4" in json.dumps(q).lower():
        return 0.5625, "NVFP4 experts (0.5625 B/param)"
    if "fp8" in method or "fp8" in algo or "e4m3" in algo:
        return 1.0, "FP8 experts (1 B/param)"
    return 2.0, "bf16 experts (2 B/param)"


def _layer_params(c: Mapping[str, Any], layer: int, has_indexer: bool) -> tuple[int, int]:
    """(dense params, expert params) of one decoder layer."""
    h = int(c.get("hidden_size") or 0)
    heads = int(c.get("num_attention_heads") or 0)
    q_lora = int(c.get("q_lora_rank") or 0)
    kv_lora = int(c.get("kv_lora_rank") or 0)
    rope = int(c.get("qk_rope_head_dim") or 0)
    nope = int(c.get("qk_nope_head_dim") or 0)
    v = int(c.get("v_head_dim") or 0)
    qk = nope + rope
    attn = (h * q_lora + q_lora * heads * qk) if q_lora else h * heads * qk
    attn += h * (kv_lora + rope) + kv_lora * heads * (nope + v) + heads * v * h
    if has_indexer:
        ih, ihd = int(c.get("index_n_heads") or 0), int(c.get("index_head_dim") or 0)
        attn += (q_lora or h) * ih * ihd + h * ihd + h * ih
    if layer < int(c.get("first_k_dense_replace") or 0):
        return attn + 3 * h * int(c.get("intermediate_size") or 0), 0
    inter = int(c.get("moe_intermediate_size") or 0)
    routed = int(c.get("n_routed_experts") or 0)
    shared = int(c.get("n_shared_experts") or 0)
    return attn + 3 * h * inter * shared + h * routed, 3 * h * inter * routed


def estimate_weights(cfg: Mapping[str, Any]) -> WeightSize | None:
    """Parameter-count estimate of the checkpoint bytes (None for a config it cannot size)."""
    c = text_config(cfg)
    n = c.get("num_hidden_layers")
    if not isinstance(n, int) or not c.get("hidden_size") or not c.get("kv_lora_rank"):
        return None
    idx = set(indexer_layer_ids(c, n))
    ebpp, how = _expert_bytes_per_param(c)
    dense = experts = 0
    for layer in range(n):
        d, e = _layer_params(c, layer, layer in idx)
        dense, experts = dense + d, experts + e
    dense += 2 * int(c.get("vocab_size") or 0) * int(c["hidden_size"])
    total = int(dense * 2 + experts * ebpp)
    draft = 0
    if int(c.get("num_nextn_predict_layers") or 0) > 0:
        d, e = _layer_params(c, n, "index_topk" in c)
        draft = int(d * 2 + e * ebpp)
    return WeightSize(total, draft, f"estimated from config.json: {dense / 1e9:.1f} B dense "
                      f"params x 2 B + {experts / 1e9:.1f} B expert params ({how})")


def weight_size(cfg: Mapping[str, Any], model_dir: str | Path | None) -> WeightSize | None:
    """The checkpoint's bytes from the local files when present, else the config estimate."""
    est = estimate_weights(cfg)
    if model_dir is not None:
        got = checkpoint_bytes(model_dir)
        if got:
            return WeightSize(got, est.draft_bytes if est else 0,
                              f"safetensors in {model_dir}: {got / 1e9:.1f} GB")
    return est
