"""Reference math of the DCP sparse-MLA decode step, in plain torch (CPU or CUDA).

* index conversion: :func:`filter_and_convert_dcp_index` and drop-ins with the exact keyword
  signatures of vLLM 0.33/0.34's ``sparse_utils.triton_filter_and_convert_dcp_index`` and
  ``triton_convert_req_index_to_global_index``, so tests can put them into a real vLLM module on
  a machine without Triton/CUDA;
* attention: :func:`sparse_mla_decode` (absorbed MLA over selected rows, with LSE) and
  :func:`trtllm_batch_decode_with_kv_cache_mla_ref`, a CPU stand-in with FlashInfer's signature;
* the DCP merge: :func:`lse_merge_ag_rs` (vLLM ``cp_lse_ag_out_rs``) and :func:`lse_merge_a2a`
  (vLLM ``dcp_a2a_lse_reduce``) as single-process functions over every rank's partial result.
  :mod:`sm120kit.warmup.collectives` runs the same math with real ``torch.distributed`` calls.

LSE bases: ``"2"`` (FlashInfer sparse, vLLM ``lse_base_on_e = False``) or ``"e"``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sm120kit.models.constants import DEFAULT_BLOCK_SIZE
from sm120kit.models.fp8ds import unpack_fp8_ds_mla

if TYPE_CHECKING:
    import torch

LOG2E = 1.0 / math.log(2.0)
LSE_BASES = ("2", "e")


def _check_base(base: str) -> None:
    if base not in LSE_BASES:
        raise ValueError(f"lse base must be '2' or 'e', got {base!r}")


# ---------------------------------------------------------------------------------------------
# index conversion
# ---------------------------------------------------------------------------------------------


def _remap(
    req_id: torch.Tensor,
    block_table: torch.Tensor,
    token_indices: torch.Tensor,
    layout: tuple[int, int | None, int, int, int],
    compact: bool,
    *,
    idx_mapping: torch.Tensor | None = None,
    prefill_request_ids: torch.Tensor | None = None,
    prefill_starts: torch.Tensor | None = None,
    prefill_rank_stride: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Vectorized semantics of vLLM's ``sparse_mla_index_remap_kernel`` (int32 in, int32 out).

    ``layout`` = ``(block_size, block_stride_rows or None for block_size, dcp_size, dcp_rank,
    interleave)``.

    Per slot: ``-1`` stays ``-1``; a slot whose owner ``(t // I) % N`` is another rank, or whose
    local block ``local // B`` lies outside the block table row, becomes ``-1``; otherwise it
    becomes ``block_table[req, local // B] * block_stride_rows + local % B``. Prefill rows (when
    ``prefill_request_ids[t] >= 0``) map to ``owner * rank_stride + start + local`` and are never
    dropped as remote. With ``compact`` the valid slots move, in their original order, to the
    prefix ``[0, valid_count)`` and the rest is ``-1`` (the kernel's prefix order is unspecified;
    stable order is one valid choice).
    """
    import torch

    block_size, stride, dcp_size, dcp_rank, interleave = layout
    block_stride_rows = stride if stride is not None else block_size
    tok = token_indices.to(torch.int64)
    neg = tok < 0
    t = tok.clamp(min=0)
    n, i = dcp_size, interleave
    own = (t // i) % n
    local = (t // (n * i)) * i + t % i
    bid = local // block_size
    off = local % block_size
    max_blocks = block_table.shape[1]
    valid_block = bid < max_blocks
    req = req_id.to(torch.int64)
    if idx_mapping is not None:
        req = idx_mapping.to(torch.int64)[req].clamp(min=0)
    remote = own != dcp_rank
    if prefill_request_ids is not None:
        is_prefill = (prefill_request_ids.to(torch.int64) >= 0).unsqueeze(1)
    else:
        is_prefill = torch.zeros_like(neg[:, :1])
    invalid = neg | ~valid_block | (remote & ~is_prefill)
    if max_blocks:
        base = block_table.to(torch.int64)[req.unsqueeze(1), bid.clamp(max=max_blocks - 1)]
    else:
        base = torch.zeros_like(tok)
    phys = base * block_stride_rows + off
    if prefill_request_ids is not None:
        assert prefill_starts is not None
        pr = prefill_request_ids.to(torch.int64).clamp(min=0)
        start = prefill_starts.to(torch.int64)[pr].unsqueeze(1)
        pre = own * prefill_rank_stride + start + local
        phys = torch.where(is_prefill, pre, phys)
    phys = torch.where(invalid, torch.full_like(phys, -1), phys)
    valid = ~invalid
    counts = valid.sum(dim=1)
    if compact:
        order = torch.argsort(invalid.to(torch.int8), dim=1, stable=True)
        phys = torch.gather(phys, 1, order)
    return phys.to(torch.int32), counts.to(torch.int32)


def filter_and_convert_dcp_index(
    req_id_per_token: torch.Tensor,
    block_table: torch.Tensor,
    token_indices: torch.Tensor,
    *,
    dcp_size: int,
    dcp_rank: int,
    interleave: int = 1,
    block_size: int = DEFAULT_BLOCK_SIZE,
    block_stride_rows: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Global top-k token ids -> this rank's physical KV rows, compacted to the front.

    Same result as vLLM's ``triton_filter_and_convert_dcp_index(..., return_valid_counts=True)``
    (``COMPACT_TO_FRONT``): ``physical int32 [T, K]`` whose first ``valid_counts[t]`` entries are
    the owned slots (stable order), the rest ``-1``; ``valid_counts int32 [T]``. With
    ``dcp_size == 1`` it is the plain global conversion (with the same compaction vLLM applies
    when valid counts are requested).
    """
    if dcp_size < 1 or not 0 <= dcp_rank < dcp_size:
        raise ValueError(f"bad dcp rank {dcp_rank} for dcp size {dcp_size}")
    if block_size % interleave:
        raise ValueError(f"block size {block_size} must be divisible by interleave {interleave}")
    layout = (block_size, block_stride_rows, dcp_size, dcp_rank, interleave)
    return _remap(req_id_per_token, block_table, token_indices, layout, True)


def triton_convert_req_index_to_global_index_ref(
    req_id: torch.Tensor,
    block_table: torch.Tensor,
    token_indices: torch.Tensor,
    BLOCK_SIZE: int = 64,
    BLOCK_STRIDE_ROWS: int | None = None,
    NUM_TOPK_TOKENS: int = 2048,
    BLOCK_N: int = 128,
    HAS_PREFILL_WORKSPACE: bool = False,
    prefill_workspace_request_ids: torch.Tensor | None = None,
    prefill_workspace_starts: torch.Tensor | None = None,
    prefill_workspace_rank_stride: int | None = None,
    dcp_size: int = 1,
    dcp_rank: int = 0,
    cp_kv_cache_interleave_size: int = 1,
    return_valid_counts: bool = False,
    out: torch.Tensor | None = None,
    valid_counts_out: torch.Tensor | None = None,
    idx_mapping: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Torch drop-in for vLLM 0.33/0.34 ``triton_convert_req_index_to_global_index``.

    Same keywords, asserts and results (compaction exactly when ``return_valid_counts``);
    ``out``/``valid_counts_out`` are filled in place when given.
    """
    import torch

    assert req_id.dtype == torch.int32
    assert block_table.dtype == torch.int32
    assert idx_mapping is None or idx_mapping.dtype == torch.int32
    assert token_indices.dtype == torch.int32
    assert req_id.shape[0] == token_indices.shape[0]
    assert token_indices.shape[1] == NUM_TOPK_TOKENS
    assert NUM_TOPK_TOKENS % BLOCK_N == 0, (
        f"NUM_TOPK_TOKENS ({NUM_TOPK_TOKENS}) must be divisible by BLOCK_N ({BLOCK_N})"
    )
    if HAS_PREFILL_WORKSPACE:
        assert prefill_workspace_request_ids is not None
        assert prefill_workspace_starts is not None
        assert prefill_workspace_request_ids.dtype == torch.int32
        assert prefill_workspace_starts.dtype == torch.int32
    layout = (BLOCK_SIZE, BLOCK_STRIDE_ROWS, dcp_size, dcp_rank, cp_kv_cache_interleave_size)
    phys, counts = _remap(
        req_id,
        block_table,
        token_indices,
        layout,
        return_valid_counts,
        idx_mapping=idx_mapping,
        prefill_request_ids=prefill_workspace_request_ids if HAS_PREFILL_WORKSPACE else None,
        prefill_starts=prefill_workspace_starts if HAS_PREFILL_WORKSPACE else None,
        prefill_rank_stride=prefill_workspace_rank_stride or 0,
    )
    if out is not None:
        assert out.dtype == token_indices.dtype and out.shape == token_indices.shape
        out.copy_(phys)
        phys = out
    if not return_valid_counts:
        return phys
    if valid_counts_out is not None:
        assert valid_counts_out.dtype == torch.int32
        assert valid_counts_out.shape == (token_indices.shape[0],)
        valid_counts_out.copy_(counts)
        counts = valid_counts_out
    return phys, counts


def triton_filter_and_convert_dcp_index_ref(
    req_id: torch.Tensor,
    block_table: torch.Tensor,
    token_indices: torch.Tensor,
    dcp_size: int,
    dcp_rank: int,
    cp_kv_cache_interleave_size: int = 1,
    BLOCK_SIZE: int = 64,
    BLOCK_STRIDE_ROWS: int | None = None,
    NUM_TOPK_TOKENS: int = 2048,
    BLOCK_N: int = 128,
    return_valid_counts: bool = False,
    compact_valid_to_front: bool = True,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Torch drop-in for vLLM 0.33/0.34 ``triton_filter_and_convert_dcp_index``.

    Same keywords and asserts; ``dcp_size == 1`` falls through to the global conversion exactly as
    vLLM does (so compaction there follows ``return_valid_counts``).
    """
    import torch

    assert dcp_size >= 1
    assert 0 <= dcp_rank < dcp_size
    assert BLOCK_SIZE % cp_kv_cache_interleave_size == 0, (
        f"BLOCK_SIZE ({BLOCK_SIZE}) must be divisible by "
        f"cp_kv_cache_interleave_size ({cp_kv_cache_interleave_size})."
    )
    assert req_id.dtype == torch.int32
    assert block_table.dtype == torch.int32
    assert token_indices.dtype == torch.int32
    assert token_indices.shape[1] == NUM_TOPK_TOKENS
    assert NUM_TOPK_TOKENS % BLOCK_N == 0
    if dcp_size == 1:
        return triton_convert_req_index_to_global_index_ref(
            req_id,
            block_table,
            token_indices,
            BLOCK_SIZE=BLOCK_SIZE,
            BLOCK_STRIDE_ROWS=BLOCK_STRIDE_ROWS,
            NUM_TOPK_TOKENS=NUM_TOPK_TOKENS,
            BLOCK_N=BLOCK_N,
            return_valid_counts=return_valid_counts,
        )
    layout = (BLOCK_SIZE, BLOCK_STRIDE_ROWS, dcp_size, dcp_rank, cp_kv_cache_interleave_size)
    phys, counts = _remap(req_id, block_table, token_indices, layout, compact_valid_to_front)
    if return_valid_counts:
        return phys, counts
    return phys


# ---------------------------------------------------------------------------------------------
# attention
# ---------------------------------------------------------------------------------------------


def active_mask(indices: torch.Tensor, valid_counts: torch.Tensor | None) -> torch.Tensor:
    """Slots that take part: not ``-1`` and (when counts are given) inside ``[0, count)``."""
    import torch

    mask = indices >= 0
    if valid_counts is not None:
        cols = torch.arange(indices.shape[1], device=indices.device)
        mask &= cols.unsqueeze(0) < valid_counts.to(indices.device).unsqueeze(1)
    return mask


def sparse_mla_decode(
    q: torch.Tensor,
    kv_latent: torch.Tensor,
    kv_rope: torch.Tensor | None,
    indices: torch.Tensor,
    valid_counts: torch.Tensor | None = None,
    *,
    softmax_scale: float,
    lse_base: str = "2",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Absorbed MLA decode over selected KV rows, with LSE.

    ``q [T, H, R + rope]``, ``kv_latent [rows, R]``, ``kv_rope [rows, rope]`` (or None for NoPE),
    ``indices [T, K]`` physical row ids (``-1`` = none), ``valid_counts [T]`` = active prefix
    length (FlashInfer ``seq_lens``; None = every column). For each token and head::

        s_k = softmax_scale * (q_nope . latent[idx_k] + q_rope . rope[idx_k])
        out = sum_k softmax(s)_k * latent[idx_k],   lse = log_base(sum_k exp(s_k))

    Returns ``(out fp32 [T, H, R], lse fp32 [T, H])``; a row with no active slot gets out 0 and
    LSE ``-inf``. Computed in fp32.
    """
    import torch

    _check_base(lse_base)
    t, h, dq = q.shape
    r = kv_latent.shape[1]
    rope_dim = 0 if kv_rope is None else kv_rope.shape[1]
    if dq != r + rope_dim:
        raise ValueError(f"query dim {dq} != kv_lora_rank {r} + rope {rope_dim}")
    if valid_counts is not None and indices.shape[1]:
        # only the active prefix can take part: skip the rest of the columns
        width = max(int(valid_counts.max()), 0) if valid_counts.numel() else 0
        indices = indices[:, :width]
    mask = active_mask(indices, valid_counts)  # [T, K]
    safe = torch.where(mask, indices.to(torch.int64), torch.zeros_like(indices, dtype=torch.int64))
    # masked slots read a zero row: cache contents outside the selection (even NaN) never leak
    keep = mask.unsqueeze(-1)
    lat = torch.where(keep, kv_latent.float()[safe], 0.0)  # [T, K, R]
    qf = q.float()
    scores = torch.einsum("thr,tkr->thk", qf[..., :r], lat)
    if rope_dim:
        assert kv_rope is not None
        rp = torch.where(keep, kv_rope.float()[safe], 0.0)
        scores = scores + torch.einsum("thd,tkd->thk", qf[..., r:], rp)
    scores = scores * softmax_scale
    scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
    lse_e = torch.logsumexp(scores, dim=-1)  # [T, H], -inf for empty rows
    empty = ~mask.any(dim=1)  # [T]
    p = torch.exp(scores - torch.where(empty[:, None, None], 0.0, lse_e.unsqueeze(-1)))
    p = torch.nan_to_num(p, nan=0.0)
    out = torch.einsum("thk,tkr->thr", p, lat)
    out = out.masked_fill(empty[:, None, None], 0.0)
    lse = lse_e * LOG2E if lse_base == "2" else lse_e
    lse = lse.masked_fill(empty[:, None], float("-inf"))
    return out, lse


def _is_pow2(x: torch.Tensor) -> bool:
    import torch

    m, _ = torch.frexp(x)
    return bool(((m == 0.5) & (x > 0)).all())


def _check_route(
    sparse_mla_top_k: int, backend: str, sparse_mla_top_k_lens: torch.Tensor | None
) -> None:
    """Only the sparse route of the sparse backend."""
    if sparse_mla_top_k <= 0:
        raise ValueError("reference reproduces only the sparse route (sparse_mla_top_k > 0)")
    if backend not in ("auto", "sparse"):
        raise ValueError(f"reference reproduces backend 'sparse' only, got {backend!r}")
    if sparse_mla_top_k_lens is not None:
        raise ValueError(
            "sparse_mla_top_k_lens is not supported by the SM120 sparse MLA backend; "
            "pass per-token active top-k lengths via seq_lens instead"
        )


def _reject_unreproduced(
    sinks: list[torch.Tensor] | None,
    skip_softmax_threshold_scale_factor: float | None,
    enable_dcp: bool,
    cp_world: int,
    cum_seq_lens_q: torch.Tensor | None,
) -> None:
    """Features of the other backends and kernels, which the reference does not reproduce."""
    if sinks is not None or skip_softmax_threshold_scale_factor is not None:
        raise ValueError("reference does not reproduce sinks / skip-softmax")
    if enable_dcp or cp_world != 1 or cum_seq_lens_q is not None:
        raise ValueError("enable_dcp / cum_seq_lens_q belong to other backends")


def _check_kernel_options(
    use_fp16_softmax: bool | None,
    uses_shared_paged_kv_idx: bool,
    bmm1_scale: float | torch.Tensor,
    bmm2_scale: float | torch.Tensor,
    return_lse_base: str | None,
    kv_scale_format: str,
) -> str:
    """The SM120 kernel's own option checks; returns the normalized ``kv_scale_format``."""
    import torch

    if use_fp16_softmax:
        raise ValueError("use_fp16_softmax is only supported by backend='trtllm-gen'")
    if not uses_shared_paged_kv_idx:
        raise ValueError("SM120 sparse MLA v32/GLM expects shared sparse page indices")
    if isinstance(bmm1_scale, torch.Tensor) or isinstance(bmm2_scale, torch.Tensor):
        raise ValueError("SM120 sparse MLA v32/GLM expects float bmm1_scale/bmm2_scale")
    if float(bmm2_scale) != 1.0:
        raise ValueError("SM120 sparse MLA v32/GLM does not support bmm2_scale")
    if return_lse_base not in (None, "basee", "base2"):
        raise ValueError(
            f"return_lse_base must be 'basee', 'base2', or None; got {return_lse_base!r}"
        )
    fmt = str(kv_scale_format).lower().replace("-", "_")
    if fmt not in ("auto", "pow2_fp32", "arbitrary_fp32"):
        raise ValueError(f"kv_scale_format {kv_scale_format!r} is not a v32/GLM format")
    return fmt


def _check_query(
    query: torch.Tensor,
    workspace_buffer: torch.Tensor,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    fmt: str,
    kv_scale_format: str,
) -> bool:
    """Query rank, dtype, layout, head count and the workspace's device; returns True for the
    GLM-5.3 NoPE layout."""
    import torch

    if query.ndim != 4:
        raise ValueError(f"Expected query.ndim == 4, got {query.ndim}")
    if query.dtype != torch.bfloat16:
        raise ValueError(f"SM120 sparse MLA v32/GLM expects BF16 query, got {query.dtype}")
    heads, dqk = query.shape[2], query.shape[3]
    rope_v32 = kv_lora_rank == 512 and qk_rope_head_dim == 64 and dqk == 576
    nope = kv_lora_rank == 512 and qk_rope_head_dim == 0 and dqk == 512 and fmt == "arbitrary_fp32"
    if not (rope_v32 or nope):
        raise ValueError(
            "SM120 sparse MLA expects either the v32/GLM_NSA 512+64 layout or GLM-5.3 native "
            f"NoPE 512+0 with arbitrary_fp32 scales; got kv_lora_rank={kv_lora_rank}, "
            f"qk_rope_head_dim={qk_rope_head_dim}, query dim={dqk}, kv_scale_format={kv_scale_format!r}"
        )
    if heads > 128:
        raise ValueError(f"Expected num_heads <= 128, got {heads}")
    if workspace_buffer.device != query.device:
        raise ValueError(f"workspace_buffer must be on query device {query.device}")
    return nope


def _check_cache(kv_cache: torch.Tensor, nope: bool) -> torch.Tensor:
    """The packed uint8 cache, as ``[pages, page, W]`` (a ``[pages, 1, page, W]`` is squeezed)."""
    import torch

    if kv_cache.dtype != torch.uint8:
        raise ValueError(
            f"SM120 sparse MLA v32/GLM backend expects packed uint8 kv_cache, got {kv_cache.dtype}"
        )
    min_w = 528 if nope else 656
    if kv_cache.ndim == 4:
        if kv_cache.shape[1] != 1:
            raise ValueError(
                f"expected kv_cache [num_pages, 1, page_size, W], got {tuple(kv_cache.shape)}"
            )
        kv_cache = kv_cache.squeeze(1)
    if kv_cache.ndim != 3 or kv_cache.shape[-1] < min_w:
        raise ValueError(
            f"expected packed kv_cache last dim >= {min_w}, got {tuple(kv_cache.shape)}"
        )
    return kv_cache


def _check_block_tables(block_tables: torch.Tensor, expected: tuple[int, int, int]) -> None:
    import torch

    if block_tables.dtype != torch.int32:
        raise ValueError(f"block_tables must have dtype torch.int32, got {block_tables.dtype}")
    if tuple(block_tables.shape) != expected:
        raise ValueError(
            "SM120 sparse MLA v32/GLM expects sparse block_tables shape "
            f"{expected}, got {tuple(block_tables.shape)}"
        )


def _active_counts(seq_lens: torch.Tensor | None, bsz: int, q_len: int) -> torch.Tensor | None:
    """Active top-k prefix length per query token (None = every column is active)."""
    import torch

    if seq_lens is None:
        return None
    flat_t = bsz * q_len
    if seq_lens.dtype != torch.int32:
        raise ValueError(f"seq_lens must have dtype torch.int32, got {seq_lens.dtype}")
    if (seq_lens.ndim == 2 and tuple(seq_lens.shape) == (bsz, q_len)) or (
        seq_lens.ndim == 1 and seq_lens.numel() == flat_t
    ):
        return seq_lens.reshape(flat_t)
    if seq_lens.ndim == 1 and seq_lens.numel() == bsz:
        return None
    raise ValueError(
        "seq_lens for SM120 sparse MLA v32/GLM must be shaped either "
        f"({bsz},), ({flat_t},), or ({bsz}, {q_len}); got {tuple(seq_lens.shape)}"
    )


def _check_out_lse(
    out: torch.Tensor | None,
    lse: torch.Tensor | None,
    return_lse: bool,
    query: torch.Tensor,
) -> torch.Tensor | None:
    """Caller-given ``out`` and ``lse`` buffers; returns ``lse`` viewed ``[B*q_len, H]`` or None."""
    import torch

    bsz, q_len, heads = query.shape[:3]
    expected_out = (bsz, q_len, heads, 512)
    if out is not None and (
        tuple(out.shape) != expected_out
        or out.dtype != torch.bfloat16
        or out.device != query.device
    ):
        raise ValueError(
            f"Invalid shape of out: expected {expected_out}, got {out.shape}"
            if tuple(out.shape) != expected_out
            else f"Invalid dtype/device of out: {out.dtype} {out.device}"
        )
    if not (return_lse and lse is not None):
        return None
    flat_t = bsz * q_len
    if tuple(lse.shape) not in ((flat_t, heads), (bsz, q_len, heads)) or lse.dtype != torch.float32:
        raise ValueError(
            f"lse must have shape {(flat_t, heads)} or {(bsz, q_len, heads)} float32; got "
            f"{tuple(lse.shape)} {lse.dtype}"
        )
    return lse.view(flat_t, heads)


def _dequant_rows(
    kv_cache: torch.Tensor, nope: bool, fmt: str
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Flat rows (row = page * page_size + offset) -> (latent, rope or None for NoPE)."""
    import torch

    rows = kv_cache.reshape(-1, kv_cache.shape[-1])
    latent, rope = unpack_fp8_ds_mla(rows, kv_lora_rank=512, rope_dim=0 if nope else 64)
    if fmt in ("auto", "pow2_fp32"):
        scales = rows[:, 512:528].contiguous().view(torch.float32)
        if not _is_pow2(scales):
            raise ValueError("kv_scale_format pow2_fp32 needs power-of-two scales in the cache")
    return latent, None if nope else rope


# The contract of trtllm_batch_decode_with_kv_cache_mla_ref below, a CPU/CUDA stand-in for
# FlashInfer's SM120 sparse-MLA decode (backend="sparse").
#
# Signature: flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla of flashinfer-python
# 0.7.2.post1 (the version vLLM 0.33 pins), keyword for keyword. It reproduces only the SM120
# packed sparse v32/GLM route, the one vLLM's FLASHINFER_MLA_SPARSE_SM120 backend takes
# (sparse_mla_top_k > 0), with the same argument checks and results:
#
# * query BF16 [B, q_len, H, 576] (512 latent + 64 rope) or [B, q_len, H, 512] for GLM-5.3 NoPE
#   (qk_rope_head_dim == 0, kv_scale_format="arbitrary_fp32"), H <= 128;
# * kv_cache uint8 [pages, page, W] or [pages, 1, page, W] in the fp8_ds_mla layout (W = 656, or
#   >= 528 for NoPE); rows are addressed flat: row = page * page_size + offset;
# * block_tables int32 [B, q_len, sparse_mla_top_k] *physical row* indices (vLLM passes the
#   converted top-k, topk_indices_physical.unsqueeze(1)); -1 slots are masked;
# * seq_lens = active top-k prefix length per query token, shaped [B, q_len] or [B*q_len] (a [B]
#   tensor with q_len > 1, or None, means every column is active); max_seq_len is ignored, as in
#   FlashInfer's sparse route;
# * bmm1_scale (float) is the softmax scale; bmm2_scale must be 1.0;
# * out BF16 [B, q_len, H, 512] (allocated when None); lse float32 [B*q_len, H] or
#   [B, q_len, H]; return_lse returns (out, lse); the LSE is base 2 unless
#   return_lse_base="basee"; a token with no active slot gets output 0 and LSE -inf (FlashInfer
#   0.7.2.post1's documented empty-row contract);
# * kv_scale_format: "auto"/"pow2_fp32" (power-of-two scales, checked here) or "arbitrary_fp32";
#   the dequantized value is fp8 * scale in both.
#
# sparse_mla_top_k_lens raises FlashInfer's SM120 error. Sinks, skip-softmax, DCP flags of the
# CuTeDSL kernel, dense MLA and the other backends are not reproduced (ValueError). The real SM120
# kernel cannot run on this machine; this function is what the CPU tests use in its place. The
# workspace buffer is only checked for device placement.
def trtllm_batch_decode_with_kv_cache_mla_ref(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace_buffer: torch.Tensor,
    qk_nope_head_dim: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor | None,
    max_seq_len: int,
    sparse_mla_top_k: int = 0,
    out: torch.Tensor | None = None,
    bmm1_scale: float | torch.Tensor = 1.0,
    bmm2_scale: float | torch.Tensor = 1.0,
    sinks: list[torch.Tensor] | None = None,
    skip_softmax_threshold_scale_factor: float | None = None,
    enable_pdl: bool | None = None,
    backend: str = "auto",
    is_var_seq: bool = True,
    uses_shared_paged_kv_idx: bool = True,
    lse: torch.Tensor | None = None,
    return_lse: bool = False,
    cute_dsl_impl: str = "auto",
    kv_scale_format: str = "auto",
    cum_seq_lens_q: torch.Tensor | None = None,
    max_q_len: int | None = None,
    multi_ctas_kv_counter_buffer: torch.Tensor | None = None,
    sparse_mla_top_k_lens: torch.Tensor | None = None,
    enable_dcp: bool = False,
    cp_world: int = 1,
    cp_rank: int = 0,
    causal_seqlens_kv_global: torch.Tensor | None = None,
    use_fp16_softmax: bool | None = None,
    return_lse_base: str | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Stand-in for FlashInfer's SM120 sparse-MLA decode; the contract is the comment above."""
    import torch

    _check_route(sparse_mla_top_k, backend, sparse_mla_top_k_lens)
    _reject_unreproduced(
        sinks, skip_softmax_threshold_scale_factor, enable_dcp, cp_world, cum_seq_lens_q
    )
    fmt = _check_kernel_options(
        use_fp16_softmax,
        uses_shared_paged_kv_idx,
        bmm1_scale,
        bmm2_scale,
        return_lse_base,
        kv_scale_format,
    )
    nope = _check_query(
        query, workspace_buffer, kv_lora_rank, qk_rope_head_dim, fmt, kv_scale_format
    )
    kv_cache = _check_cache(kv_cache, nope)
    bsz, q_len, heads, dqk = query.shape
    _check_block_tables(block_tables, (bsz, q_len, sparse_mla_top_k))
    counts = _active_counts(seq_lens, bsz, q_len)
    lse_view = _check_out_lse(out, lse, return_lse, query)
    latent, rope = _dequant_rows(kv_cache, nope, fmt)
    o, lse_val = sparse_mla_decode(
        query.reshape(bsz * q_len, heads, dqk),
        latent,
        rope,
        block_tables.reshape(bsz * q_len, sparse_mla_top_k),
        counts,
        softmax_scale=float(bmm1_scale),
        lse_base="e" if return_lse_base == "basee" else "2",
    )
    if out is None:
        out = torch.empty((bsz, q_len, heads, 512), dtype=torch.bfloat16, device=query.device)
    out.copy_(o.reshape(out.shape).to(torch.bfloat16))
    if not return_lse:
        return out
    if lse_view is not None:
        lse_view.copy_(lse_val)
        assert lse is not None
        return out, lse
    return out, lse_val


# ---------------------------------------------------------------------------------------------
# the DCP merge (single process, every rank's partial at hand)
# ---------------------------------------------------------------------------------------------


def _exp(x: torch.Tensor, base: str) -> torch.Tensor:
    import torch

    return torch.exp(x) if base == "e" else torch.exp2(x)


def _log(x: torch.Tensor, base: str) -> torch.Tensor:
    import torch

    return torch.log(x) if base == "e" else torch.log2(x)


def _clean(lse: torch.Tensor) -> torch.Tensor:
    """NaN and +inf LSEs count as empty (``-inf``), as vLLM's combine kernels do."""
    import torch

    return torch.where(torch.isnan(lse) | (lse == float("inf")), float("-inf"), lse)


def global_lse(lses: torch.Tensor, base: str = "2") -> torch.Tensor:
    """Combined LSE over the rank dim of ``lses [N, T, H]`` (all ``-inf`` -> ``-inf``)."""
    import torch

    _check_base(base)
    lses = _clean(lses.float())
    mx = lses.max(dim=0).values
    mx = torch.where(mx == float("-inf"), 0.0, mx)
    return _log(_exp(lses - mx, base).sum(dim=0), base) + mx


def correct_attn_out(
    out: torch.Tensor, lses: torch.Tensor, rank: int, base: str = "2"
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM ``correct_attn_out``: scale rank ``rank``'s partial ``out [T, H, D]`` by
    ``base**(lse_rank - lse_global)`` given all ranks' ``lses [N, T, H]``; returns (out, lse)."""
    import torch

    g = global_lse(lses, base)
    d = _clean(_clean(lses[rank].float()) - g)
    factor = _exp(d, base)
    corrected = out.float() * factor.unsqueeze(-1)
    corrected = torch.where(factor.unsqueeze(-1) == 0, 0.0, corrected)
    return corrected, g


def lse_merge_ag_rs(
    outs_per_rank: Sequence[torch.Tensor],
    lses_per_rank: Sequence[torch.Tensor],
    base: str = "2",
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """vLLM ``cp_lse_ag_out_rs`` for all ranks at once.

    Input per rank: partial ``out [T, H_total, D]`` and ``lse [T, H_total]`` over that rank's
    local KV (H_total = heads per rank x N, the all-gathered query). Each rank all-gathers the
    LSEs, corrects its partial output, then a reduce-scatter along heads gives rank r the sum
    over ranks of heads ``[r*H, (r+1)*H)``. Returns ``(outs [T, H, D], lses [T, H])`` per rank.
    """
    import torch

    _check_base(base)
    n = len(outs_per_rank)
    lses = torch.stack([x.float() for x in lses_per_rank])  # [N, T, Ht]
    corrected = []
    glse = None
    for r in range(n):
        c, glse = correct_attn_out(outs_per_rank[r], lses, r, base)
        corrected.append(c)
    assert glse is not None
    total = torch.stack(corrected).sum(dim=0)  # reduce
    hp = total.shape[1] // n
    outs = [total[:, r * hp : (r + 1) * hp] for r in range(n)]  # scatter along heads
    return outs, [glse[:, r * hp : (r + 1) * hp] for r in range(n)]


def weighted_combine(
    outs: torch.Tensor, lses: torch.Tensor, base: str = "2"
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's a2a combine of ``outs [N, T, H, D]`` with ``lses [N, T, H]`` -> (``[T,H,D]``, ``[T,H]``)."""
    import torch

    lses = _clean(lses.float())
    mx = lses.max(dim=0).values
    mx = torch.where(mx == float("-inf"), 0.0, mx)
    w = _exp(lses - mx, base)
    w = torch.nan_to_num(w, nan=0.0)
    s = w.sum(dim=0, keepdim=True)
    w = (w / s.clamp(min=1e-10)).unsqueeze(-1)
    o = torch.where(w == 0, 0.0, outs.float())
    return (o * w).sum(dim=0), _log(s.squeeze(0), base) + mx


def lse_merge_a2a(
    outs_per_rank: Sequence[torch.Tensor],
    lses_per_rank: Sequence[torch.Tensor],
    base: str = "2",
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """vLLM ``dcp_a2a_lse_reduce`` for all ranks: rank r receives every rank's heads
    ``[r*H, (r+1)*H)`` (output and LSE, one all-to-all) and combines them with exact LSE weights."""
    import torch

    _check_base(base)
    n = len(outs_per_rank)
    hp = outs_per_rank[0].shape[1] // n
    res_o, res_l = [], []
    for r in range(n):
        sl = slice(r * hp, (r + 1) * hp)
        o, lse = weighted_combine(
            torch.stack([x[:, sl].float() for x in outs_per_rank]),
            torch.stack([x[:, sl].float() for x in lses_per_rank]),
            base,
        )
        res_o.append(o)
        res_l.append(lse)
    return res_o, res_l


def describe() -> dict[str, Any]:
    """What this module reproduces, for ``--json`` output."""
    return {
        "conversion": "vllm 0.33/0.34 triton_filter_and_convert_dcp_index COMPACT_TO_FRONT",
        "attention": "absorbed MLA, fp32, empty rows out 0 / lse -inf",
        "merge": ["cp_lse_ag_out_rs", "dcp_a2a_lse_reduce"],
    }
