"""The KV interleave is read at forward time: the patched impl follows the value the engine
settles *after* building it (``rtworker.interleave_case`` says how, release by release).

vLLM builds the attention impl in ``load_model``; ``VllmConfig.adjust_dcp_kv_cache_interleave_size``
changes ``cp_kv_cache_interleave_size`` later (NIXL P/D with DCP -> the block size; the
deprecated ``--dcp-kv-cache-interleave-size`` under KV transfer). An impl that copied the value
in ``__init__`` converts top-k ids with interleave 1 onto KV written with interleave 64: every
rank attends to the wrong rows and nothing fails. Each case here checks the conversion keyword,
the valid counts handed to FlashInfer and the per-rank out/LSE against the reference computed
with the *final* interleave. Releases: those whose engine adjusts the interleave (0.29+).

MTP: with ``supports_mtp_with_cp_non_trivial_interleave_size`` declared, the release's own
``check_attention_cp_compatibility`` accepts a speculative config with interleave 64, and a batch
of 2 query tokens per request is converted per token.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.conftest import run_worker
from tests.runtime.rt_expect import LSE_ATOL, OUT_ATOL, OUT_RTOL, expected, max_excess, owned_counts

pytestmark = pytest.mark.slow  # one vLLM import per release (~40 s each on 2 cores)

RELEASES = ("0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")
SCALE = 0.0721


@cache
def _run(release: str, base: Path) -> dict[str, Any]:
    run = run_worker(release, "patched", "interleave", base / f"interleave-{release}",
                     "--release", release)
    assert run.rc == 0 and run.result.get("status") == "ok", run.describe()
    res: dict[str, Any] = run.result["interleave"]
    return res


@pytest.fixture(scope="module")
def outdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("interleave")


def _check_case(res: dict[str, Any], name: str) -> None:
    import torch

    c = res[name]
    dcp, final = c["case"]["dcp"], c["interleave_final"]
    assert c["interleave_at_build"] == 1
    assert final > 1, f"{name}: the engine's adjustment did not change the interleave"
    data = torch.load(c["file"], weights_only=False)
    inp = data["inputs"]
    for rank, (r, saved) in enumerate(zip(c["ranks"], data["ranks"], strict=True)):
        (conv,) = r["conversions"]
        assert conv["fn"] == "triton_filter_and_convert_dcp_index"
        assert conv["kwargs"]["cp_kv_cache_interleave_size"] == final, (
            f"{name} rank {rank}: converted with interleave "
            f"{conv['kwargs']['cp_kv_cache_interleave_size']}, the KV was written with {final}")
        counts = owned_counts(inp, dcp, final, rank)
        (launch,) = saved["launch"]
        assert torch.equal(launch["seq_lens"], counts), f"{name} rank {rank}: valid counts"
        want_out, want_lse = expected(inp, dcp, final, rank, scale=SCALE)
        assert max_excess(saved["out"], want_out, OUT_ATOL, OUT_RTOL) <= 0, f"{name} rank {rank}"
        assert torch.equal(torch.isinf(saved["lse"]), torch.isinf(want_lse))
        assert max_excess(saved["lse"], want_lse, LSE_ATOL, 0.0) <= 0, f"{name} rank {rank}"


@pytest.mark.parametrize("release", RELEASES)
def test_nixl_pd_interleave_settled_after_build(outdir: Path, release: str) -> None:
    res = _run(release, outdir)
    assert res["nixl_pd_dcp4"]["interleave_final"] == 64  # the local block size
    _check_case(res, "nixl_pd_dcp4")


@pytest.mark.parametrize("release", RELEASES)
def test_deprecated_dcp_interleave_flag_settled_after_build(outdir: Path, release: str) -> None:
    res = _run(release, outdir)
    # 0.30+: the deprecated flag wins for a non-NIXL connector; 0.29 then pins the block size
    # for any connector
    want = 64 if release == "0.29.0" else 16
    assert res["deprecated_flag_dcp2"]["interleave_final"] == want
    _check_case(res, "deprecated_flag_dcp2")


@pytest.mark.parametrize("release", RELEASES)
def test_mtp_with_interleave_64(outdir: Path, release: str) -> None:
    res = _run(release, outdir)
    c = res["nixl_pd_dcp4_mtp1"]
    assert c["mtp_check"] == "ok", c["mtp_check"]
    assert c["case"]["req_of_token"] == [0, 0, 1, 1, 2, 2]
    assert c["interleave_final"] == 64
    _check_case(res, "nixl_pd_dcp4_mtp1")
