"""AST checks of the patched SM120 impl (``flashinfer_mla_sparse_sm120.py``) on every release.

Each test also looks at the unpatched file where that shows the check can fail (upstream lacks
what the test requires).
"""

from __future__ import annotations

import ast

from .astutil import (
    assignments_to,
    attrs_used,
    calls,
    class_assigns,
    enclosing_ifs,
    find_class,
    find_func,
    is_q_shape_1,
    is_self_attr,
    kw,
    one_call,
    src,
)
from .conftest import SM, Applied

IMPL = "FlashInferMLASparseSM120Impl"
LAUNCHER = "flashinfer_trtllm_batch_decode_with_kv_cache_mla"
DCP_HELPER = "triton_filter_and_convert_dcp_index"


def _impl(mod: ast.Module) -> ast.ClassDef:
    return find_class(mod, IMPL)


def _non_hisparse_return(fm: ast.FunctionDef) -> ast.Return:
    last = fm.body[-1]
    assert isinstance(last, ast.Return) and isinstance(last.value, ast.Tuple), src(last)
    assert len(last.value.elts) == 2
    return last


def _dcp_if(fm: ast.FunctionDef) -> ast.If:
    """The top-level ``if self.dcp_world_size > 1:`` of forward_mqa's non-HiSparse path."""
    found = [s for s in fm.body if isinstance(s, ast.If)
             and src(s.test) == "self.dcp_world_size > 1"]
    assert len(found) == 1, "forward_mqa has no top-level `if self.dcp_world_size > 1:`"
    return found[0]


def test_dcp_class_attributes_on_the_class_body(applied: Applied) -> None:
    cls = _impl(applied.patched_ast(SM))
    attrs = class_assigns(cls)
    for name, want in (("can_return_lse_for_decode", True), ("supports_dcp", True),
                       ("lse_base_on_e", False)):
        value = attrs.get(name)
        assert isinstance(value, ast.Constant) and value.value is want, (name, src(value))
    # Not (re)set per instance: AttentionImplBase.__new__ reads them before __init__ runs.
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                assert not (is_self_attr(t, "can_return_lse_for_decode")
                            or is_self_attr(t, "supports_dcp")
                            or is_self_attr(t, "lse_base_on_e")), src(node)
    upstream = class_assigns(_impl(applied.upstream_ast(SM)))
    assert not {"can_return_lse_for_decode", "supports_dcp", "lse_base_on_e"} & set(upstream)


def test_need_to_return_lse_follows_dcp_in_this_release(applied: Applied) -> None:
    """The release's AttentionImplBase.__new__ turns the class attribute into
    ``need_to_return_lse_for_decode = dcp_world_size > 1 and can_return_lse_for_decode``, which
    the patched forward_mqa keys the LSE on: so an LSE is returned exactly when DCP > 1."""
    backend = ast.parse(applied.patched("vllm/v1/attention/backend.py"))
    new = find_func(find_class(backend, "AttentionImplBase"), "__new__")
    values = [v for stmt, v in assignments_to(new, "need_to_return_lse_for_decode")]
    if not values:  # attribute target: self.need_to_return_lse_for_decode = ...
        values = [n.value for n in ast.walk(new) if isinstance(n, ast.Assign)
                  and any(is_self_attr(t, "need_to_return_lse_for_decode") for t in n.targets)]
    assert [src(v) for v in values] == [
        "self.dcp_world_size > 1 and self.can_return_lse_for_decode"
    ]


def test_interleave_is_not_copied_at_init(applied: Applied) -> None:
    """The engine core settles the interleave after the impl is built (load_model): a copy
    taken in ``__init__`` would go stale, so the impl keeps none and reads the metadata."""
    cls = _impl(applied.patched_ast(SM))
    got = [n for n in ast.walk(cls) if isinstance(n, ast.Assign)
           and any(is_self_attr(t, "cp_kv_cache_interleave_size") for t in n.targets)]
    assert got == []
    assert "self.cp_kv_cache_interleave_size" not in ast.unparse(cls)
    # MTP with an interleave > 1: the conversion is per token, so the class declares it
    attrs = {t.id: n.value for n in cls.body if isinstance(n, ast.Assign)
             for t in n.targets if isinstance(t, ast.Name)}
    assert src(attrs["supports_mtp_with_cp_non_trivial_interleave_size"]) == "True"


