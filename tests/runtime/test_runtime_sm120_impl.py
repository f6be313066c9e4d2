"""The patched ``FlashInferMLASparseSM120Impl.forward_mqa`` of every release, run on CPU.

The worker (``rtworker.impl_case``) builds the real impl under a real ``VllmConfig`` with
``decode_context_parallel_size = N`` (DCP group stand-in, see ``rtworker.standins``), swaps only
the FlashInfer launcher and the Triton index helpers for sm120kit's reference implementations,
and runs ``forward_mqa`` once per DCP rank on a real fp8_ds_mla paged cache holding that rank's
tokens. Here, in a process without vLLM, the results are checked against
``sm120kit.warmup.reference`` computed over the dequantized *global* KV (``rt_expect``):

* ``(out, lse)`` shapes come from ``q.shape[1]`` (H_local x N heads after the DCP query gather);
* each rank's out/LSE equal the reference over the ids that rank owns, LSE in base 2, which is
  what ``lse_base_on_e = False`` declares; merging the ranks in base 2 gives the full attention,
  merging them in base e does not;
* a token with no local key -> out 0 and LSE -inf on that rank; FlashInfer got the per-token
  valid counts as ``seq_lens`` and never ``sparse_mla_top_k_lens``;
* DCP = 1: bit-identical output to the unpatched impl with the same stand-ins, no LSE.
"""

from __future__ import annotations

import inspect
from functools import cache
from typing import Any

import pytest

from sm120kit.warmup.reference import trtllm_batch_decode_with_kv_cache_mla_ref
from tests.runtime.rt_expect import (
    LSE_ATOL,
    OUT_ATOL,
    OUT_RTOL,
    RELEASES,
    expected,
    max_excess,
    owned_counts,
    release_key,
)

H_LOCAL = 4
SCALE = 0.0721
# dcp4_undefined_empty_rows: the FlashInfer stand-in writes junk into rows without keys, as
# FlashInfer <= 0.7.0.post1 (pinned by vLLM <= 0.32) may; the backend must still mask them
# 0.25 (the v0.25 variant) and the two ends of the v0.26-0.29 family, then every 0.30+ release
IMPL_RELEASES = ("0.25.1", "0.26.0", "0.29.0", *RELEASES)
DCP_SCENARIOS = ["dcp2", "dcp4", "dcp8", "dcp2_i4", "dcp4_b128", "dcp4_undefined_empty_rows"]


def _dcp_scenarios(release: str) -> list[str]:
    """0.34 pins FlashInfer 0.7.3, whose SM120 wrapper defines rows without keys (out 0, LSE
    -inf, since 0.7.2): its variant drops the backend masking, so the scenario emulating an
    older FlashInfer's undefined rows does not apply there."""
    if release_key(release) >= (0, 34):
        return [n for n in DCP_SCENARIOS if n != "dcp4_undefined_empty_rows"]
    return DCP_SCENARIOS


@cache
def _load(path: str) -> dict[str, Any]:
    import torch

    return torch.load(path, weights_only=False)


def _scenario(runtime_results: Any, release: str, kind: str, name: str) -> tuple[dict, dict]:
    res = runtime_results.ok(release, kind).result["impl"][name]
    return res, _load(res["file"])


@pytest.mark.parametrize("release", IMPL_RELEASES)
def test_class_contract_and_dcp_bookkeeping(runtime_results: Any, release: str) -> None:
    for name in _dcp_scenarios(release):
        res, _ = _scenario(runtime_results, release, "patched", name)
        sc = res["scenario"]
        assert len(res["ranks"]) == sc["dcp"]
        for r in res["ranks"]:
            assert "error" not in r, r.get("error")
            ct = r["contract"]
            # set on the class itself: AttentionImplBase.__new__ reads them before __init__
            assert ct["class_dict"] == {
                "can_return_lse_for_decode": True,
                "supports_dcp": True,
                "lse_base_on_e": False,
                "supports_mtp_with_cp_non_trivial_interleave_size": True,
            }
            assert ct["need_to_return_lse_for_decode"] is True
            assert (ct["dcp_world_size"], ct["dcp_rank"]) == (sc["dcp"], r["rank"])
            assert ct["num_heads"] == H_LOCAL
            assert ct["kv_scale_format"] == "pow2_fp32"


