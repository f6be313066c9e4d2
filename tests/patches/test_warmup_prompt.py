"""The DCP-aware warmup decode prompt (patch 6) in ``vllm/v1/worker/gpu/warmup.py``.

``dcp_decode_prompt_len`` is extracted from each patched file and run; its results are compared
with the toolkit planner's ``sm120kit.models.dcp.warmup_decode_prompt_len`` (the one place the
formula ``L = N*B clamped, 2 when N == 1`` is written down) and with the DCP ownership math.
``_runner_dcp_decode_prompt_len`` and the warmup's block counting (the patch's
``_dcp_warmup_block_counter`` on 0.30-0.33, upstream's DCP-aware counter on 0.34) are run against
stand-ins for vLLM's KV-cache spec classes, because importing the real ones needs a full vLLM
install (tests/runtime runs the real module); the stand-ins reproduce the block-table row length
rule of vLLM's ``AttentionSpec.max_num_blocks_per_req`` (``cdiv(max_len, B * N)`` when sharded).
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from sm120kit.models.dcp import cdiv, local_len, warmup_decode_prompt_len

from .astutil import assignments_to, find_func, has_func, names_used, src
from .conftest import WU, Applied

HELPER = "dcp_decode_prompt_len"
RUNNER_HELPER = "_runner_dcp_decode_prompt_len"
BLOCK_HELPER = "_dcp_warmup_block_counter"
WARMUP = "run_mixed_prefill_decode_warmup"
OUR_HELPERS = (HELPER, RUNNER_HELPER, BLOCK_HELPER)


def _pre034(applied: Applied) -> bool:
    return applied.release < "0.34"


def _helper(applied: Applied, name: str, ns: dict[str, Any] | None = None,
            *also: str) -> Any:
    mod = applied.patched_ast(WU)
    fns: list[ast.stmt] = [find_func(mod, n) for n in (name, *also)]
    ns = dict(ns or {})
    exec(compile(ast.Module(body=fns, type_ignores=[]), WU, "exec"), ns)
    return ns[name]


def test_formula_matches_the_planner(applied: Applied) -> None:
    f = _helper(applied, HELPER)
    n_checked = 0
    for n, b, mml, mnbt, q, d in itertools.product(
        (1, 2, 4, 8), (64, 128), (163840, 4096, 600, 130, 3), (8192, 2048, 300, 100, 1), (1, 4),
        (0, 1, 3),
    ):
        got = f(n, b, max_model_len=mml, max_num_batched_tokens=mnbt, decode_query_len=q,
                draft_slots=d)
        want = warmup_decode_prompt_len(
            n, b, max_model_len=mml, max_num_batched_tokens=mnbt, decode_query_len=q,
            draft_slots=d,
        )
        assert got == want, (n, b, mml, mnbt, q, d, got, want)
        n_checked += 1
    assert n_checked == 1200


def test_formula_values(applied: Applied) -> None:
    f = _helper(applied, HELPER)
    big = {"max_model_len": 163840, "max_num_batched_tokens": 8192}
    assert f(1, 64, **big) == 2 and f(1, 128, **big) == 2  # DCP = 1: upstream's 2
    assert [f(n, 64, **big) for n in (2, 4, 8)] == [128, 256, 512]
    assert [f(n, 128, **big) for n in (2, 4, 8)] == [256, 512, 1024]
    assert f(8, 128, max_model_len=600, max_num_batched_tokens=8192) == 598  # 600 - 1 - 1
    assert f(8, 128, max_model_len=600, max_num_batched_tokens=8192, decode_query_len=4) == 595
    assert f(8, 128, max_model_len=163840, max_num_batched_tokens=300) == 300
    # the draft slots of the prompt's own request stay free in its prefill step
    assert f(8, 128, max_model_len=163840, max_num_batched_tokens=300, draft_slots=3) == 297
    assert f(2, 64, max_model_len=163840, max_num_batched_tokens=8192, draft_slots=3) == 128
    assert f(4, 64, max_model_len=2, max_num_batched_tokens=1) == 2  # never below 2
    # Unclamped, every rank holds at least one full local block (B tokens) at interleave 1
    # and at any interleave that divides B.
    for n, b in itertools.product((2, 4, 8), (64, 128)):
        length = f(n, b, **big)
        for i in (1, 8, b):
            assert min(local_len(length, r, n, i) for r in range(n)) == b, (n, b, i)



class KVCacheSpec:
    dcp_sharded = False

    def __init__(self, block_size: int, *, dcp_sharded: bool | None = None) -> None:
        self.block_size = block_size
        if dcp_sharded is not None:
            self.dcp_sharded = dcp_sharded

    def max_num_blocks_per_req(self, vllm_config: Any, max_len: int) -> int:
        n = vllm_config.parallel_config.decode_context_parallel_size if self.dcp_sharded else 1
        return cdiv(max_len, self.block_size * n)


class AttentionSpec(KVCacheSpec):
    dcp_sharded = True


class FullAttentionSpec(AttentionSpec):
    pass


class CrossAttentionSpec(AttentionSpec):
    pass


class CircularBufferSpec(AttentionSpec):
    def max_num_blocks_per_req(self, vllm_config: Any, max_len: int) -> int:
        return 1


class MambaSpec(KVCacheSpec):
    num_speculative_blocks = 0
    mamba_cache_mode = "none"


class UniformTypeKVCacheSpecs(KVCacheSpec):
    def __init__(self, first_spec: KVCacheSpec) -> None:
        super().__init__(first_spec.block_size, dcp_sharded=first_spec.dcp_sharded)
        self.first_spec = first_spec


class GPUModelRunner:
    """Only the attributes the warmup helpers read."""

    def __init__(self, specs: list[Any], dcp: int, *, max_model_len: int = 163840,
                 max_num_batched_tokens: int = 8192, num_lookahead_tokens: int = 0,
                 draft_slots: int | None = None) -> None:
        groups = [SimpleNamespace(kv_cache_spec=s) for s in specs]
        self.kv_cache_config = SimpleNamespace(kv_cache_groups=groups)
        spec = None if draft_slots is None else SimpleNamespace(
            max_num_new_slots_for_drafting=draft_slots)
        self.vllm_config = SimpleNamespace(
            parallel_config=SimpleNamespace(decode_context_parallel_size=dcp),
            num_lookahead_tokens=num_lookahead_tokens)
        self.speculative_config = spec
        self.scheduler_config = SimpleNamespace(max_num_batched_tokens=max_num_batched_tokens)
        self.max_model_len = max_model_len
        self.model_state = SimpleNamespace(max_encoder_len=0)


def _namespace() -> dict[str, Any]:
    return {
        "GPUModelRunner": GPUModelRunner, "KVCacheSpec": KVCacheSpec, "MambaSpec": MambaSpec,
        "AttentionSpec": AttentionSpec, "CrossAttentionSpec": CrossAttentionSpec,
        "CircularBufferSpec": CircularBufferSpec,
        "UniformTypeKVCacheSpecs": UniformTypeKVCacheSpecs, "cdiv": cdiv,
        "Callable": Callable, "VllmConfig": object, "logger": LogRecorder(),
    }


class LogRecorder:
    """vLLM's module ``logger``: records the formatted lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def warning(self, msg: str, *args: Any) -> None:
        self.lines.append(msg % args)


