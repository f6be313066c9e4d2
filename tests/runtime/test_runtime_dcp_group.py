"""The patched SM120 impl in a real 2-process vLLM DCP group (torch.distributed, gloo on CPU).

The single-process tests use a DCP group stand-in (``rtworker.standins``). This test removes it
for one release (0.33.0, the series' base release): two processes join vLLM's own
``init_distributed_environment``/``initialize_model_parallel`` with DCP = 2, the impl reads its
rank from the real group, and each rank's ``(out, lse)`` must be bit-identical to the stand-in
run of the same rank. The ranks then all-gather their partial results through the real DCP
group; merging them with the declared base-2 LSE gives attention over every top-k id.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.runtime.rt_expect import expected, max_excess

SCALE = 0.0721
RELEASE = "0.33.0"


@pytest.mark.slow  # a real vLLM DCP group over gloo: ~75 s
def test_real_gloo_dcp_group_matches_stand_in(runtime_results: Any) -> None:
    import torch

    from sm120kit.warmup.reference import lse_merge_ag_rs

    runs = runtime_results.gloo(RELEASE, 2)
    for r in runs:
        assert r.rc == 0 and r.result.get("status") == "ok", r.describe()
    single = runtime_results.ok(RELEASE, "patched").result["impl"]["dcp2"]
    single_data = torch.load(single["file"], weights_only=False)
    inp = single_data["inputs"]
    gathered = []
    for rank, run in enumerate(runs):
        g = run.result["gloo"]
        assert g["scenario"] == "dcp2"
        assert (g["group_world_size"], g["group_rank"]) == (2, rank)
        assert g["impl_dcp"] == [2, rank] and g["need_lse"] is True
        data = torch.load(g["file"], weights_only=False)
        assert torch.equal(data["out"], single_data["ranks"][rank]["out"])
        assert torch.equal(data["lse"], single_data["ranks"][rank]["lse"])
        gathered.append(data)
    # both ranks gathered the same (out, lse) of both ranks through the real group
    for data in gathered:
        assert torch.equal(data["outs"], gathered[0]["outs"])
        assert torch.equal(data["lses"], gathered[0]["lses"])
    outs, lses = gathered[0]["outs"], gathered[0]["lses"]
    assert torch.equal(outs[1], gathered[1]["out"].float())
    merged, merged_lse = lse_merge_ag_rs(list(outs), list(lses), base="2")
    full_out, full_lse = expected(inp, 2, 1, None, scale=SCALE)
    h = full_out.shape[1] // 2
    for rank in range(2):
        sl = slice(rank * h, (rank + 1) * h)
        assert max_excess(merged[rank], full_out[:, sl], 2e-3, 2.0**-7) <= 0
        assert max_excess(merged_lse[rank], full_lse[:, sl], 1e-3, 0.0) <= 0