def test_forward_mqa_returns_the_lse_when_dcp(applied: Applied) -> None:
    fm = find_func(_impl(applied.patched_ast(SM)), "forward_mqa")
    ret = _non_hisparse_return(fm)
    out_expr, lse_expr = ret.value.elts  # type: ignore[union-attr]
    assert isinstance(lse_expr, ast.Name) and lse_expr.id == "lse"
    assert isinstance(out_expr, ast.Call) and is_self_attr(out_expr.func, "_run_mqa_kernel")
    assert src(kw(out_expr, "lse")) == "lse"  # the kernel fills the buffer that is returned

    bindings = list(assignments_to(fm, "lse"))
    assert len(bindings) == 2, [src(s) for s, _ in bindings]
    default = [v for s, v in bindings if isinstance(s, ast.AnnAssign)]
    assert len(default) == 1 and isinstance(default[0], ast.Constant) and default[0].value is None
    (alloc_stmt, alloc), = [(s, v) for s, v in bindings if isinstance(s, ast.Assign)]
    assert isinstance(alloc, ast.Call) and src(alloc.func) == "q.new_empty"
    shape = alloc.args[0]
    assert isinstance(shape, ast.Tuple) and len(shape.elts) == 2
    assert src(shape.elts[0]) == "num_actual_toks" and is_q_shape_1(shape.elts[1])
    assert src(kw(alloc, "dtype")) == "torch.float32"
    ifs = enclosing_ifs(fm, alloc_stmt)
    assert ifs and src(ifs[0][0].test) == "self.need_to_return_lse_for_decode" and ifs[0][1]

    upstream_ret = _non_hisparse_return(find_func(_impl(applied.upstream_ast(SM)), "forward_mqa"))
    assert src(upstream_ret.value.elts[1]) == "None"  # type: ignore[union-attr]


def test_out_and_lse_sized_from_q_heads(applied: Applied) -> None:
    cls = _impl(applied.patched_ast(SM))
    rk = find_func(cls, "_run_mqa_kernel")
    (_, alloc), = assignments_to(rk, "output")
    assert isinstance(alloc, ast.Call) and src(alloc.func) == "q.new_empty"
    shape = alloc.args[0]
    assert isinstance(shape, ast.Tuple) and len(shape.elts) == 3
    assert src(shape.elts[0]) == "num_actual_toks" and is_q_shape_1(shape.elts[1])
    assert src(shape.elts[2]) == "self.kv_lora_rank"
    for fn in (rk, find_func(cls, "forward_mqa")):
        assert "self.num_heads" not in attrs_used(fn), fn.name
    upstream_rk = find_func(_impl(applied.upstream_ast(SM)), "_run_mqa_kernel")
    assert "self.num_heads" in attrs_used(upstream_rk)


def test_launcher_gets_seq_lens_and_lse_never_top_k_lens(applied: Applied) -> None:
    mod = applied.patched_ast(SM)
    rk = find_func(_impl(mod), "_run_mqa_kernel")
    params = [a.arg for a in rk.args.args]
    assert params[-2:] == ["seq_lens", "lse"]
    assert [src(d) for d in rk.args.defaults[-2:]] == ["None", "None"]
    call = one_call(rk, LAUNCHER)
    assert src(kw(call, "seq_lens")) == "seq_lens"
    assert src(kw(call, "lse")) == "lse"
    assert src(kw(call, "return_lse")) == "lse is not None"
    assert src(kw(call, "out")) == "output.unsqueeze(1)"
    for c in calls(mod, LAUNCHER):
        assert kw(c, "sparse_mla_top_k_lens") is None
    assert not any(isinstance(n, ast.Name) and n.id == "sparse_mla_top_k_lens"
                   for n in ast.walk(mod))
    assert src(kw(one_call(find_func(_impl(applied.upstream_ast(SM)), "_run_mqa_kernel"),
                           LAUNCHER), "seq_lens")) == "None"


def test_valid_counts_from_dcp_conversion_reach_seq_lens(applied: Applied) -> None:
    mod = applied.patched_ast(SM)
    fm = find_func(_impl(mod), "forward_mqa")
    ret = _non_hisparse_return(fm)
    kernel_call = ret.value.elts[0]  # type: ignore[union-attr]
    assert isinstance(kernel_call, ast.Call)
    assert src(kw(kernel_call, "seq_lens")) == "valid_counts"

    dcp_if = _dcp_if(fm)
    helper = one_call(fm, DCP_HELPER)
    bound = [s for s, v in assignments_to(fm, "valid_counts")
             if isinstance(s, ast.Assign) and helper in list(ast.walk(v))]
    assert len(bound) == 1
    target = bound[0].targets[0]
    assert isinstance(target, ast.Tuple)
    assert [src(e) for e in target.elts] == ["topk_indices_physical", "valid_counts"]
    assert bound[0] in dcp_if.body
    expect = {
        "dcp_size": "self.dcp_world_size",
        "dcp_rank": "self.dcp_rank",
        "cp_kv_cache_interleave_size": "attn_metadata.cp_kv_cache_interleave_size",
        "BLOCK_SIZE": "attn_metadata.block_size",
        "NUM_TOPK_TOKENS": "topk_indices.shape[1]",
        "return_valid_counts": "True",
    }
    for name, want in expect.items():
        assert src(kw(helper, name)) == want, name
    assert [src(a) for a in helper.args] == [
        "attn_metadata.req_id_per_token[:num_actual_toks]", "attn_metadata.block_table",
        "topk_indices",
    ]
    # The stride argument exactly where upstream's own conversion passes one (0.32+).
    upstream_fm = find_func(_impl(applied.upstream_ast(SM)), "forward_mqa")
    upstream_conv = [c for c in calls(upstream_fm, "triton_convert_req_index_to_global_index")
                     if src(c.args[0]).startswith("attn_metadata.req_id_per_token")]
    assert len(upstream_conv) == 1
    assert src(kw(helper, "BLOCK_STRIDE_ROWS")) == src(kw(upstream_conv[0], "BLOCK_STRIDE_ROWS"))

    # Every keyword we pass is a parameter of this release's helper, imported from sparse_utils.
    su = ast.parse(applied.patched("vllm/v1/attention/backends/mla/sparse_utils.py"))
    sig = find_func(su, DCP_HELPER).args
    names = {a.arg for a in sig.args + sig.kwonlyargs}
    assert {k.arg for k in helper.keywords} <= names
    imported = {a.name for n in mod.body if isinstance(n, ast.ImportFrom)
                and n.module == "vllm.v1.attention.backends.mla.sparse_utils" for a in n.names}
    assert DCP_HELPER in imported
    rk = find_func(_impl(mod), "_run_mqa_kernel")
    rk_params = {a.arg for a in rk.args.args}
    assert {k.arg for k in kernel_call.keywords} <= rk_params


