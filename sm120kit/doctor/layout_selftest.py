"""fp8_ds_mla pack/unpack self-test (``doctor --layout``), run as a subprocess (torch, CPU).

Packs synthetic KV rows with ``sm120kit.models.fp8ds`` in both row layouts (656 B: 512 fp8 e4m3 +
4 fp32 scales + 64 bf16 rope; 528 B: no rope) and both scale formats, then checks the byte
layout (scales at bytes 512..528 read back as the computed fp32 scales; pow2 scales are powers
of two; rope bytes are the bf16 values) and the round trip (|x - unpack(pack(x))| within the
e4m3 half-ulp bound, rope exact in bf16). Prints one JSON object.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from sm120kit.models import fp8ds


def run() -> dict[str, Any]:
    try:
        import torch
    except Exception as exc:
        return {"status": "skip", "reason": f"torch is not importable: {exc}"}
    g = torch.Generator().manual_seed(1234)
    t = 257
    # magnitudes spanning small, typical and large activations, plus an all-zero group
    nope = torch.randn(t, 512, generator=g) * torch.logspace(-3, 2, t).unsqueeze(1)
    nope[0, :128] = 0.0
    rope = torch.randn(t, 64, generator=g) * 3.0
    cases = [_case(nope, rope if rope_dim else None, fmt)
             for fmt in fp8ds.SCALE_FORMATS for rope_dim in (64, 0)]
    bad = [c for c in cases if c["errors"]]
    return {"status": "fail" if bad else "ok", "cases": cases,
            "reason": "; ".join(e for c in bad for e in c["errors"]) or None}


def _case(nope: Any, rope: Any, fmt: str) -> dict[str, Any]:
    """Pack ``nope`` (and ``rope``, None for NoPE) in ``fmt``; check the layout and round trip."""
    import torch

    t, rope_dim = nope.shape[0], 0 if rope is None else rope.shape[1]
    rows = fp8ds.pack_fp8_ds_mla(nope, rope, scale_format=fmt)
    want = fp8ds.row_bytes(512, rope_dim)
    c: dict[str, Any] = {"scale_format": fmt, "rope_dim": rope_dim,
                         "row_bytes": int(rows.shape[1]), "expected_row_bytes": want}
    errs: list[str] = []
    if rows.dtype != torch.uint8 or rows.shape != (t, want):
        errs.append(f"packed shape {tuple(rows.shape)} {rows.dtype}, want ({t}, {want})")
    scales = rows[:, 512:528].contiguous().view(torch.float32)
    if not torch.equal(scales, fp8ds.compute_scales(nope, fmt).float()):
        errs.append("scale bytes 512..528 are not the fp32 group scales")
    if fmt == "pow2_fp32":
        pos = scales[scales > 0]
        if not torch.equal(torch.exp2(torch.log2(pos).round()), pos):
            errs.append("pow2_fp32 scales are not powers of two")
    back_nope, back_rope = fp8ds.unpack_fp8_ds_mla(rows, kv_lora_rank=512)
    err = (back_nope - nope).abs()
    excess = (err - fp8ds.quantization_bound(nope, fmt)).max().item()
    c["max_abs_err"] = float(err.max().item())
    c["max_rel_err"] = float((err / nope.abs().clamp(min=1e-6)).max().item())
    if excess > 1e-6 * float(nope.abs().max().item()):
        errs.append(f"round-trip error exceeds the e4m3 bound by {excess:.3g}")
    if rope is not None:
        if not torch.equal(back_rope, rope.bfloat16().float()):
            errs.append("rope values do not round-trip as bf16")
        if not torch.equal(rows[:, 528:656].contiguous().view(torch.bfloat16), rope.bfloat16()):
            errs.append("rope bytes 528..656 are not the bf16 rope values")
    elif back_rope.shape[1] != 0:
        errs.append("NoPE rows unpacked a rope part")
    c["errors"] = errs
    return c


def main() -> int:
    print(json.dumps(run()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
