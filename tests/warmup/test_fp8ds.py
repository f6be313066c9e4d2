"""fp8_ds_mla packing: byte layout, round-trip error bounds, NoPE rows."""

from __future__ import annotations

import pytest
import torch  # tests/requirements.txt installs it: a missing torch fails, it does not skip

from sm120kit.models import fp8ds


def test_row_bytes() -> None:
    assert fp8ds.row_bytes(512, 64) == 656
    assert fp8ds.row_bytes(512, 0) == 528
    assert fp8ds.row_bytes(256, 32) == 256 + 8 + 64
    with pytest.raises(ValueError):
        fp8ds.row_bytes(500, 64)


@pytest.mark.parametrize("fmt", fp8ds.SCALE_FORMATS)
def test_layout_bytes(fmt: str) -> None:
    g = torch.Generator().manual_seed(1)
    nope = torch.randn(7, 512, generator=g) * torch.tensor(
        [0.01, 1.0, 30.0, 500.0]
    ).repeat_interleave(128)
    rope = torch.randn(7, 64, generator=g)
    rows = fp8ds.pack_fp8_ds_mla(nope, rope, scale_format=fmt)
    assert rows.dtype == torch.uint8 and rows.shape == (7, 656)
    scales = rows[:, 512:528].contiguous().view(torch.float32)
    assert torch.equal(scales, fp8ds.compute_scales(nope, fmt))
    amax = nope.abs().reshape(7, 4, 128).amax(-1)
    if fmt == "arbitrary_fp32":
        assert torch.allclose(scales, amax / 448.0)
    else:
        m, _ = torch.frexp(scales)
        assert bool((m == 0.5).all()) and bool((scales * 448 >= amax).all())
        assert bool((scales * 448 / 2 < amax).all())
    # group g's fp8 bytes times its scale are the dequantized values
    fp8 = rows[:, :512].contiguous().view(torch.float8_e4m3fn).float()
    deq, rope_back = fp8ds.unpack_fp8_ds_mla(rows)
    assert torch.equal(deq, (fp8.reshape(7, 4, 128) * scales[..., None]).reshape(7, 512))
    assert torch.equal(rows[:, 528:].contiguous().view(torch.bfloat16), rope.to(torch.bfloat16))
    assert torch.equal(rope_back, rope.to(torch.bfloat16).float())


@pytest.mark.parametrize("fmt", fp8ds.SCALE_FORMATS)
def test_round_trip_error_bound(fmt: str) -> None:
    g = torch.Generator().manual_seed(2)
    nope = torch.randn(256, 512, generator=g) * 2.5
    nope[3] = 0.0  # an all-zero row
    nope[5, :128] = 1e-4  # a tiny group
    rope = torch.randn(256, 64, generator=g)
    deq, rope_back = fp8ds.unpack_fp8_ds_mla(fp8ds.pack_fp8_ds_mla(nope, rope, scale_format=fmt))
    err = (deq - nope).abs()
    bound = fp8ds.quantization_bound(nope, fmt)
    assert bool((err <= bound * (1 + 1e-6) + 1e-30).all())
    # relative: e4m3 keeps 3 mantissa bits, so normal values are within 2^-4 of themselves
    big = nope.abs() > nope.abs().amax() / 16
    assert float((err[big] / nope.abs()[big]).max()) <= 2.0**-4
    assert torch.equal(deq[3], torch.zeros(512))
    assert float((rope_back - rope).abs().max()) <= float(rope.abs().max()) * 2.0**-8


def test_nope_rows_and_pages() -> None:
    nope = torch.randn(128, 512)
    rows = fp8ds.pack_fp8_ds_mla(nope, None, scale_format="arbitrary_fp32")
    assert rows.shape == (128, 528)
    deq, rope = fp8ds.unpack_fp8_ds_mla(rows)
    assert rope.shape == (128, 0)
    # pages [2, 64, W] unpack the same as the flat rows
    deq_pages, _ = fp8ds.unpack_fp8_ds_mla(rows.view(2, 64, 528))
    assert torch.equal(deq, deq_pages)
    # a NoPE payload inside a padded 656-byte row
    padded = torch.zeros(128, 656, dtype=torch.uint8)
    padded[:, :528] = rows
    assert torch.equal(fp8ds.unpack_fp8_ds_mla(padded, rope_dim=0)[0], deq)
    with pytest.raises(ValueError):
        fp8ds.unpack_fp8_ds_mla(rows.float())
