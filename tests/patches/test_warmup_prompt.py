"""The DCP-aware warmup decode prompt (patch 6) in ``vllm/v1/worker/gpu/warmup.py``.

``dcp_decode_prompt_len`` is extracted from each patched file and run; its results are compared
with the toolkit planner's ``sm120kit.warmup.plan.warmup_decode_prompt_len`` (the one place the
formula ``L = N*B clamped, 2 when N == 1`` is written down) and with the DCP ownership math.
``_runner_dcp_decode_prompt_len`` is run against stand-ins for vLLM's KV-cache spec classes,
because importing the real ones needs a full vLLM install (tests/runtime runs the real module).
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from sm120kit.warmup.plan import local_len, warmup_decode_prompt_len

from .astutil import assignments_to, find_func, has_func, names_used, src
from .conftest import WU, Applied

HELPER = "dcp_decode_prompt_len"
RUNNER_HELPER = "_runner_dcp_decode_prompt_len"
WARMUP = "run_mixed_prefill_decode_warmup"


def _helper(applied: Applied, name: str, ns: dict[str, Any] | None = None) -> Any:
    fn = find_func(applied.patched_ast(WU), name)
    ns = dict(ns or {})
    exec(compile(ast.Module(body=[fn], type_ignores=[]), WU, "exec"), ns)
    return ns[name]


def test_formula_matches_the_planner(applied: Applied) -> None:
    f = _helper(applied, HELPER)
    n_checked = 0
    for n, b, mml, mnbt, q in itertools.product(
        (1, 2, 4, 8), (64, 128), (163840, 4096, 600, 130, 3), (8192, 2048, 300, 100, 1), (1, 4)
    ):
        got = f(n, b, max_model_len=mml, max_num_batched_tokens=mnbt, decode_query_len=q)
        want = warmup_decode_prompt_len(
            n, b, max_model_len=mml, max_num_batched_tokens=mnbt, decode_query_len=q
        )
        assert got == want, (n, b, mml, mnbt, q, got, want)
        n_checked += 1
    assert n_checked == 400


def test_formula_values(applied: Applied) -> None:
    f = _helper(applied, HELPER)
    big = {"max_model_len": 163840, "max_num_batched_tokens": 8192}
    assert f(1, 64, **big) == 2 and f(1, 128, **big) == 2  # DCP = 1: upstream's 2
    assert [f(n, 64, **big) for n in (2, 4, 8)] == [128, 256, 512]
    assert [f(n, 128, **big) for n in (2, 4, 8)] == [256, 512, 1024]
    assert f(8, 128, max_model_len=600, max_num_batched_tokens=8192) == 598  # 600 - 1 - 1
    assert f(8, 128, max_model_len=600, max_num_batched_tokens=8192, decode_query_len=4) == 595
    assert f(8, 128, max_model_len=163840, max_num_batched_tokens=300) == 300
    assert f(4, 64, max_model_len=2, max_num_batched_tokens=1) == 2  # never below 2
    # Unclamped, every rank holds at least one full local block (B tokens) at interleave 1
    # and at any interleave that divides B.
    for n, b in itertools.product((2, 4, 8), (64, 128)):
        length = f(n, b, **big)
        for i in (1, 8, b):
            assert min(local_len(length, r, n, i) for r in range(n)) == b, (n, b, i)


@dataclass
class _Spec:
    block_size: int


class FullAttentionSpec(_Spec):
    pass


class MambaSpec(_Spec):
    pass


class CrossAttentionSpec(_Spec):
    pass


class CircularBufferSpec(_Spec):
    pass


@dataclass
class UniformTypeKVCacheSpecs:
    first_spec: _Spec
    block_size: int = 0


@dataclass
class _Runner:
    specs: list[Any]
    dcp: int
    max_model_len: int = 163840
    max_num_batched_tokens: int = 8192
    kv_cache_config: Any = field(init=False)
    vllm_config: Any = field(init=False)
    scheduler_config: Any = field(init=False)

    def __post_init__(self) -> None:
        groups = [SimpleNamespace(kv_cache_spec=s) for s in self.specs]
        self.kv_cache_config = SimpleNamespace(kv_cache_groups=groups)
        self.vllm_config = SimpleNamespace(
            parallel_config=SimpleNamespace(decode_context_parallel_size=self.dcp))
        self.scheduler_config = SimpleNamespace(
            max_num_batched_tokens=self.max_num_batched_tokens)


def test_runner_helper_reads_dcp_and_attention_block_size(applied: Applied) -> None:
    ns: dict[str, Any] = {
        "GPUModelRunner": _Runner, "MambaSpec": MambaSpec,
        "CrossAttentionSpec": CrossAttentionSpec, "CircularBufferSpec": CircularBufferSpec,
        "UniformTypeKVCacheSpecs": UniformTypeKVCacheSpecs,
    }
    ns[HELPER] = _helper(applied, HELPER)
    g = _helper(applied, RUNNER_HELPER, ns)
    assert g(_Runner([FullAttentionSpec(64)], dcp=4), 1) == 256
    assert g(_Runner([FullAttentionSpec(64)], dcp=1), 1) == 2
    # Mamba / cross-attention / ring caches do not set the DCP block; the largest attention
    # block does; a uniform-type group is read through its first spec.
    assert g(_Runner([MambaSpec(4096), FullAttentionSpec(64), CrossAttentionSpec(512)], 2), 1) == 128
    assert g(_Runner([CircularBufferSpec(256), UniformTypeKVCacheSpecs(FullAttentionSpec(128))],
                     8), 1) == 1024
    assert g(_Runner([FullAttentionSpec(64), FullAttentionSpec(128)], 2), 1) == 256
    assert g(_Runner([FullAttentionSpec(128)], 8, max_model_len=700), 3) == 696
    assert g(_Runner([FullAttentionSpec(128)], 8, max_num_batched_tokens=512), 1) == 512


def _prompt_len_stmts(fn: ast.FunctionDef) -> tuple[int, ast.Assign, ast.If]:
    """(index of ``decode_prompt_len = 2``, the dcp_size assignment, the DCP ``if``)."""
    body = fn.body
    idx = [i for i, s in enumerate(body) if src(s) == "decode_prompt_len = 2"]
    assert len(idx) == 1, "upstream's `decode_prompt_len = 2` must stay"
    dcp_assign = [s for s in body if isinstance(s, ast.Assign) and src(s.targets[0]) == "dcp_size"]
    dcp_if = [s for s in body if isinstance(s, ast.If) and "dcp_size > 1" in src(s.test)]
    assert len(dcp_assign) == 1 and len(dcp_if) == 1
    return idx[0], dcp_assign[0], dcp_if[0]


def test_warmup_uses_the_dcp_prompt_only_when_dcp(applied: Applied) -> None:
    fn = find_func(applied.patched_ast(WU), WARMUP)
    i, dcp_assign, dcp_if = _prompt_len_stmts(fn)
    assert src(dcp_assign.value) == (
        "model_runner.vllm_config.parallel_config.decode_context_parallel_size")
    q = "decode_query_len" if applied.release >= "0.34" else "decode_scheduled_tokens"
    want_test = "with_decode and dcp_size > 1" if applied.release >= "0.34" else "dcp_size > 1"
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
    # the decode-query length passed on is bound before the `if`
    assert any(isinstance(s, ast.Assign) and src(s.targets[0]) == q
               for s in fn.body[:pos]) or q in {a.arg for a in fn.args.args}


def test_dcp1_warmup_is_upstream_byte_for_byte(applied: Applied) -> None:
    """Without the two inserted statements the function's AST equals upstream's, and the module
    differs from upstream only by them and the two helpers."""
    patched = applied.patched_ast(WU)
    fn = find_func(patched, WARMUP)
    _, dcp_assign, dcp_if = _prompt_len_stmts(fn)
    fn.body = [s for s in fn.body if s is not dcp_assign and s is not dcp_if]
    upstream = applied.upstream_ast(WU)
    assert ast.dump(fn) == ast.dump(find_func(upstream, WARMUP))
    patched.body = [s for s in patched.body if not (
        isinstance(s, ast.FunctionDef) and s.name in (HELPER, RUNNER_HELPER))]
    assert ast.dump(patched) == ast.dump(upstream)
    assert not has_func(upstream, HELPER)
