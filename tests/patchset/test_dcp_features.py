"""Markers and features judged on live code paths; whole-tree checks of ``verify`` (pure AST).

The snippets are written here to isolate one rule each; the real fork files are exercised in
tests/port/test_fork_files.py.
"""

from __future__ import annotations

import textwrap

from sm120kit.models.astmarkers import holds
from sm120kit.models.dcpfeatures import analyze, backend_gates_dcp
from sm120kit.models.treecheck import imported_names, lse_base_overrides, module_defines

RANK = {"func": "convert", "name": "dcp_rank"}
LSE = {"func": "decode", "name": "return_lse", "not_in": [None, False]}


def impl(body: str, extra: str = "") -> str:
    """An SM120 impl class: ``extra`` in the class body, ``body`` in forward_mqa."""
    extra_lines = textwrap.indent(textwrap.dedent(extra).strip("\n"), "    ")
    body_lines = textwrap.indent(textwrap.dedent(body).strip("\n"), "        ")
    return (f"class FlashInferMLASparseSM120Impl(Base):\n{extra_lines}\n"
            f"    def forward_mqa(self, q, kv, md, layer):\n{body_lines}\n")


def test_constant_rank_is_not_a_live_marker() -> None:
    assert not holds("call_kwarg", RANK, impl("convert(q, dcp_size=1, dcp_rank=0)"))
    assert holds("call_kwarg", RANK, impl("convert(q, dcp_rank=self.dcp_rank)"))
    # self.dcp_rank only ever assigned a constant: still hard-coded
    only_zero = impl("convert(q, dcp_rank=self.dcp_rank)",
                     "def __init__(self):\n    self.dcp_rank = 0\n")
    assert not holds("call_kwarg", RANK, only_zero)
    from_group = impl("convert(q, dcp_rank=self.dcp_rank)",
                      "def __init__(self):\n    self.dcp_rank = 0\n"
                      "    if size > 1:\n        self.dcp_rank = group.rank_in_group\n")
    assert holds("call_kwarg", RANK, from_group)


def test_model_specific_branch_is_not_live() -> None:
    early_exit = impl("""
        if not self.rope_pad:
            return decode(q), None
        return self._part(q)
        """, """
        def _part(self, q):
            return decode(q, return_lse=True)
        """)
    assert not holds("call_kwarg", LSE, early_exit)
    nested = impl("if self.model_type == 'glm':\n    decode(q, return_lse=True)")
    assert not holds("call_kwarg", LSE, nested)
    dcp_branch = impl("if self.dcp_world_size > 1:\n    decode(q, return_lse=True)")
    assert holds("call_kwarg", LSE, dcp_branch)
    assert holds("call_kwarg", LSE, impl("decode(q, return_lse=self.need_lse)"))
    assert not holds("call_kwarg", LSE, impl("decode(q, return_lse=False)"))


def test_feature_detection_and_gaps() -> None:
    dcp = impl("""
        idx, n = to_local(q, dcp_world_size=self.dcp_world_size, dcp_rank=self.dcp_rank)
        return decode(q, return_lse=self.need_to_return_lse_for_decode)
        """)
    res = analyze(dcp)
    assert res.supports_dcp
    assert {g.name for g in res.gaps} >= {"lse_base_on_e = False",
                                          "zeroing of rows with no local keys"}
    complete = impl("""
        idx, n = to_local(q, dcp_rank=self.dcp_rank)
        out, lse = decode(q, return_lse=True)
        out.masked_fill_((n == 0).view(-1, 1, 1), 0.0)
        return out, lse
        """, "lse_base_on_e = False\n"
             "def __init__(self):\n    self._ws = _get_workspace_buffer(dev)\n")
    res = analyze(complete)
    assert res.supports_dcp and res.gaps == [], res.gaps
    assert not analyze(impl("to_local(q, dcp_rank=0)\nreturn decode(q, return_lse=True)"))\
        .supports_dcp
    # kv_lora_rank is a model dimension, not a DCP rank
    assert not analyze(impl("decode(q, kv_lora_rank=self.kv_lora_rank, return_lse=True)"))\
        .supports_dcp


