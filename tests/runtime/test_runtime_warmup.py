"""The patched ``run_mixed_prefill_decode_warmup`` of every release, run for real.

The worker (``rtworker.warmup_case``) calls the release's function with a minimal model runner
(real ``VllmConfig``/``KVCacheConfig``/``MLAAttentionSpec``; see its docstring for the only
stand-ins) and recording ``execute_model``/``sample_tokens`` callbacks, for DCP in {1, 2, 4, 8}
x block size {64, 128} and three clamped configurations. Here we check what it scheduled:

* the synthetic decode request's prompt has ``sm120kit.models.dcp.warmup_decode_prompt_len``
  tokens (and, unclamped, every DCP rank then holds exactly one full local block);
* its block allocations are consistent: ids unique, from 1 up, inside the pool, one block id per
  ``dcp * block_size`` tokens, enough blocks for every rank's local tokens, the mixed step adds
  exactly the delta;
* for DCP = 1 every recorded scheduler output equals, field by field, what the *unpatched*
  release's function produced in its own process; the runner attributes read are the same.
"""

from __future__ import annotations

from typing import Any

import pytest

from sm120kit.models.dcp import local_len, plan_prompt, warmup_decode_prompt_len
from tests.runtime.rt_expect import RELEASES, release_key

DECODE_ID = "_v2_mixed_warmup_decode_"

# hand-computed clamps: (dcp, B, max_model_len, max_num_batched_tokens) -> L
CLAMPED = {
    (4, 64, 200, 8192): 198,  # 256 > max_model_len - 1 (decode token) - 1
    (8, 128, 8192, 512): 512,  # 1024 > max_num_batched_tokens
    (2, 64, 8192, 100): 100,  # 128 > max_num_batched_tokens
}


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _cases(runtime_results: Any, release: str, kind: str) -> list[dict[str, Any]]:
    return runtime_results.ok(release, kind).result["warmup"]


def _key(case: dict[str, Any]) -> tuple[int, int, int, int]:
    c = case["case"]
    return (c["dcp"], c["block_size"], c["max_model_len"], c["max_num_batched_tokens"])


