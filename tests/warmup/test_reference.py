"""Reference math: index conversion vs a Python loop, attention vs a loop, merges vs one rank,
and the drop-in signatures vs the real vLLM 0.33.0 / FlashInfer 0.7.2.post1 sources."""

from __future__ import annotations

import ast
import inspect
import math
import zipfile
from typing import Any

import pytest
import torch  # tests/requirements.txt installs it: a missing torch fails, it does not skip

from sm120kit.models import dcp as P
from sm120kit.models.fp8ds import pack_fp8_ds_mla, unpack_fp8_ds_mla
from sm120kit.warmup import reference as R
from tests.support import releases


def brute_convert(req, bt, ti, n, rank, i, b, stride, compact=True):
    """The kernel's per-slot rule written as a Python loop."""
    out, counts = [], []
    for t in range(len(ti)):
        row = []
        for tok in ti[t]:
            if tok < 0:
                row.append(-1)
                continue
            if (tok // i) % n != rank:
                row.append(-1)
                continue
            loc = (tok // (n * i)) * i + tok % i
            blk = loc // b
            if blk >= len(bt[req[t]]):
                row.append(-1)
                continue
            row.append(bt[req[t]][blk] * stride + loc % b)
        valid = [x for x in row if x != -1]
        counts.append(len(valid))
        out.append(valid + [-1] * (len(row) - len(valid)) if compact else row)
    return out, counts


@pytest.mark.parametrize(
    "n,i,stride", [(1, 1, 64), (2, 1, 64), (4, 2, 64), (8, 64, 64), (4, 1, 192)]
)
def test_conversion_matches_loop(n: int, i: int, stride: int) -> None:
    g = torch.Generator().manual_seed(n * 100 + i)
    b, k, nreq, t = 64, 256, 3, 6
    bt = torch.randint(0, 50, (nreq, 5), generator=g, dtype=torch.int32)
    req = torch.randint(0, nreq, (t,), generator=g, dtype=torch.int32)
    ti = torch.randint(
        0, 5 * b * n + 200, (t, k), generator=g, dtype=torch.int32
    )  # some past the table
    ti[torch.rand((t, k), generator=g) < 0.2] = -1
    ti[1] = -1  # an all-padding row
    for rank in range(n):
        phys, cnt = R.filter_and_convert_dcp_index(
            req,
            bt,
            ti,
            dcp_size=n,
            dcp_rank=rank,
            interleave=i,
            block_size=b,
            block_stride_rows=stride,
        )
        exp, ecnt = brute_convert(req.tolist(), bt.tolist(), ti.tolist(), n, rank, i, b, stride)
        assert phys.dtype == torch.int32 and cnt.dtype == torch.int32
        assert phys.tolist() == exp and cnt.tolist() == ecnt
        assert cnt[1] == 0 and bool((phys[1] == -1).all())
    # owned sets partition the non-padding, in-range slots
    if n > 1:
        total = sum(
            R.filter_and_convert_dcp_index(
                req,
                bt,
                ti,
                dcp_size=n,
                dcp_rank=r,
                interleave=i,
                block_size=b,
                block_stride_rows=stride,
            )[1]
            for r in range(n)
        )
        assert bool((total <= (ti >= 0).sum(1)).all())


def test_dropins_match_core_and_vllm_semantics() -> None:
    g = torch.Generator().manual_seed(5)
    bt = torch.randint(0, 30, (2, 4), generator=g, dtype=torch.int32)
    req = torch.tensor([0, 1, 1], dtype=torch.int32)
    ti = torch.randint(-1, 4 * 64 * 2, (3, 128), generator=g, dtype=torch.int32)
    # dcp_size == 1 -> global conversion; compaction only with valid counts (as vLLM)
    plain = R.triton_filter_and_convert_dcp_index_ref(req, bt, ti, 1, 0, NUM_TOPK_TOKENS=128)
    exp, _ = brute_convert(req.tolist(), bt.tolist(), ti.tolist(), 1, 0, 1, 64, 64, compact=False)
    assert plain.tolist() == exp
    comp, cnt = R.triton_filter_and_convert_dcp_index_ref(
        req, bt, ti, 1, 0, NUM_TOPK_TOKENS=128, return_valid_counts=True
    )
    core = R.filter_and_convert_dcp_index(req, bt, ti, dcp_size=1, dcp_rank=0)
    assert torch.equal(comp, core[0]) and torch.equal(cnt, core[1])
    # dcp > 1 compacts by default even without counts; can be switched off
    a = R.triton_filter_and_convert_dcp_index_ref(req, bt, ti, 2, 1, NUM_TOPK_TOKENS=128)
    assert torch.equal(a, R.filter_and_convert_dcp_index(req, bt, ti, dcp_size=2, dcp_rank=1)[0])
    inplace = R.triton_filter_and_convert_dcp_index_ref(
        req, bt, ti, 2, 1, NUM_TOPK_TOKENS=128, compact_valid_to_front=False
    )
    exp2, _ = brute_convert(req.tolist(), bt.tolist(), ti.tolist(), 2, 1, 1, 64, 64, compact=False)
    assert inplace.tolist() == exp2
    # out= / valid_counts_out= are filled in place
    out = torch.empty_like(ti)
    vco = torch.empty(3, dtype=torch.int32)
    r = R.triton_convert_req_index_to_global_index_ref(
        req, bt, ti, NUM_TOPK_TOKENS=128, return_valid_counts=True, out=out, valid_counts_out=vco
    )
    assert r[0] is out and r[1] is vco and torch.equal(out, comp)
    # idx_mapping: block table row per request
    mapped = R.triton_convert_req_index_to_global_index_ref(
        torch.tensor([0, 0, 0], dtype=torch.int32),
        bt,
        ti,
        NUM_TOPK_TOKENS=128,
        idx_mapping=torch.tensor([1], dtype=torch.int32),
    )
    exp3, _ = brute_convert([1, 1, 1], bt.tolist(), ti.tolist(), 1, 0, 1, 64, 64, compact=False)
    assert mapped.tolist() == exp3
    # the asserts vLLM makes
    with pytest.raises(AssertionError):
        R.triton_filter_and_convert_dcp_index_ref(req, bt, ti, 2, 0, 48, NUM_TOPK_TOKENS=128)
    with pytest.raises(AssertionError):
        R.triton_filter_and_convert_dcp_index_ref(req, bt, ti.long(), 2, 0, NUM_TOPK_TOKENS=128)
    with pytest.raises(AssertionError):
        R.triton_filter_and_convert_dcp_index_ref(req, bt, ti, 2, 0)  # NUM_TOPK_TOKENS 2048


def test_prefill_workspace_mapping() -> None:
    """HAS_PREFILL_WORKSPACE rows map to owner * rank_stride + start + local, never dropped."""
    bt = torch.zeros((1, 4), dtype=torch.int32)
    ti = torch.tensor(
        [[0, 1, 2, 3, -1] + [-1] * 123, [4, 5, 6, 7, -1] + [-1] * 123], dtype=torch.int32
    )
    out = R.triton_convert_req_index_to_global_index_ref(
        torch.zeros(2, dtype=torch.int32),
        bt,
        ti,
        NUM_TOPK_TOKENS=128,
        HAS_PREFILL_WORKSPACE=True,
        prefill_workspace_request_ids=torch.tensor([-1, 0], dtype=torch.int32),
        prefill_workspace_starts=torch.tensor([10], dtype=torch.int32),
        prefill_workspace_rank_stride=100,
        dcp_size=2,
        dcp_rank=0,
    )
    assert out[0, :5].tolist() == [0, -1, 1, -1, -1]  # decode row: rank-0 slots only
    assert out[1, :5].tolist() == [
        12,
        112,
        13,
        113,
        -1,
    ]  # tokens 4..7: owners 0,1,0,1; local 2,2,3,3


def loop_attention(q, lat, rope, idx, counts, scale):
    t, h, _ = q.shape
    r = lat.shape[1]
    out = torch.zeros(t, h, r, dtype=torch.float64)
    lse = torch.full((t, h), -math.inf, dtype=torch.float64)
    for ti in range(t):
        sel = [
            int(x) for j, x in enumerate(idx[ti]) if x >= 0 and (counts is None or j < counts[ti])
        ]
        if not sel:
            continue
        kl = lat[sel].double()
        kr = rope[sel].double()
        for hi in range(h):
            s = (kl @ q[ti, hi, :r].double() + kr @ q[ti, hi, r:].double()) * scale
            m = s.max()
            w = torch.exp(s - m)
            lse[ti, hi] = (m + torch.log(w.sum())) / math.log(2)
            out[ti, hi] = (w / w.sum()) @ kl
    return out, lse


def test_sparse_mla_decode_vs_loop() -> None:
    g = torch.Generator().manual_seed(7)
    rows, t, h, k = 300, 4, 3, 128
    lat = torch.randn(rows, 512, generator=g)
    rope = torch.randn(rows, 64, generator=g)
    q = torch.randn(t, h, 576, generator=g)
    idx = torch.randint(0, rows, (t, k), generator=g, dtype=torch.int32)
    idx[0, 50:] = -1
    idx[2] = -1
    counts = torch.tensor([128, 40, 128, 0], dtype=torch.int32)
    scale = 1 / math.sqrt(576)
    out, lse = R.sparse_mla_decode(q, lat, rope, idx, counts, softmax_scale=scale)
    eo, el = loop_attention(q, lat, rope, idx, counts.tolist(), scale)
    assert float((out.double() - eo).abs().max()) < 1e-5
    fin = torch.isfinite(el)
    assert float((lse.double()[fin] - el[fin]).abs().max()) < 1e-5
    assert bool(torch.isinf(lse[2]).all()) and bool(torch.isinf(lse[3]).all())
    assert bool((out[2] == 0).all()) and bool((out[3] == 0).all())
    _, lse_e = R.sparse_mla_decode(q, lat, rope, idx, counts, softmax_scale=scale, lse_base="e")
    assert torch.allclose(lse_e[fin], lse[fin] * math.log(2), atol=1e-5)


def _sharded_partials(n, i, b, seq, idx, q, lat, rope, base):
    outs, lses = [], []
    for rank in range(n):
        ll = P.local_len(seq, rank, n, i)
        nb = max(P.cdiv(ll, b), 1)
        bt = (torch.arange(nb, dtype=torch.int32) * 2 + 1).unsqueeze(0)  # non-identity pages
        rl = torch.zeros(bt.max().item() * b + b, 512)
        rr = torch.zeros_like(rl[:, :64])
        loc = torch.arange(ll)
        glob = torch.tensor([P.global_index(x, rank, n, i) for x in range(ll)], dtype=torch.long)
        phys = bt[0, loc // b].long() * b + loc % b
        rl[phys] = lat[glob]
        rr[phys] = rope[glob]
        p, c = R.filter_and_convert_dcp_index(
            torch.zeros(q.shape[0], dtype=torch.int32),
            bt,
            idx,
            dcp_size=n,
            dcp_rank=rank,
            interleave=i,
            block_size=b,
        )
        o, lse = R.sparse_mla_decode(q, rl, rr, p, c, softmax_scale=0.05, lse_base=base)
        outs.append(o)
        lses.append(lse)
    return outs, lses


@pytest.mark.parametrize("n,i,base", [(2, 1, "2"), (4, 64, "e"), (8, 1, "2"), (8, 2, "e")])
def test_merges_equal_single_rank(n: int, i: int, base: str) -> None:
    g = torch.Generator().manual_seed(n + i)
    seq, t, h = 1200, 3, 2
    lat = torch.randn(seq, 512, generator=g)
    rope = torch.randn(seq, 64, generator=g)
    q = torch.randn(t, h * n, 576, generator=g)
    idx = torch.stack([torch.randperm(seq, generator=g)[:256] for _ in range(t)]).to(torch.int32)
    idx[1, 10:] = -1
    idx[2] = -1
    idx[2, :3] = torch.tensor([0, n * i, 2 * n * i], dtype=torch.int32)  # all owned by rank 0
    outs, lses = _sharded_partials(n, i, 64, seq, idx, q, lat, rope, base)
    assert any(bool(torch.isinf(x[2]).all()) for x in lses[1:])  # some rank owns nothing in row 2
    ref_o, ref_l = R.sparse_mla_decode(q, lat, rope, idx, None, softmax_scale=0.05, lse_base=base)
    for merge in (R.lse_merge_ag_rs, R.lse_merge_a2a):
        mo, ml = merge(outs, lses, base)
        assert len(mo) == n and mo[0].shape == (t, h, 512)
        assert float((torch.cat(mo, 1) - ref_o).abs().max()) < 1e-4
        assert float((torch.cat(ml, 1) - ref_l).abs().max()) < 1e-4


def test_merge_all_empty_rows() -> None:
    outs = [torch.zeros(1, 4, 8) for _ in range(2)]
    lses = [torch.full((1, 4), -math.inf) for _ in range(2)]
    for merge in (R.lse_merge_ag_rs, R.lse_merge_a2a):
        mo, ml = merge(outs, lses, "2")
        assert bool((torch.cat(mo, 1) == 0).all()) and bool(torch.isinf(torch.cat(ml, 1)).all())


def _fi_args(q: torch.Tensor, cache: torch.Tensor, ws: torch.Tensor, bt: torch.Tensor,
             seq_lens: torch.Tensor) -> dict[str, Any]:
    """FlashInfer's keywords for a 576-wide v32 query over 128 top-k slots, scale 0.04."""
    return dict(query=q, kv_cache=cache, workspace_buffer=ws, qk_nope_head_dim=128,
                kv_lora_rank=512, qk_rope_head_dim=64, block_tables=bt, seq_lens=seq_lens,
                max_seq_len=128, sparse_mla_top_k=128, bmm1_scale=0.04)


def test_trtllm_ref_against_dequantized() -> None:
    g = torch.Generator().manual_seed(11)
    pages, rows = 4, 4 * 64
    nope = torch.randn(rows, 512, generator=g)
    rope = torch.randn(rows, 64, generator=g)
    for fmt in ("arbitrary_fp32", "pow2_fp32"):
        cache = pack_fp8_ds_mla(nope, rope, scale_format=fmt).view(pages, 64, 656)
        lat, rp = unpack_fp8_ds_mla(cache)
        q = torch.randn(2, 1, 8, 576, generator=g).to(torch.bfloat16)
        bt = torch.randint(0, rows, (2, 1, 128), generator=g, dtype=torch.int32)
        seq_lens = torch.tensor([100, 0], dtype=torch.int32)
        ws = torch.empty(16, dtype=torch.uint8)
        out, lse = R.trtllm_batch_decode_with_kv_cache_mla_ref(
            **_fi_args(q, cache.unsqueeze(1), ws, bt, seq_lens),
            bmm2_scale=1.0,
            return_lse=True,
            kv_scale_format=fmt,
        )
        assert out.dtype == torch.bfloat16 and out.shape == (2, 1, 8, 512) and lse.shape == (2, 8)
        eo, el = R.sparse_mla_decode(
            q.float().view(2, 8, 576), lat, rp, bt.view(2, 128), seq_lens, softmax_scale=0.04
        )
        assert float((out.float().view(2, 8, 512) - eo).abs().max()) < 2e-2  # bf16 output
        assert torch.allclose(lse[0], el[0], atol=1e-5) and bool(torch.isinf(lse[1]).all())
        assert bool((out[1] == 0).all())
    base = _fi_args(q, cache, ws, bt, seq_lens)
    with pytest.raises(ValueError, match="sparse_mla_top_k_lens is not supported"):
        R.trtllm_batch_decode_with_kv_cache_mla_ref(**base, sparse_mla_top_k_lens=seq_lens)
    with pytest.raises(ValueError, match="Invalid shape of out"):
        R.trtllm_batch_decode_with_kv_cache_mla_ref(
            **base, out=torch.empty(2, 1, 2, 512, dtype=torch.bfloat16)
        )
    with pytest.raises(ValueError, match="bmm2_scale"):
        R.trtllm_batch_decode_with_kv_cache_mla_ref(**base, bmm2_scale=0.5)
    with pytest.raises(ValueError, match="BF16"):
        R.trtllm_batch_decode_with_kv_cache_mla_ref(**{**base, "query": q.float()})
    # an arbitrary-scale cache is not a pow2 cache
    arb = pack_fp8_ds_mla(nope, rope, scale_format="arbitrary_fp32").view(pages, 64, 656)
    with pytest.raises(ValueError, match="power-of-two"):
        R.trtllm_batch_decode_with_kv_cache_mla_ref(**{**base, "kv_cache": arb})
    # base-e LSE into a caller buffer
    buf = torch.empty(2, 1, 8)
    _, l2 = R.trtllm_batch_decode_with_kv_cache_mla_ref(
        **{**base, "kv_cache": arb},
        kv_scale_format="arbitrary_fp32",
        lse=buf,
        return_lse=True,
        return_lse_base="basee",
    )
    al, ar = unpack_fp8_ds_mla(arb)
    _, el_e = R.sparse_mla_decode(
        q.float().view(2, 8, 576),
        al,
        ar,
        bt.view(2, 128),
        seq_lens,
        softmax_scale=0.04,
        lse_base="e",
    )
    assert l2 is buf and torch.allclose(buf.view(2, 8)[0], el_e[0], atol=1e-5)
    assert torch.allclose(el_e[0], el[0] * math.log(2), atol=0.05)  # same data, other rounding


def _signature_from_source(src: str, name: str) -> list[tuple[str, str | None]]:
    tree = ast.parse(src)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            args = node.args.args + node.args.kwonlyargs
            defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + list(
                node.args.defaults
            )
            defaults += list(node.args.kw_defaults)
            return [
                (a.arg, None if d is None else ast.unparse(d))
                for a, d in zip(args, defaults, strict=True)
            ]
    raise AssertionError(f"{name} not found")


def _our_signature(fn) -> list[tuple[str, str | None]]:
    out = []
    for p in inspect.signature(fn).parameters.values():
        d = None if p.default is inspect.Parameter.empty else repr(p.default)
        out.append((p.name, d))
    return out


def _wheel_source(project: str, version: str, member: str) -> str:
    whl = releases.wheel(project, version)
    with zipfile.ZipFile(whl) as zf:
        return zf.read(member).decode()


@pytest.mark.network
@pytest.mark.parametrize("version", ["0.33.0", "0.34.0"])
def test_dropin_signatures_match_vllm(version: str) -> None:
    src = _wheel_source("vllm", version, "vllm/v1/attention/backends/mla/sparse_utils.py")
    for ours, theirs in [
        (R.triton_filter_and_convert_dcp_index_ref, "triton_filter_and_convert_dcp_index"),
        (
            R.triton_convert_req_index_to_global_index_ref,
            "triton_convert_req_index_to_global_index",
        ),
    ]:
        assert _our_signature(ours) == _signature_from_source(src, theirs)


@pytest.mark.network
def test_dropin_signature_matches_flashinfer() -> None:
    src = _wheel_source("flashinfer-python", "0.7.2.post1", "flashinfer/mla/_core.py")
    theirs = _signature_from_source(src, "trtllm_batch_decode_with_kv_cache_mla")
    assert _our_signature(R.trtllm_batch_decode_with_kv_cache_mla_ref) == theirs