def test_supports_dcp_gap_only_where_the_backend_reads_it() -> None:
    reads = ("class AttentionImpl:\n    supports_dcp: bool = False\n"
             "def check(cls):\n    return cls.get_impl_cls().supports_dcp\n")
    assert backend_gates_dcp(reads)
    assert not backend_gates_dcp("class AttentionImpl:\n    lse_base_on_e: bool = True\n")


def test_imports_resolve_against_module_definitions() -> None:
    src = ("from vllm.a.b import (x, y)\nimport os\n"
           "def f():\n    from .c import z\n    from torch import t\n")
    refs = imported_names("vllm/a/m.py", src)
    assert [(r.module, r.name) for r in refs] == [("vllm.a.b", "x"), ("vllm.a.b", "y"),
                                                   ("vllm.a.c", "z")]
    mod = "import torch\nX = 1\nif T:\n    def y(): pass\ntry:\n    from q import w\nexcept E:\n    pass\n"
    assert module_defines(mod) == {"torch", "X", "y", "w"}
    assert module_defines("def __getattr__(name): ...") is None


def test_lse_base_overrides_in_the_merging_layer() -> None:
    layer = textwrap.dedent("""
        def forward(self):
            a = cp_lse_ag_out_rs(o, lse, g, is_lse_base_on_e=True)
            b = dcp_a2a_lse_reduce(o, lse, g, is_lse_base_on_e=self.impl.lse_base_on_e)
            c = cp_lse_ag_out_rs(o, lse, g)
        """)
    found = [(o.call, o.detail) for o in lse_base_overrides(layer)]
    assert found == [("cp_lse_ag_out_rs", "is_lse_base_on_e=True"),
                     ("cp_lse_ag_out_rs", "no is_lse_base_on_e: base e by default")]


def test_lse_base_is_judged_against_the_merging_layer() -> None:
    body = """
        idx, n = to_local(q, self.dcp_rank)
        out, lse = decode(q, return_lse=True)
        out.masked_fill_((n == 0).view(-1, 1, 1), 0.0)
        return out, lse
        """
    init = "def __init__(self):\n    self._ws = _get_workspace_buffer(dev)\n"
    own_flag = impl(body, "returns_base2_lse = True\n" + init)
    reads_own = "cp_lse_ag_out_rs(o, l, g, is_lse_base_on_e=not self.impl.returns_base2_lse)\n"
    reads_std = "cp_lse_ag_out_rs(o, l, g, is_lse_base_on_e=self.impl.lse_base_on_e)\n"
    hard = "cp_lse_ag_out_rs(o, l, g, is_lse_base_on_e=True)\n"
    assert analyze(own_flag, layer=reads_own).gaps == []  # positional rank, its own flag
    assert [g.name for g in analyze(own_flag, layer=reads_std).gaps] == ["lse_base_on_e = False"]
    names = [g.name for g in analyze(impl(body, "lse_base_on_e = False\n" + init),
                                     layer=hard).gaps]
    assert names == ["the merging layer hard-codes is_lse_base_on_e=True"]


def test_fork_alias_texts_agree_with_port_from() -> None:
    """Every variant a fork alias' reason/verified text says it is ported from is port_from."""
    import re

    from sm120kit.models.series import load_series

    series = load_series()
    for t in series.targets.values():
        if not t.port_from:
            continue
        for text in (t.reason or "", t.verified or ""):
            named = re.findall(r"ported from (?:the )?(v[\d.]+(?:-[\d.]+)?)", text, re.I)
            assert all(v == t.port_from for v in named), (t.alias, named, t.port_from)


def test_the_general_side_of_a_model_branch_is_live() -> None:
    other_dtype_first = impl("""
        if self.kv_cache_dtype == "nvfp4":
            return self._nvfp4(q)
        return decode(q, return_lse=self.need_lse)
        """)
    assert holds("call_kwarg", LSE, other_dtype_first)
    in_else = impl("if self.rope_pad:\n    pass\nelse:\n    decode(q, return_lse=True)")
    assert holds("call_kwarg", LSE, in_else)
    only_glm = impl("if self.model_type != 'glm':\n    return q\ndecode(q, return_lse=True)")
    assert not holds("call_kwarg", LSE, only_glm)
