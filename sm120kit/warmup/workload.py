"""Synthetic, deterministic decode step of the DCP warmup (torch).

Every rank regenerates the same global data from the seed (no broadcast needed):

* ``batch`` requests with ``kv_len`` KV tokens each, latent ``[kv_len, R]`` and rope
  ``[kv_len, rope]`` values, packed into real fp8_ds_mla rows; the dequantized rows are the
  ground truth the single-rank reference attends over;
* ``1 + mtp`` decode tokens per request at positions ``kv_len - q .. kv_len - 1``; token ``j``
  sees the causal prefix and its top-k is a random subset (random order) of it, ``-1`` padded to
  ``topk`` columns;
* the query ``[T, H * N, R + rope]`` (every rank keeps its own ``H`` heads and all-gathers).

:func:`build_shard` lays one rank's share out the way vLLM does: local token ``l`` of request
``b`` lives at row ``block_table[b, l // B] * B + l % B`` of a cache of ``B``-row blocks (block 0
is the null block), viewed by the kernel as 64-row pages. Rows no request owns are filled with
``0xFF`` bytes (fp8 NaN, NaN scales) so that any read of an unselected row poisons the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sm120kit.models import dcp as P
from sm120kit.models.fp8ds import pack_fp8_ds_mla, unpack_fp8_ds_mla
from sm120kit.warmup.config import RunConfig

if TYPE_CHECKING:
    import torch


@dataclass
class GlobalData:
    rows: torch.Tensor  # uint8 [batch, kv_len, W] packed fp8_ds_mla
    latent: torch.Tensor  # fp32 [batch * kv_len, R] dequantized
    rope: torch.Tensor  # fp32 [batch * kv_len, rope]
    q: torch.Tensor  # fp32 [T, H*N, R + rope]
    topk: torch.Tensor  # int32 [T, K] global token ids (per request), -1 padded
    req_id: torch.Tensor  # int32 [T]


@dataclass
class Shard:
    rank: int
    cache: torch.Tensor  # uint8 [num_blocks * B, W]
    block_table: torch.Tensor  # int32 [batch, max_blocks]
    local_tokens: list[int]  # per request
    local_blocks: list[int]  # per request

    @property
    def pages(self) -> torch.Tensor:
        """The cache as the SM120 kernel views it: ``[pages, 64, W]``."""
        return self.cache.view(-1, 64, self.cache.shape[-1])


def build_global(cfg: RunConfig) -> GlobalData:
    import torch

    g = torch.Generator().manual_seed(cfg.seed)
    b, s, r, rd = cfg.batch, cfg.kv_len, cfg.kv_lora_rank, cfg.rope_dim
    # latent groups of different magnitude exercise the per-128 scales
    mag = torch.tensor([0.5, 1.0, 2.0, 4.0]).repeat(r // 512 + 1)[: r // 128]
    latent = torch.randn(b * s, r, generator=g) * mag.repeat_interleave(128)
    rope = torch.randn(b * s, rd, generator=g)
    rows = pack_fp8_ds_mla(latent, rope if rd else None, scale_format=cfg.scale_format)
    deq, rope_deq = unpack_fp8_ds_mla(rows, kv_lora_rank=r, rope_dim=rd)
    q = torch.randn(cfg.num_tokens, cfg.total_heads, r + rd, generator=g) * 0.5
    q_len = cfg.decode_query_len
    topk = torch.full((cfg.num_tokens, cfg.topk), -1, dtype=torch.int32)
    req = torch.empty(cfg.num_tokens, dtype=torch.int32)
    for bi in range(b):
        for j in range(q_len):
            t = bi * q_len + j
            visible = s - q_len + j + 1  # causal: positions [0, visible)
            n = min(visible, cfg.topk)
            pick = torch.randperm(visible, generator=g)[:n]
            topk[t, :n] = pick.to(torch.int32)
            req[t] = bi
    return GlobalData(
        rows=rows.view(b, s, -1), latent=deq, rope=rope_deq, q=q, topk=topk, req_id=req
    )


def build_shard(cfg: RunConfig, data: GlobalData, rank: int) -> Shard:
    """This rank's fp8_ds_mla cache and block table (rows copied byte for byte)."""
    import torch

    dcp, i, bsz, s = cfg.dcp, cfg.interleave, cfg.block_size, cfg.kv_len
    g = torch.Generator().manual_seed(cfg.seed * 1000 + 17 + rank)
    local = [P.local_len(s, rank, dcp, i) for _ in range(cfg.batch)]
    blocks = [P.cdiv(x, bsz) for x in local]
    total = sum(blocks)
    width = max(max(blocks), 1)
    # physical block ids 1..total in random order (0 = vLLM's null block); table padding = 0
    perm = (torch.randperm(total, generator=g) + 1).to(torch.int32)
    table = torch.zeros((cfg.batch, width), dtype=torch.int32)
    at = 0
    for bi, nb in enumerate(blocks):
        table[bi, :nb] = perm[at : at + nb]
        at += nb
    w = data.rows.shape[-1]
    cache = torch.full(((total + 1) * bsz, w), 0xFF, dtype=torch.uint8)
    for bi, ll in enumerate(local):
        if not ll:
            continue
        loc = torch.arange(ll)
        glob = (loc // i) * (dcp * i) + rank * i + loc % i  # plan.global_index, vectorized
        phys = table[bi, loc // bsz].long() * bsz + loc % bsz
        cache[phys] = data.rows[bi, glob]
    return Shard(rank=rank, cache=cache, block_table=table, local_tokens=local, local_blocks=blocks)


def global_rows_of(cfg: RunConfig, data: GlobalData) -> torch.Tensor:
    """The top-k as row ids into the flat global ``[batch * kv_len]`` arrays (for the reference)."""
    import torch

    off = data.req_id.to(torch.int64).unsqueeze(1) * cfg.kv_len
    return torch.where(data.topk >= 0, data.topk.to(torch.int64) + off, -1)