def test_runner_helper_reads_dcp_and_attention_block_size(applied: Applied) -> None:
    ns = _namespace()
    ns[HELPER] = _helper(applied, HELPER)
    g = _helper(applied, RUNNER_HELPER, ns)
    R = GPUModelRunner
    assert g(R([FullAttentionSpec(64)], dcp=4), 1) == 256
    assert g(R([FullAttentionSpec(64)], dcp=1), 1) == 2
    # Mamba / cross-attention / ring caches do not set the DCP block; the largest attention
    # block does; a uniform-type group is read through its first spec.
    assert g(R([MambaSpec(4096), FullAttentionSpec(64), CrossAttentionSpec(512)], 2), 1) == 128
    assert g(R([CircularBufferSpec(256), UniformTypeKVCacheSpecs(FullAttentionSpec(128))], 8),
             1) == 1024
    assert g(R([FullAttentionSpec(64), FullAttentionSpec(128)], 2), 1) == 256
    assert g(R([FullAttentionSpec(128)], 8, max_model_len=700), 3) == 696
    assert g(R([FullAttentionSpec(128)], 8, max_num_batched_tokens=512), 1) == 512
    # speculative decoding: the prompt's own draft slots stay free in its prefill step
    assert g(R([FullAttentionSpec(128)], 8, max_num_batched_tokens=512, draft_slots=3), 4) == 509
    assert g(R([FullAttentionSpec(64)], 4, draft_slots=0), 2) == 256  # MTP: 0 extra slots
    # one warning line per clamp below N*B, none otherwise
    log = ns["logger"]
    assert len(log.lines) == 4, log.lines
    assert log.lines[-1] == (
        "DCP warmup: decode prompt clamped to 509 tokens, below 1024 (8 ranks x block 128): "
        "not every rank holds a full local KV block during warmup (max_model_len 163840, "
        "max_num_batched_tokens 512, 3 draft slots)")


