"""The ``fp8_ds_mla`` KV-cache row layout: pack real values into it and read them back (torch).

One row per token (vLLM ``flashmla_sparse.py`` docstring; FlashInfer's SM120 sparse backend reads
the same bytes)::

    bytes [0, R)            R = kv_lora_rank (512) float8_e4m3fn: the quantized NoPE latent
    bytes [R, R + 4*R/128)  one float32 scale per 128 latent values (4 for R = 512)
    bytes [.., + 2*rope)    rope_dim (64) bfloat16 RoPE values, unquantized

``row_bytes(512, 64) == 656`` (DeepSeek-V3.2 / GLM-NSA) and ``row_bytes(512, 0) == 528``
(GLM-5.3 NoPE). The dequantized latent is ``fp8 * scale`` of its 128-value group.

Scale formats (FlashInfer ``kv_scale_format``; vLLM picks ``arbitrary_fp32`` for ``glm*``
models and ``pow2_fp32`` otherwise):

* ``arbitrary_fp32``: ``scale = amax / 448`` (448 = largest finite e4m3 value);
* ``pow2_fp32``: ``scale = 2 ** ceil(log2(amax / 448))``, a power of two (DSv3.2).

Little-endian byte order, like every CUDA host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch

ScaleFormat = Literal["arbitrary_fp32", "pow2_fp32"]
SCALE_FORMATS: tuple[str, ...] = ("arbitrary_fp32", "pow2_fp32")
QUANT_GROUP = 128
FP8_E4M3_MAX = 448.0
FP8_DS_MLA_ROW_BYTES = 656
FP8_DS_MLA_NOPE_ROW_BYTES = 528


def row_bytes(kv_lora_rank: int = 512, rope_dim: int = 64) -> int:
    """Bytes per token row: ``kv_lora_rank`` fp8 + one fp32 scale per 128 + ``rope_dim`` bf16."""
    if kv_lora_rank <= 0 or kv_lora_rank % QUANT_GROUP:
        raise ValueError(f"kv_lora_rank must be a positive multiple of 128, got {kv_lora_rank}")
    if rope_dim < 0:
        raise ValueError(f"rope_dim must be >= 0, got {rope_dim}")
    return kv_lora_rank + 4 * (kv_lora_rank // QUANT_GROUP) + 2 * rope_dim


def compute_scales(nope: torch.Tensor, scale_format: str = "arbitrary_fp32") -> torch.Tensor:
    """Per-group fp32 scales ``[T, R/128]`` for ``nope [T, R]``."""
    import torch

    if scale_format not in SCALE_FORMATS:
        raise ValueError(f"scale_format must be one of {SCALE_FORMATS}, got {scale_format!r}")
    t, r = nope.shape
    amax = nope.float().abs().reshape(t, r // QUANT_GROUP, QUANT_GROUP).amax(dim=-1)
    # an all-zero group gets scale 1 (any positive scale encodes zeros exactly)
    scale = torch.where(amax > 0, amax / FP8_E4M3_MAX, torch.ones_like(amax))
    if scale_format == "pow2_fp32":
        scale = torch.exp2(torch.ceil(torch.log2(scale)))
    return scale.to(torch.float32)


def pack_fp8_ds_mla(
    nope: torch.Tensor,
    rope: torch.Tensor | None = None,
    *,
    scale_format: str = "arbitrary_fp32",
) -> torch.Tensor:
    """Quantize ``nope [T, R]`` and append ``rope [T, rope_dim]`` (bf16) into uint8 rows.

    ``rope=None`` (or a ``[T, 0]`` tensor) gives the 528-byte NoPE row for R = 512.
    Returns ``uint8 [T, row_bytes(R, rope_dim)]`` on ``nope``'s device.
    """
    import torch

    if nope.ndim != 2:
        raise ValueError(f"nope must be [T, kv_lora_rank], got {tuple(nope.shape)}")
    t, r = nope.shape
    rope_dim = 0 if rope is None else int(rope.shape[-1])
    if rope is not None and (rope.ndim != 2 or rope.shape[0] != t):
        raise ValueError(f"rope must be [T={t}, rope_dim], got {tuple(rope.shape)}")
    width = row_bytes(r, rope_dim)
    scale = compute_scales(nope, scale_format)  # [T, G]
    groups = scale.shape[1]
    q = (nope.float().reshape(t, groups, QUANT_GROUP) / scale.unsqueeze(-1)).clamp(
        -FP8_E4M3_MAX, FP8_E4M3_MAX
    )
    fp8 = q.reshape(t, r).to(torch.float8_e4m3fn)
    out = torch.empty((t, width), dtype=torch.uint8, device=nope.device)
    out[:, :r] = fp8.view(torch.uint8)
    out[:, r : r + 4 * groups] = scale.contiguous().view(torch.uint8).reshape(t, 4 * groups)
    if rope_dim:
        assert rope is not None
        rb = rope.to(torch.bfloat16).contiguous().view(torch.uint8).reshape(t, 2 * rope_dim)
        out[:, r + 4 * groups :] = rb
    return out


def unpack_fp8_ds_mla(
    rows: torch.Tensor, *, kv_lora_rank: int = 512, rope_dim: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Read rows back: ``(nope fp32 [T, R], rope fp32 [T, rope_dim])``.

    ``rows`` is ``uint8 [..., W]`` (any leading shape, e.g. pages ``[P, 64, 656]``; the result is
    flattened to ``T = prod(leading)``). ``rope_dim=None`` infers it from ``W``: 656 -> 64,
    528 -> 0. Padded rows (``W`` larger than the payload) need an explicit ``rope_dim``.
    """
    import torch

    if rows.dtype != torch.uint8:
        raise ValueError(f"rows must be uint8, got {rows.dtype}")
    w = rows.shape[-1]
    groups = kv_lora_rank // QUANT_GROUP
    if rope_dim is None:
        rest = w - kv_lora_rank - 4 * groups
        if rest < 0 or rest % 2:
            raise ValueError(f"row width {w} does not fit kv_lora_rank {kv_lora_rank}")
        rope_dim = rest // 2
    need = row_bytes(kv_lora_rank, rope_dim)
    if w < need:
        raise ValueError(f"row width {w} < {need} bytes needed for rope_dim {rope_dim}")
    flat = rows.reshape(-1, w)
    t = flat.shape[0]
    fp8 = flat[:, :kv_lora_rank].contiguous().view(torch.float8_e4m3fn).float()
    scale = flat[:, kv_lora_rank : kv_lora_rank + 4 * groups].contiguous().view(torch.float32)
    nope = (fp8.reshape(t, groups, QUANT_GROUP) * scale.unsqueeze(-1)).reshape(t, kv_lora_rank)
    start = kv_lora_rank + 4 * groups
    if rope_dim:
        rope = flat[:, start : start + 2 * rope_dim].contiguous().view(torch.bfloat16).float()
    else:
        rope = torch.zeros((t, 0), dtype=torch.float32, device=rows.device)
    return nope, rope


def quantization_bound(nope: torch.Tensor, scale_format: str = "arbitrary_fp32") -> torch.Tensor:
    """Per-element worst-case |x - dequant(quant(x))| for ``nope``: half an e4m3 ulp at |x|.

    e4m3 has 3 mantissa bits: for |x|/scale in [2^e, 2^(e+1)) the spacing is 2^(e-3); below the
    normal range (2^-6) the subnormal spacing 2^-9 applies.
    """
    import torch

    scale = compute_scales(nope, scale_format)
    t, r = nope.shape
    x = (nope.float().reshape(t, -1, QUANT_GROUP) / scale.unsqueeze(-1)).abs()
    e = torch.floor(torch.log2(x.clamp(min=2.0**-6)))
    ulp = torch.exp2(e - 3)
    return (0.5 * ulp * scale.unsqueeze(-1)).reshape(t, r)
