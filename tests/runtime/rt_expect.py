"""Expected values for the runtime tests, computed in the pytest process (never beside vLLM).

The attention reference works on the *global* KV rows and the *global* top-k ids: a rank's
expected partial result attends to the ids that rank owns (``owner(t) = (t // I) % N``), looked
up directly in the concatenated per-request rows. No block table, no index conversion: the
patched code's conversion + paging is checked against arithmetic that never used either.
"""

from __future__ import annotations

from typing import Any

RELEASES = ("0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")

# bf16 output: one rounding of a value computed in fp32 (relative half-ulp 2^-9) plus fp32
# summation-order differences (~1e-6); rtol 2^-8 = one bf16 ulp leaves margin for both.
OUT_ATOL = 1e-4
OUT_RTOL = 2.0**-8
LSE_ATOL = 1e-4


def release_key(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split("."))


def owned_global_rows(inp: dict[str, Any], dcp: int, interleave: int, rank: int | None) -> Any:
    """``[T, K]`` rows into ``inp["rows"]`` of the top-k ids that ``rank`` owns (None: all)."""
    import torch

    topk = inp["topk"].to(torch.int64)
    offsets = inp["offsets"]
    req = inp["req_of_token"].to(torch.int64)
    valid = topk >= 0
    if rank is not None:
        valid &= ((topk.clamp(min=0) // interleave) % dcp) == rank
    rows = offsets[req].unsqueeze(1) + topk
    return torch.where(valid, rows, torch.full_like(rows, -1))


def expected(inp: dict[str, Any], dcp: int, interleave: int, rank: int | None, *, scale: float,
             base: str = "2") -> tuple[Any, Any]:
    """Reference ``(out fp32 [T, H, 512], lse fp32 [T, H])`` over the dequantized global KV."""
    from sm120kit.models.fp8ds import unpack_fp8_ds_mla
    from sm120kit.warmup.reference import sparse_mla_decode

    nope, rope = unpack_fp8_ds_mla(inp["rows"])
    idx = owned_global_rows(inp, dcp, interleave, rank)
    return sparse_mla_decode(inp["q"], nope, rope, idx, None, softmax_scale=scale, lse_base=base)


def owned_counts(inp: dict[str, Any], dcp: int, interleave: int, rank: int) -> Any:
    import torch

    return (owned_global_rows(inp, dcp, interleave, rank) >= 0).sum(dim=1).to(torch.int32)


def max_excess(got: Any, want: Any, atol: float, rtol: float) -> float:
    """max(|got - want| - (atol + rtol |want|)) over finite entries; <= 0 means within tolerance."""
    import torch

    g, w = got.float(), want.float()
    finite = torch.isfinite(w)
    if not bool(finite.any()):
        return float("-inf")
    diff = (g - w).abs() - (atol + rtol * w.abs())
    return float(diff[finite].max())