@pytest.mark.parametrize("release", IMPL_RELEASES)
def test_out_and_lse_shapes_follow_q(runtime_results: Any, release: str) -> None:
    for name in _dcp_scenarios(release):
        res, data = _scenario(runtime_results, release, "patched", name)
        n = res["scenario"]["dcp"]
        t, heads = data["inputs"]["q"].shape[:2]
        assert heads == H_LOCAL * n
        for r, saved in zip(res["ranks"], data["ranks"], strict=True):
            assert r["out"] == {"shape": [t, heads, 512], "dtype": "torch.bfloat16"}
            assert r["lse"] == {"shape": [t, heads], "dtype": "torch.float32"}
            (launch,) = r["launches"]
            assert launch["out"]["shape"] == [t, 1, heads, 512]
            assert launch["lse"]["shape"] == [t, heads]
            assert launch["return_lse"] is True
            assert saved["out"].shape == (t, heads, 512)


@pytest.mark.parametrize("release", IMPL_RELEASES)
def test_per_rank_values_match_reference(runtime_results: Any, release: str) -> None:
    import torch

    for name in _dcp_scenarios(release):
        res, data = _scenario(runtime_results, release, "patched", name)
        sc = res["scenario"]
        inp = data["inputs"]
        for rank, saved in enumerate(data["ranks"]):
            want_out, want_lse = expected(inp, sc["dcp"], sc["interleave"], rank, scale=SCALE)
            out, lse = saved["out"], saved["lse"]
            assert torch.isfinite(out.float()).all()
            excess = max_excess(out, want_out, OUT_ATOL, OUT_RTOL)
            assert excess <= 0, f"{name} rank {rank}: out off by {excess} beyond tolerance"
            assert torch.equal(torch.isinf(lse), torch.isinf(want_lse)), f"{name} rank {rank}"
            assert max_excess(lse, want_lse, LSE_ATOL, 0.0) <= 0, f"{name} rank {rank}: lse"


@pytest.mark.parametrize("release", IMPL_RELEASES)
def test_lse_base_is_the_declared_one(runtime_results: Any, release: str) -> None:
    """The impl's LSE is base 2, as ``lse_base_on_e = False`` says; merging the ranks' partial
    results in that base reproduces attention over every top-k id, in base e it does not."""
    import torch

    from sm120kit.warmup.reference import weighted_combine

    for name in _dcp_scenarios(release):
        res, data = _scenario(runtime_results, release, "patched", name)
        sc = res["scenario"]
        inp = data["inputs"]
        declared = "e" if res["ranks"][0]["contract"]["class_value"]["lse_base_on_e"] else "2"
        assert declared == "2"
        lse0 = data["ranks"][0]["lse"]
        _, lse_e = expected(inp, sc["dcp"], sc["interleave"], 0, scale=SCALE, base="e")
        finite = torch.isfinite(lse_e)
        assert float((lse0[finite] - lse_e[finite]).abs().max()) > 0.1, "LSE looks base e"
        outs = torch.stack([r["out"].float() for r in data["ranks"]])
        lses = torch.stack([r["lse"] for r in data["ranks"]])
        full_out, full_lse = expected(inp, sc["dcp"], sc["interleave"], None, scale=SCALE)
        merged, merged_lse = weighted_combine(outs, lses, base=declared)
        assert max_excess(merged, full_out, 2e-3, 2.0**-7) <= 0, name
        assert max_excess(merged_lse, full_lse, 1e-3, 0.0) <= 0, name
        wrong, _ = weighted_combine(outs, lses, base="e")
        assert max_excess(wrong, full_out, 2e-3, 2.0**-7) > 0, "base e merge should not match"


