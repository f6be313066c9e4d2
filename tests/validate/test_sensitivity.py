"""The acceptance matrix of issue 24: at max_model_len 2048 and 8192, with a sparse and a dense
indexer top-k, and default validate settings (``--dcp 4 --interleave 64``, nothing else), each
injected silent error fails (exit 3) and the correct server passes with BF16- and fp32-rounded
rank outputs. Real server processes (``fake_server.py``: the tiny model on the project's reference
DCP math; no SM120 GPU here); validate runs as the installed CLI in a subprocess."""

from __future__ import annotations

import pytest

from tests.validate.sensitivity import CASES, EXPECT, SPARSE_TOPK, _cli, measure


@pytest.mark.slow
@pytest.mark.parametrize("mml", [2048, 8192])
@pytest.mark.parametrize("dense", [False, True], ids=["sparse", "dense"])
def test_errors_fail_and_correct_passes(mml: int, dense: bool) -> None:
    got = measure(mml, mml if dense else SPARSE_TOPK, list(CASES), _cli)
    verdicts = {case: got[case]["rc"] for case in CASES}
    assert verdicts == EXPECT, {c: got[c]["summary"] for c in CASES}
    for case in ("correct_bf16", "correct_fp32"):
        assert got[case]["max_abs"] < 0.05 and got[case]["needles_lost"] == 0


def test_dcp2_dense_wrong_interleave_fails() -> None:
    """Issue 31: at DCP 2, max_model_len 1024, a dense top-k, a server reading its KV with
    interleave 1 (written with 64) passed (exit 0): only rank 0's newest rows differ, and the
    tail probe's long question had pushed the needle out of them. Now the tail probe loses its
    needle and validate exits 3; the correct server beside it still passes."""
    got = measure(1024, 1024, ["correct_bf16", "interleave_1"], _cli, dcp=2)
    assert got["interleave_1"]["rc"] == 3, got["interleave_1"]["summary"]
    assert got["interleave_1"]["needles_lost"] >= 1
    assert got["correct_bf16"]["rc"] == 0, got["correct_bf16"]["summary"]