def _mixed_block_counter(applied: Applied, runner: GPUModelRunner) -> Any:
    """The ``block_count`` the patched mixed warmup uses for ``runner``."""
    ns = _namespace()
    dcp = runner.vllm_config.parallel_config.decode_context_parallel_size
    if _pre034(applied):
        f = _helper(applied, BLOCK_HELPER, ns, "_warmup_block_counter", "_reserved_block_count")
        return f(runner, dcp)
    runner.vllm_config.parallel_config.decode_context_parallel_size = dcp
    f = _helper(applied, "_warmup_block_counter", ns, "_reserved_block_count")
    return f(runner)


def test_decode_request_blocks_fit_the_dcp_block_table(applied: Applied) -> None:
    """For the planned prompt, the decode request's reserved blocks cover every block the
    rank-local slot mapping touches and never exceed the DCP-sized block-table row."""
    ns = _namespace()
    ns[HELPER] = _helper(applied, HELPER)
    prompt = _helper(applied, RUNNER_HELPER, ns)
    n_checked = 0
    for n, b, mml, la in itertools.product((2, 4, 8), (64, 128), (1024, 4096, 163840), (0, 3)):
        spec = FullAttentionSpec(b)
        runner = GPUModelRunner([spec], n, max_model_len=mml, num_lookahead_tokens=la)
        count = _mixed_block_counter(applied, runner)
        length = prompt(runner, 1)
        row = spec.max_num_blocks_per_req(runner.vllm_config, mml)
        for tokens in (length, length + 1):  # after the decode prefill, at the decode step
            reserved = count(tokens, spec)
            needed = max(cdiv(local_len(min(tokens + la, mml), r, n), b) for r in range(n))
            assert needed <= reserved <= row, (n, b, mml, la, tokens, needed, reserved, row)
            n_checked += 1
    assert n_checked == 72


def test_block_counts_keep_upstream_rules_for_unsharded_caches(applied: Applied) -> None:
    ns = _namespace()
    upstream = _helper(applied, "_reserved_block_count", ns)
    runner = GPUModelRunner([], 4, max_model_len=163840, num_lookahead_tokens=2)
    count = _mixed_block_counter(applied, runner)

    def up(tokens: int, spec: KVCacheSpec, dcp: int = 1) -> int:
        kw: dict[str, Any] = {"num_lookahead_tokens": 2, "max_model_len": 163840,
                              "max_encoder_len": 0}
        if not _pre034(applied):
            kw.update(vllm_config=runner.vllm_config, dcp_world_size=dcp)
        return int(upstream(tokens, spec, **kw))

    replicated = FullAttentionSpec(64, dcp_sharded=False)
    assert count(300, replicated) == up(300, replicated) == cdiv(302, 64)
    assert count(300, MambaSpec(64)) == up(300, MambaSpec(64))
    assert count(300, CircularBufferSpec(64)) == up(300, CircularBufferSpec(64)) == 1
    sharded = FullAttentionSpec(64)
    assert count(300, sharded) == cdiv(302, 4 * 64) == 2
    wrapped = UniformTypeKVCacheSpecs(FullAttentionSpec(64))
    assert count(300, wrapped) == 2


