"""KV-cache capacity: vLLM's KV log lines, a per-token density model from config.json, and the
effective DCP factor that says whether decode context parallelism engaged.

What vLLM prints (verified in the release sources, vllm-0.24.0 … 0.34.0):

* ``Available KV cache memory: X GiB`` (``v1/worker/gpu_worker.py``, every release);
* 0.24–0.27: ``GPU KV cache size: N tokens`` and, on the next line, ``Maximum concurrency for
  L tokens per request: C x`` (``v1/core/kv_cache_utils.py``);
* 0.28+: one line, ``GPU KV cache size: N tokens, Maximum concurrency for L tokens per request:
  Cx`` (``update_kv_cache_capacity``; ``GPU + host`` with HiSparse);
* the no-fit error ``To serve at least one request with the model max seq len (L), X GiB KV
  cache is needed, which is larger than the available KV cache memory (Y GiB)``.

How vLLM turns bytes into those numbers (same sources): all attention layers of a sparse-MLA
model share one KV group (``UniformTypeKVCacheSpecs``: the page is the *sum* of every layer's
page), ``num_blocks = available // (block_size x bytes_per_token)``, a request at max_model_len
needs ``cdiv(cdiv(L, dcp), block_size)`` blocks (``FullAttentionSpec.max_memory_usage_bytes``:
each DCP rank stores 1/dcp of the tokens), ``max_concurrency = num_blocks / blocks_per_request``
and ``tokens = int(max_concurrency x L)``. So DCP multiplies the tokens per GiB by the DCP size.

Bytes per token per rank:

* main MLA layers: the ``fp8_ds_mla`` row, 656 bytes (``MLAAttentionSpec.real_page_size_bytes``;
  the SM120 sparse backend promotes ``auto|fp8|fp8_e4m3`` to it), else
  ``(kv_lora_rank + qk_rope_head_dim) x dtype bytes``;
* the sparse indexer's K cache, on layers that build an indexer: ``index_head_dim +
  index_head_dim // 128 x 4`` bytes (uint8: fp8 values + one fp32 scale per 128,
  ``DeepseekV32IndexerCache``). With IndexCache (``index_topk_freq`` > 1) only some layers build
  one: layer ``l`` skips when ``max(l - offset + 1, 0) % freq != 0`` (``offset`` =
  ``index_skip_topk_offset``, default 2) or, with ``index_topk_pattern``, where it says ``S``
  (``DeepseekV2MLAAttention.__init__``). GLM-5.2 (78 layers, freq 4, offset 3): 21 indexers;
* an MTP draft adds its ``num_nextn_predict_layers`` layers to the same group, each with an
  indexer (MTP layers always build one).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from sm120kit.models.constants import DEFAULT_BLOCK_SIZE

GIB = 1 << 30
FP8_DS_MLA_ROW = 656            # bytes/token/layer of the fp8_ds_mla row (V3.2 / GLM-5 layout)
INDEXER_QUANT_BLOCK = 128       # one fp32 scale per 128 fp8 values in the indexer K cache
_FP8_DS_PROMOTED = {"auto", "fp8", "fp8_e4m3", "fp8_ds_mla"}
ENGAGED_TOLERANCE = 0.15        # effective DCP within 15 % of 1 = "not engaged"


# --- the density model --------------------------------------------------------------------------
@dataclass(frozen=True)
class KvDensity:
    """Bytes of KV per token on one rank at DCP 1, and how they were counted."""

    layers: int
    row_bytes: int
    indexer_layers: int
    indexer_row_bytes: int
    draft_layers: int
    block_size: int
    kv_format: str
    how: str

    @property
    def bytes_per_token(self) -> int:
        draft = self.draft_layers * (self.row_bytes + (self.indexer_row_bytes
                                                       if self.indexer_row_bytes else 0))
        return self.layers * self.row_bytes + self.indexer_layers * self.indexer_row_bytes + draft

    @property
    def page_bytes(self) -> int:
        return self.block_size * self.bytes_per_token

    def tokens_per_gib(self, dcp: int = 1) -> float:
        return GIB * max(1, dcp) / self.bytes_per_token

    def capacity(self, available_bytes: float, dcp: int, max_model_len: int) -> tuple[int, float]:
        """``(tokens, max_concurrency)`` as vLLM computes them from the available bytes."""
        num_blocks = int(available_bytes // self.page_bytes)
        per_request = math.ceil(math.ceil(max_model_len / max(1, dcp)) / self.block_size)
        conc = num_blocks / per_request if per_request else 0.0
        return int(conc * max_model_len), conc

    def bytes_for_request(self, max_model_len: int, dcp: int) -> int:
        """KV bytes one request at max_model_len needs on one rank (vLLM's no-fit figure)."""
        per_request = math.ceil(math.ceil(max_model_len / max(1, dcp)) / self.block_size)
        return per_request * self.page_bytes

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["bytes_per_token"] = self.bytes_per_token
        d["dcp1_tokens_per_gib"] = round(self.tokens_per_gib(1), 1)
        return d


class UnsupportedModel(ValueError):
    """The config is not a model whose KV rows this module knows (said why)."""


def indexer_layer_ids(cfg: Mapping[str, Any], n_layers: int) -> list[int]:
    """Backbone layers that build a sparse indexer (vLLM's IndexCache rule)."""
    if "index_topk" not in cfg:
        return []
    freq = int(cfg.get("index_topk_freq") or 1)
    offset = int(cfg.get("index_skip_topk_offset", 2))
    pattern = cfg.get("index_topk_pattern")
    out = []
    for layer in range(n_layers):
        if pattern is None:
            skip = max(layer - offset + 1, 0) % max(1, freq) != 0
        elif 0 <= layer < len(pattern):
            skip = pattern[layer] == "S"
        else:
            skip = False
        if not skip:
            out.append(layer)
    return out


def text_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    inner = cfg.get("text_config")
    return {**cfg, **inner} if isinstance(inner, dict) else dict(cfg)


def density_from_config(
    cfg: Mapping[str, Any], *, kv_cache_dtype: str | None = "auto", block_size: int | None = None,
    mtp_tokens: int = 0,
) -> KvDensity:
    """The per-token KV density of an MLA model from its config.json (raises UnsupportedModel)."""
    c = text_config(cfg)
    n = c.get("num_hidden_layers")
    if not isinstance(n, int) or n < 1:
        raise UnsupportedModel("config.json has no num_hidden_layers")
    if c.get("model_type") in ("deepseek_v4",) or "compress_ratios" in c:
        raise UnsupportedModel("DeepSeek-V4 compressed KV (584-byte rows, per-layer compression) "
                               "is not modelled")
    dtype = (kv_cache_dtype or "auto").lower()
    sparse = "index_topk" in c
    how: list[str] = []
    if sparse:
        if dtype not in _FP8_DS_PROMOTED:
            raise UnsupportedModel(f"--kv-cache-dtype {dtype} is not supported by the SM120 "
                                   "sparse-MLA backend (fp8_ds_mla only)")
        row, fmt = FP8_DS_MLA_ROW, "fp8_ds_mla"
        how.append(f"{n} MLA layers x {row} B (fp8_ds_mla row)")
    elif "kv_lora_rank" in c:
        width = int(c["kv_lora_rank"]) + int(c.get("qk_rope_head_dim") or 0)
        nbytes = 1 if dtype.startswith("fp8") else 2
        row, fmt = width * nbytes, ("fp8" if nbytes == 1 else "bf16")
        how.append(f"{n} MLA layers x {row} B ({width} x {nbytes} B)")
    else:
        raise UnsupportedModel("not an MLA model (no kv_lora_rank): only MLA KV rows are modelled")
    idx_ids = indexer_layer_ids(c, n)
    idx_row = 0
    if sparse:
        head = int(c.get("index_head_dim") or 128)
        idx_row = head + head // INDEXER_QUANT_BLOCK * 4
        how.append(f"{len(idx_ids)} indexer caches x {idx_row} B"
                   + (f" (IndexCache: index_topk_freq {c.get('index_topk_freq')})"
                      if len(idx_ids) < n else ""))
    draft = int(c.get("num_nextn_predict_layers") or 0) if mtp_tokens > 0 else 0
    if mtp_tokens > 0 and draft == 0:
        draft = 1
    if draft:
        how.append(f"{draft} MTP draft layer(s) with their KV")
    bs = int(block_size or DEFAULT_BLOCK_SIZE)
    return KvDensity(layers=n, row_bytes=row, indexer_layers=len(idx_ids),
                     indexer_row_bytes=idx_row, draft_layers=draft, block_size=bs,
                     kv_format=fmt, how="; ".join(how))


# --- vLLM's KV lines -----------------------------------------------------------------------------
_AVAIL = re.compile(r"Available KV cache memory: (?P<gib>-?\d+(?:\.\d+)?) GiB")
_SIZE = re.compile(r"(?P<pool>[A-Z]+(?: \+ host)?) KV cache size: (?P<tok>[\d,]+) tokens")
_CONC = re.compile(r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: "
                   r"(?P<x>\d+(?:\.\d+)?)\s*x")
_NOFIT = re.compile(r"max seq len \((?P<len>\d+)\), (?P<need>\d+(?:\.\d+)?) GiB KV cache is "
                    r"needed, which is larger than the available KV cache memory "
                    r"\((?P<avail>-?\d+(?:\.\d+)?) GiB\)")


@dataclass
class KvLines:
    """The KV numbers one launch printed (the last value of each: a relaunch overwrites)."""

    available_gib: float | None = None
    tokens: int | None = None
    max_model_len: int | None = None
    max_concurrency: float | None = None
    needed_gib: float | None = None
    form: Literal["one-line", "two-line", "none"] = "none"
    lines: list[str] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return self.tokens is not None or self.available_gib is not None or \
            self.needed_gib is not None


def feed_kv_line(kv: KvLines, line: str) -> bool:
    """Read one log line into ``kv``; True when it was a KV line."""
    if "KV cache" not in line and "concurrency" not in line:
        return False
    hit = False
    if m := _AVAIL.search(line):
        kv.available_gib = float(m.group("gib"))
        hit = True
    s, c = _SIZE.search(line), _CONC.search(line)
    if s:
        kv.tokens = int(s.group("tok").replace(",", ""))
        kv.form = "one-line" if c else "two-line"
        hit = True
    if c:
        kv.max_model_len = int(c.group("len").replace(",", ""))
        kv.max_concurrency = float(c.group("x"))
        hit = True
    if m := _NOFIT.search(line):
        kv.max_model_len = int(m.group("len"))
        kv.needed_gib = float(m.group("need"))
        kv.available_gib = float(m.group("avail"))
        hit = True
    if hit:
        kv.lines.append(line.strip()[-300:])
    return hit


def read_kv_lines(lines: Iterable[str]) -> KvLines:
    kv = KvLines()
    for line in lines:
        feed_kv_line(kv, line)
    return kv


# --- capacity + DCP verdict ----------------------------------------------------------------------
@dataclass
class KvCapacity:
    """``kv_capacity`` as every command reports it (JSON keys are the field names)."""

    tokens: int | None
    available_gib: float | None
    tokens_per_gib: float | None
    dcp1_tokens_per_gib: float | None
    effective_dcp: float | None
    requested_dcp: int | None
    max_model_len: int | None
    max_concurrency: float | None
    engaged: Literal["yes", "no", "unknown"] = "unknown"
    model: dict[str, Any] | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def not_engaged(self) -> bool:
        return self.engaged == "no"


def capacity_from_lines(kv: KvLines, density: KvDensity | None,
                        requested_dcp: int | None) -> KvCapacity | None:
    """Combine the log's numbers with the model; ``None`` when the log has no KV numbers."""
    if not kv.found:
        return None
    tpg = None
    if kv.tokens is not None and kv.available_gib:
        tpg = kv.tokens / kv.available_gib
    dcp1 = density.tokens_per_gib(1) if density is not None else None
    eff = round(tpg / dcp1, 2) if (tpg is not None and dcp1) else None
    cap = KvCapacity(tokens=kv.tokens, available_gib=kv.available_gib,
                     tokens_per_gib=round(tpg, 1) if tpg is not None else None,
                     dcp1_tokens_per_gib=round(dcp1, 1) if dcp1 is not None else None,
                     effective_dcp=eff, requested_dcp=requested_dcp,
                     max_model_len=kv.max_model_len, max_concurrency=kv.max_concurrency,
                     model=density.to_dict() if density is not None else None)
    cap.engaged, cap.note = _verdict(cap, density, kv)
    return cap


def _verdict(cap: KvCapacity, density: KvDensity | None,
             kv: KvLines) -> tuple[Literal["yes", "no", "unknown"], str]:
    want = cap.requested_dcp
    if kv.tokens is None:
        if kv.needed_gib is not None:
            return "unknown", (f"vLLM could not fit one request: {kv.needed_gib} GiB needed, "
                               f"{kv.available_gib} GiB available")
        return "unknown", "no 'GPU KV cache size' line yet"
    if cap.effective_dcp is None:
        return "unknown", ("no model config: the density per GiB cannot be compared with DCP 1 "
                           "(pass --config or keep the model's config.json next to the log's model)")
    if want is None or want <= 1:
        return "unknown", f"DCP not requested; effective factor {cap.effective_dcp}"
    if abs(cap.effective_dcp - 1.0) <= ENGAGED_TOLERANCE:
        return "no", (f"DCP {want} requested but each GiB holds the DCP-1 density "
                      f"({cap.tokens_per_gib} tokens/GiB, effective factor {cap.effective_dcp})")
    if abs(cap.effective_dcp - want) <= ENGAGED_TOLERANCE * want:
        return "yes", f"effective DCP {cap.effective_dcp} of {want} requested"
    return "unknown", (f"effective DCP {cap.effective_dcp} matches neither 1 nor the requested "
                       f"{want} (model: {density.how if density else '-'})")