def _steps(case: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    calls = case["calls"]
    assert [c["call"] for c in calls] == [
        "execute_model", "sample_tokens", "execute_model", "sample_tokens", "execute_model",
    ]
    assert calls[1]["arg"] is None and calls[3]["arg"] is None
    return calls[0]["arg"], calls[2]["arg"], calls[4]["arg"]


def _blocks(block_ids: Any) -> list[list[int]]:
    """NewRequestData.block_ids: a tuple (one list per KV cache group)."""
    assert isinstance(block_ids, dict) and "__tuple__" in block_ids, block_ids
    return block_ids["__tuple__"]


def _reserved(case: dict[str, Any], num_tokens: int) -> int:
    """Blocks the scheduler holds for ``num_tokens`` (+ lookahead) of the request.

    Under DCP a block id stands for ``dcp * block_size`` tokens of a DCP-sharded cache (each
    rank keeps its ``block_size`` share in the physical block with that id); vLLM 0.34's own
    warmup counts that way and the series makes 0.30-0.33's warmup do the same.
    """
    c = case["case"]
    block = c["block_size"] * (c["dcp"] if case["spec_dcp_sharded"] else 1)
    n = min(num_tokens + case["num_lookahead_tokens"], c["max_model_len"])
    return cdiv(n, block)


@pytest.mark.parametrize("release", RELEASES)
def test_decode_prompt_has_planned_length(runtime_results: Any, release: str) -> None:
    cases = _cases(runtime_results, release, "patched")
    assert len(cases) == 11
    for case in cases:
        c = case["case"]
        dcp, block = c["dcp"], c["block_size"]
        assert case["returned"] is True, c
        first, mixed, _ = _steps(case)
        (new_req,) = first["scheduled_new_reqs"]
        assert new_req["req_id"] == DECODE_ID
        length = len(new_req["prompt_token_ids"])
        planned = warmup_decode_prompt_len(
            dcp, block, max_model_len=c["max_model_len"],
            max_num_batched_tokens=c["max_num_batched_tokens"],
        )
        assert length == planned, (c, length, planned)
        expected = CLAMPED.get(_key(case), 2 if dcp == 1 else dcp * block)
        assert length == expected, (c, length)
        assert new_req["prefill_token_ids"] == new_req["prompt_token_ids"]
        assert first["num_scheduled_tokens"] == {DECODE_ID: length}
        assert first["total_num_scheduled_tokens"] == length
        if dcp > 1 and _key(case) not in CLAMPED:
            plan = plan_prompt(length, dcp=dcp, block_size=block)
            # every rank holds exactly one full local block after the prefill step
            assert [r.prefill_tokens for r in plan.ranks] == [block] * dcp
            assert all(r.full_blocks >= 1 for r in plan.ranks)
        # the mixed step decodes one token on top of exactly that prompt
        cached = mixed["scheduled_cached_reqs"]
        assert cached["req_ids"] == [DECODE_ID]
        assert cached["num_computed_tokens"] == [length]
        assert mixed["num_scheduled_tokens"][DECODE_ID] == 1
        assert mixed["total_num_scheduled_tokens"] == c["num_tokens"]


@pytest.mark.parametrize("release", RELEASES)
def test_block_allocations_are_consistent(runtime_results: Any, release: str) -> None:
    for case in _cases(runtime_results, release, "patched"):
        c = case["case"]
        dcp, block = c["dcp"], c["block_size"]
        first, mixed, cleanup = _steps(case)
        (dec,) = first["scheduled_new_reqs"]
        length = len(dec["prompt_token_ids"])
        (dec_blocks,) = _blocks(dec["block_ids"])
        assert len(dec_blocks) == _reserved(case, length), c
        new_ids = mixed["scheduled_cached_reqs"]["new_block_ids"]
        assert len(new_ids) == 1
        delta = _reserved(case, length + 1) - len(dec_blocks)
        if delta:
            (added,) = _blocks(new_ids[0])
            assert len(added) == delta
        else:
            assert new_ids[0] is None
            added = []
        (pre,) = mixed["scheduled_new_reqs"]
        prefill_len = c["num_tokens"] - 1
        assert len(pre["prompt_token_ids"]) == prefill_len
        assert mixed["num_scheduled_tokens"][pre["req_id"]] == prefill_len
        (pre_blocks,) = _blocks(pre["block_ids"])
        assert len(pre_blocks) == _reserved(case, prefill_len)
        every = dec_blocks + added + pre_blocks
        assert len(set(every)) == len(every), "a block id was handed out twice"
        assert every == list(range(1, len(every) + 1)), "ids are allocated in order from 1"
        assert max(every) < case["num_blocks"], "block id outside the KV pool"
        # every DCP rank's local tokens of the decode request fit in its blocks (one physical
        # block per id and rank, B tokens each)
        decode_blocks = len(dec_blocks) + len(added)
        for rank in range(dcp):
            assert local_len(length + 1, rank, dcp) <= decode_blocks * block
        assert cleanup["finished_req_ids"] == {"__set__": sorted([DECODE_ID, pre["req_id"]])}
        assert case["connector_calls"] == [True, False]
        if release_key(release) >= (0, 34, 0):
            assert case["accelerator_syncs"] == 3  # one device sync after each step
        assert case["has_dcp_decode_prompt_len"] is True


@pytest.mark.parametrize("release", RELEASES)
def test_dcp1_scheduler_outputs_equal_upstream(runtime_results: Any, release: str) -> None:
    patched = {_key(c): c for c in _cases(runtime_results, release, "patched")}
    upstream = {_key(c): c for c in _cases(runtime_results, release, "upstream")}
    assert patched.keys() == upstream.keys()
    dcp1 = [k for k in patched if k[0] == 1]
    assert len(dcp1) == 2
    for k in dcp1:
        p, u = patched[k], upstream[k]
        assert p["returned"] == u["returned"] is True
        assert len(p["calls"]) == len(u["calls"]) == 5
        for i, (pc, uc) in enumerate(zip(p["calls"], u["calls"], strict=True)):
            assert pc == uc, f"DCP=1 call {i} differs from upstream ({k})"
        assert p["runner_reads"] == u["runner_reads"], "DCP=1 reads a runner attribute upstream does not"
        assert p["connector_calls"] == u["connector_calls"]
        assert u["has_dcp_decode_prompt_len"] is False


@pytest.mark.parametrize("release", RELEASES)
def test_upstream_keeps_two_token_prompt_under_dcp(runtime_results: Any, release: str) -> None:
    """What the patch changes: unpatched, every DCP size gets upstream's 2-token prompt, and the
    patched function differs from it exactly there (plus the blocks that follow from it)."""
    patched = {_key(c): c for c in _cases(runtime_results, release, "patched")}
    for case in _cases(runtime_results, release, "upstream"):
        first, _, _ = _steps(case)
        (dec,) = first["scheduled_new_reqs"]
        assert len(dec["prompt_token_ids"]) == 2
        p = patched[_key(case)]
        if case["case"]["dcp"] > 1:
            p_first, _, _ = _steps(p)
            assert len(p_first["scheduled_new_reqs"][0]["prompt_token_ids"]) > 2
            extra = set(p["runner_reads"]) - set(case["runner_reads"])
            assert extra <= {"scheduler_config", "speculative_config"}, extra


_BASE_READS = {
    "is_pooling_model", "max_num_reqs", "kv_cache_config", "vllm_config", "max_model_len",
    "model_state", "kv_connector",
}
# what each release's upstream function reads from the model runner (found from its source,
# confirmed by the recording runner)
UPSTREAM_READS = {
    "0.30.0": _BASE_READS,
    "0.31.0": _BASE_READS,
    "0.32.0": _BASE_READS | {"num_speculative_steps"},
    "0.33.0": _BASE_READS | {"num_speculative_steps"},
    "0.34.0": _BASE_READS | {"num_speculative_steps", "model_config", "speculative_config"},
}


@pytest.mark.parametrize("release", RELEASES)
def test_runner_attributes_read(runtime_results: Any, release: str) -> None:
    """The minimal runner is minimal: upstream reads exactly these attributes; the patch adds
    only ``scheduler_config`` (max_num_batched_tokens) and ``speculative_config`` (its draft
    slots), and only when DCP > 1."""
    for kind in ("patched", "upstream"):
        for case in _cases(runtime_results, release, kind):
            want = set(UPSTREAM_READS[release])
            if kind == "patched" and case["case"]["dcp"] > 1:
                want |= {"scheduler_config", "speculative_config"}
            assert set(case["runner_reads"]) == want, (kind, case["case"])
            assert case["runner_writes"] == []


@pytest.mark.parametrize("release", RELEASES)
def test_mtp_small_budget_leaves_draft_slots_and_logs_the_clamp(
        runtime_results: Any, release: str) -> None:
    """MTP 1 and 3 (and a drafter with 3 slots per request) with max_num_batched_tokens 200:
    the decode request's prompt is clamped to the budget less its draft slots, and one warning
    line says that not every rank gets a full local block; unclamped, nothing is logged."""
    cases = runtime_results.ok(release, "patched").result["warmup_mtp"]
    assert [(c["case"]["mtp"], c["case"]["draft_slots"]) for c in cases] == [
        (1, 0), (3, 0), (3, 3), (3, 0)]
    for case in cases:
        c = case["case"]
        assert case["returned"] is True, c
        first = case["calls"][0]["arg"]
        (req,) = first["scheduled_new_reqs"]
        assert req["req_id"] == DECODE_ID
        length = len(req["prompt_token_ids"])
        want = warmup_decode_prompt_len(
            c["dcp"], c["block_size"], max_model_len=c["max_model_len"],
            max_num_batched_tokens=c["max_num_batched_tokens"], decode_query_len=1 + c["mtp"],
            draft_slots=c["draft_slots"])
        assert length == want, c
        # the prefill step of the prompt plus its draft slots fits the token budget
        assert first["total_num_scheduled_tokens"] + c["draft_slots"] <= c[
            "max_num_batched_tokens"]
        full = c["dcp"] * c["block_size"]
        clamp_lines = [ln for ln in case["log"] if ln.startswith("DCP warmup: decode prompt")]
        if length < full:
            assert clamp_lines == [
                f"DCP warmup: decode prompt clamped to {length} tokens, below {full} "
                f"({c['dcp']} ranks x block {c['block_size']}): not every rank holds a full "
                f"local KV block during warmup (max_model_len {c['max_model_len']}, "
                f"max_num_batched_tokens {c['max_num_batched_tokens']}, "
                f"{c['draft_slots']} draft slots)"], case["log"]
        else:
            assert clamp_lines == []
    assert [len(c["calls"][0]["arg"]["scheduled_new_reqs"][0]["prompt_token_ids"])
            for c in cases] == [200, 200, 197, 128]