def test_warmup_uses_the_dcp_prompt_only_when_dcp(applied: Applied) -> None:
    fn = find_func(applied.patched_ast(WU), WARMUP)
    i, dcp_assign, dcp_if = _prompt_len_stmts(fn)
    assert src(dcp_assign.value) == (
        "model_runner.vllm_config.parallel_config.decode_context_parallel_size")
    q = "decode_scheduled_tokens" if _pre034(applied) else "decode_query_len"
    want_test = "dcp_size > 1" if _pre034(applied) else "with_decode and dcp_size > 1"
    assert src(dcp_if.test) == want_test
    assert not dcp_if.orelse and len(dcp_if.body) == 1
    assert src(dcp_if.body[0]) == f"decode_prompt_len = {RUNNER_HELPER}(model_runner, {q})"
    # Every later user of the prompt length sees the DCP value: it is set before any use, and
    # nothing else rebinds it.
    pos = fn.body.index(dcp_if)
    assert pos > i
    for stmt in fn.body[i + 1:pos]:
        assert "decode_prompt_len" not in names_used(stmt), src(stmt)
    assert len(list(assignments_to(fn, "decode_prompt_len"))) == 2
    assert any("decode_prompt_len" in names_used(s) for s in fn.body[pos + 1:])
    assert any(isinstance(s, ast.Assign) and src(s.targets[0]) == q for s in fn.body[:pos])
    # 0.30-0.33: the mixed warmup's block counter becomes DCP-aware under the same condition,
    # before its first use.
    block_ifs = [s for s in fn.body if isinstance(s, ast.If) and s is not dcp_if
                 and "dcp_size" in src(s.test)]
    if _pre034(applied):
        assert len(block_ifs) == 1 and src(block_ifs[0].test) == "dcp_size > 1"
        assert [src(x) for x in block_ifs[0].body] == [
            f"block_count = {BLOCK_HELPER}(model_runner, dcp_size)"]
        j = fn.body.index(block_ifs[0])
        assert src(fn.body[j - 1]) == "block_count = _warmup_block_counter(model_runner)"
        assert not any("block_count" in names_used(s) for s in fn.body[:j - 1])
    else:
        assert not block_ifs and not has_func(applied.patched_ast(WU), BLOCK_HELPER)


def _prompt_len_stmts(fn: ast.FunctionDef) -> tuple[int, ast.Assign, ast.If]:
    """(index of ``decode_prompt_len = 2``, the dcp_size assignment, the DCP prompt ``if``)."""
    body = fn.body
    idx = [i for i, s in enumerate(body) if src(s) == "decode_prompt_len = 2"]
    assert len(idx) == 1, "upstream's `decode_prompt_len = 2` must stay"
    dcp_assign = [s for s in body if isinstance(s, ast.Assign) and src(s.targets[0]) == "dcp_size"]
    dcp_if = [s for s in body if isinstance(s, ast.If) and "dcp_size > 1" in src(s.test)
              and "decode_prompt_len" in names_used(s)]
    assert len(dcp_assign) == 1 and len(dcp_if) == 1
    return idx[0], dcp_assign[0], dcp_if[0]


def test_dcp1_warmup_is_upstream_byte_for_byte(applied: Applied) -> None:
    """Without the statements that only act when DCP > 1 the function's AST equals upstream's,
    and the module differs from upstream only by them, our helpers and the names they import."""
    patched = applied.patched_ast(WU)
    fn = find_func(patched, WARMUP)
    inserted = [s for s in fn.body if "dcp_size" in names_used(s)]
    assert len(inserted) == (3 if _pre034(applied) else 2)
    fn.body = [s for s in fn.body if s not in inserted]
    upstream = applied.upstream_ast(WU)
    assert ast.dump(fn) == ast.dump(find_func(upstream, WARMUP))
    patched.body = [s for s in patched.body if not (
        isinstance(s, ast.FunctionDef) and s.name in OUR_HELPERS)]
    for node in patched.body:
        if isinstance(node, ast.ImportFrom) and node.module == "vllm.v1.kv_cache_interface":
            node.names = [a for a in node.names if a.name != "AttentionSpec"]
    assert ast.dump(patched) == ast.dump(upstream)
    assert not any(has_func(upstream, h) for h in OUR_HELPERS)


def test_unpatched_counter_would_overflow_the_row_before_034(applied: Applied) -> None:
    """Why 0.30-0.33 also need the DCP block counter: upstream's counter reserves cdiv(L+1, B)
    blocks for the N*B prompt, more than the DCP-sized block-table row holds."""
    if not _pre034(applied):
        assert "dcp_world_size" in applied.upstream(WU)  # 0.34 counts DCP blocks upstream
        return
    mod = applied.upstream_ast(WU)
    ns = _namespace()
    body: list[ast.stmt] = [find_func(mod, "_warmup_block_counter"),
                            find_func(mod, "_reserved_block_count")]
    exec(compile(ast.Module(body=body, type_ignores=[]), WU, "exec"), ns)
    spec = FullAttentionSpec(64)
    runner = GPUModelRunner([spec], 8, max_model_len=4096)
    row = spec.max_num_blocks_per_req(runner.vllm_config, 4096)
    assert ns["_warmup_block_counter"](runner)(8 * 64 + 1, spec) == 9 > row == 8
    assert _mixed_block_counter(applied, runner)(8 * 64 + 1, spec) == 2