@pytest.mark.parametrize("release", IMPL_RELEASES)
def test_empty_local_rows_are_masked(runtime_results: Any, release: str) -> None:
    import torch

    for name in _dcp_scenarios(release):
        res, data = _scenario(runtime_results, release, "patched", name)
        sc = res["scenario"]
        inp = data["inputs"]
        for rank, saved in enumerate(data["ranks"]):
            counts = owned_counts(inp, sc["dcp"], sc["interleave"], rank)
            empty = counts == 0
            assert bool(empty[4]), "token 4 (all -1) is empty on every rank"
            assert bool(empty[3]) == (rank != 0), "token 3 has keys on rank 0 only"
            out, lse = saved["out"], saved["lse"]
            assert bool((out[empty] == 0).all()), f"{name} rank {rank}: empty row out != 0"
            assert bool((lse[empty] == float("-inf")).all()), f"{name} rank {rank}: lse"
            assert bool(torch.isfinite(lse[~empty]).all())
            # FlashInfer saw the valid counts as seq_lens, and no top-k length argument
            (launch,) = saved["launch"]
            assert torch.equal(launch["seq_lens"], counts), f"{name} rank {rank}: seq_lens"
            r = res["ranks"][rank]
            assert "sparse_mla_top_k_lens" not in r["launches"][0]
            (conv,) = r["conversions"]
            assert conv["fn"] == "triton_filter_and_convert_dcp_index"
            assert conv["kwargs"]["return_valid_counts"] is True
            assert (conv["kwargs"]["dcp_size"], conv["kwargs"]["dcp_rank"]) == (sc["dcp"], rank)
            assert conv["kwargs"]["cp_kv_cache_interleave_size"] == sc["interleave"]
            # the physical rows handed to FlashInfer: a prefix of `count` ids, then -1
            bt = launch["block_tables"].squeeze(1)
            cols = torch.arange(bt.shape[1]).unsqueeze(0)
            assert torch.equal(bt >= 0, cols < counts.unsqueeze(1))


@pytest.mark.parametrize("release", IMPL_RELEASES)
def test_dcp1_equals_upstream(runtime_results: Any, release: str) -> None:
    import torch

    p_res, p = _scenario(runtime_results, release, "patched", "dcp1")
    u_res, u = _scenario(runtime_results, release, "upstream", "dcp1")
    (pr,), (ur,) = p_res["ranks"], u_res["ranks"]
    assert pr["lse"] is None and ur["lse"] is None
    assert pr["contract"]["need_to_return_lse_for_decode"] is False
    assert pr["conversions"][0]["fn"] == ur["conversions"][0]["fn"] == (
        "triton_convert_req_index_to_global_index"
    )
    assert pr["conversions"] == ur["conversions"]
    # the patch adds `lse=None, return_lse=False` to the call: FlashInfer's own defaults
    (pl,), (ul,) = pr["launches"], ur["launches"]
    extra = {k: pl[k] for k in pl.keys() - ul.keys()}
    base = extra.pop("return_lse_base", None)
    # 0.34 (FlashInfer 0.7.3) states the base FlashInfer defaults to; older pins lack the keyword
    assert base == ("base2" if release_key(release) >= (0, 34) else None)
    assert extra == {"lse": None, "return_lse": False}, extra
    defaults = inspect.signature(trtllm_batch_decode_with_kv_cache_mla_ref).parameters
    assert all(defaults[k].default == v for k, v in extra.items())
    assert {k: v for k, v in pl.items() if k not in extra and k != "return_lse_base"} == ul
    assert p["ranks"][0]["launch"][0]["seq_lens"] is None
    assert torch.equal(p["ranks"][0]["out"], u["ranks"][0]["out"]), "DCP=1 output differs"
    inp = p["inputs"]
    want, _ = expected(inp, 1, 1, None, scale=SCALE)
    assert max_excess(p["ranks"][0]["out"], want, OUT_ATOL, OUT_RTOL) <= 0


@pytest.mark.parametrize("release", IMPL_RELEASES)
def test_upstream_impl_fails_the_dcp_contract(runtime_results: Any, release: str) -> None:
    """The same DCP = 2 run on the unpatched impl: no LSE requested, and FlashInfer's shape check
    (reproduced by the reference launcher) rejects an ``out`` sized from ``self.num_heads``."""
    res, _ = _scenario(runtime_results, release, "upstream", "dcp2")
    for r in res["ranks"]:
        ct = r["contract"]
        assert ct["need_to_return_lse_for_decode"] is False
        assert ct["class_dict"]["supports_dcp"] == "<inherited>"
        assert "Invalid shape of out" in r.get("error", ""), r