def test_dcp1_conversion_is_upstream_verbatim(applied: Applied) -> None:
    fm = find_func(_impl(applied.patched_ast(SM)), "forward_mqa")
    dcp_if = _dcp_if(fm)
    upstream_fm = find_func(_impl(applied.upstream_ast(SM)), "forward_mqa")
    upstream_stmt = [s for s in upstream_fm.body if isinstance(s, ast.Assign)
                     and src(s.targets[0]) == "topk_indices_physical"]
    assert len(upstream_stmt) == 1
    assert len(dcp_if.orelse) == 1
    assert ast.dump(dcp_if.orelse[0]) == ast.dump(upstream_stmt[0])


def test_rows_without_local_keys_are_masked(applied: Applied) -> None:
    rk = find_func(_impl(applied.patched_ast(SM)), "_run_mqa_kernel")
    if applied.release >= "0.34":
        # FlashInfer 0.7.3 (pinned) writes out 0 / LSE -inf for rows without keys (the
        # contract of its SM120 wrapper since 0.7.2): no masking kernels, an explicit base 2
        assert calls(rk, "masked_fill_") == [] and list(assignments_to(rk, "empty_rows")) == []
        call = one_call(rk, LAUNCHER)
        assert src(kw(call, "return_lse_base")) == "'base2'"
        return
    (empty_stmt, empty), = assignments_to(rk, "empty_rows")
    assert src(empty) == "seq_lens == 0"
    assert [(src(i.test), body) for i, body in enclosing_ifs(rk, empty_stmt)] == [
        ("seq_lens is not None", True)
    ]
    fills = {src(c.func): c for c in calls(rk, "masked_fill_")}
    assert set(fills) == {"out.masked_fill_", "lse.masked_fill_"}
    out_fill, lse_fill = fills["out.masked_fill_"], fills["lse.masked_fill_"]
    assert "empty_rows" in src(out_fill.args[0]) and src(out_fill.args[1]) == "0.0"
    assert "empty_rows" in src(lse_fill.args[0])
    assert src(lse_fill.args[1]) == "float('-inf')"
    # The masked LSE is the returned buffer: a different kernel result is copied into it.
    copies = calls(rk, "copy_")
    assert len(copies) == 1 and src(copies[0].func) == "lse.copy_"
    ret = rk.body[-1]
    assert isinstance(ret, ast.Return) and src(ret.value) == "out"


def test_workspace_taken_at_init_and_per_forward_device(applied: Applied) -> None:
    cls = _impl(applied.patched_ast(SM))
    init = find_func(cls, "__init__")
    got = [n for n in ast.walk(init) if isinstance(n, ast.Assign)
           and any(is_self_attr(t, "_workspace_buffer") for t in n.targets)
           and isinstance(n.value, ast.Call)]
    assert len(got) == 1 and src(got[0].value.func) == "_get_workspace_buffer"  # type: ignore[union-attr]
    rk = find_func(cls, "_run_mqa_kernel")
    refetch = [i for i in ast.walk(rk) if isinstance(i, ast.If)
               and "self._workspace_buffer.device != q.device" in src(i.test)]
    assert len(refetch) == 1
    assert src(refetch[0].body[0]) == "self._workspace_buffer = _get_workspace_buffer(q.device)"
    upstream_init = find_func(_impl(applied.upstream_ast(SM)), "__init__")
    assert not calls(upstream_init, "_get_workspace_buffer")
