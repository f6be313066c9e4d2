"""What a user must do by hand where a port conflicts in the SM120 impl's ``forward_mqa``.

A fork that rewrote the very statements the series rewrites (the top-k conversion, the
FlashInfer call's ``seq_lens``, the output buffer and the ``return``) cannot be merged by lines
or by definitions: both sides changed the same statement, with different intents. What the
series needs there is a small set of contracts, and each one can be checked on the fork's own
code. :func:`guide` reads the fork's impl and says, per contract (per series patch), whether the
fork already does it (with the line) or what to change and where (with the line).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Literal

from sm120kit.models.astlive import value_is_live
from sm120kit.models.dcpfeatures import decode_lse, impl_class, rank_local_topk

StepState = Literal["done-in-fork", "to-do"]
#: keyword names that hand a helper the DCP rank or the DCP size
_RANK = re.compile(r"^((dcp|cp|pcp)_)?rank$|dcp\w*rank|rank_in_group", re.I)
_SIZE_WORDS = ("dcp_size", "dcp_world_size", "world_size", "cp_size")
_FILTER = "triton_filter_and_convert_dcp_index"
_CONVERT = "triton_convert_req_index_to_global_index"


@dataclass(frozen=True)
class Step:
    patch: str  # the series patch's number prefix ("0003")
    contract: str
    state: StepState
    line: int  # the fork's line it is about (0: none)
    what: str

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def _name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _kw(call: ast.Call, key: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == key), None)


def _forward(cls: ast.ClassDef) -> ast.FunctionDef | None:
    return next((f for f in cls.body if isinstance(f, ast.FunctionDef)
                 and f.name == "forward_mqa"), None)


def _decode_call(fn: ast.FunctionDef) -> ast.Call | None:
    """The kernel call: the one that takes ``block_tables=`` (FlashInfer's decode API)."""
    return next((c for c in ast.walk(fn) if isinstance(c, ast.Call)
                 and _kw(c, "block_tables") is not None), None)


def _topk_step(tree: ast.Module, cls: ast.ClassDef, fn: ast.FunctionDef) -> Step:
    c = "rank-local top-k"
    live = rank_local_topk(tree, cls)
    if live:
        return Step("0003", c, "done-in-fork", int(live.split(":")[0][5:] or 0), live)
    for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
        fixed = [k for k in call.keywords if k.arg and (_RANK.search(k.arg)
                 or k.arg in _SIZE_WORDS) and not value_is_live(tree, k.value, call)]
        if fixed:
            names = ", ".join(f"{k.arg}={ast.unparse(k.value)}" for k in fixed)
            live_vals = ", ".join(
                f"{k.arg}=self.dcp_rank" if _RANK.search(k.arg or "") else
                f"{k.arg}=self.dcp_world_size" for k in fixed)
            extra = ("" if _kw(call, "cp_kv_cache_interleave_size") is not None else
                     " and cp_kv_cache_interleave_size=attn_metadata.cp_kv_cache_interleave_size")
            return Step("0003", c, "to-do", call.lineno,
                        f"line {call.lineno}: {_name(call)}(...) is given {names} (constants: "
                        f"this rank would read every rank's keys); pass {live_vals}{extra}")
    conv = next((n for n in ast.walk(fn) if isinstance(n, ast.Call) and _name(n) == _CONVERT),
                None)
    where = f"line {conv.lineno}: " if conv else ""
    return Step("0003", c, "to-do", conv.lineno if conv else fn.lineno,
                f"{where}under DCP (self.dcp_world_size > 1) convert the top-k with {_FILTER}"
                "(..., dcp_size=self.dcp_world_size, dcp_rank=self.dcp_rank, "
                "cp_kv_cache_interleave_size=attn_metadata.cp_kv_cache_interleave_size, "
                "return_valid_counts=True) instead, keeping the release conversion for DCP 1 "
                "(the patched side in the report)")


def _valid_count_names(fn: ast.FunctionDef) -> dict[str, int]:
    """Names bound to the valid counts: the second target of ``a, b = f(...,
    return_valid_counts=<not False>)`` (through ``cast(...)``), with their line."""
    out: dict[str, int] = {}
    for n in ast.walk(fn):
        if not (isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Tuple)):
            continue
        calls = [c for c in ast.walk(n.value) if isinstance(c, ast.Call)]
        flag = next((_kw(c, "return_valid_counts") for c in calls
                     if _kw(c, "return_valid_counts") is not None), None)
        elts = n.targets[0].elts
        if flag is not None and not (isinstance(flag, ast.Constant) and not flag.value) \
                and len(elts) == 2 and isinstance(elts[1], ast.Name):
            out[elts[1].id] = n.lineno
    return out


def _seq_lens_step(fn: ast.FunctionDef, call: ast.Call | None) -> Step:
    c = "valid counts as seq_lens"
    if call is None:
        return Step("0004", c, "to-do", fn.lineno, "no FlashInfer decode call (block_tables=) "
                    "found in forward_mqa: pass the valid counts as its seq_lens")
    val = _kw(call, "seq_lens")
    counts = _valid_count_names(fn)
    used = {n.id for n in ast.walk(val) if isinstance(n, ast.Name)} if val is not None else set()
    hit = sorted(used & set(counts))
    if hit:
        return Step("0004", c, "done-in-fork", call.lineno,
                    f"line {call.lineno}: seq_lens={ast.unparse(val) if val else ''} are the "
                    f"valid counts of line {counts[hit[0]]}: nothing to do")
    shown = ast.unparse(val) if val is not None else "(not given)"
    return Step("0004", c, "to-do", call.lineno,
                f"line {call.lineno}: seq_lens={shown}: pass the valid counts returned by the "
                f"DCP conversion (return_valid_counts=True) instead")


def _lse_step(tree: ast.Module, cls: ast.ClassDef, fn: ast.FunctionDef,
              call: ast.Call | None) -> Step:
    c = "decode LSE"
    have = decode_lse(tree, cls)
    if have:
        return Step("0005", c, "done-in-fork", 0, have)
    line = call.lineno if call is not None else fn.lineno
    rows = "num_actual_toks"
    cut = ""
    for r in (n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None):
        first = r.value.elts[0] if isinstance(r.value, ast.Tuple) and r.value.elts else r.value
        if isinstance(first, ast.Subscript) and isinstance(first.slice, ast.Slice):
            rows = "q.shape[0]"
            cut = (f"; this fork returns {ast.unparse(first)} (line {r.lineno}): its kernel rows "
                   "are padded, so size the LSE with q.shape[0] rows and cut it the same way")
    return Step("0005", c, "to-do", line,
                f"line {line}: the kernel is asked for no LSE. When "
                "self.need_to_return_lse_for_decode, allocate lse = q.new_empty(("
                f"{rows}, q.shape[1]), dtype=torch.float32) and pass lse=lse, "
                "return_lse=lse is not None; size the output's heads as q.shape[1] (DCP "
                "all-gathers the query heads); zero output rows whose valid count is 0 and set "
                f"their LSE to -inf; return (out, lse){cut}")


def guide(sm120: str | None, patches: set[str]) -> list[Step]:
    """The steps for the contracts of ``patches`` (number prefixes such as ``"0003"``) in the
    fork's SM120 impl ``sm120``; empty when the file has no impl with ``forward_mqa``."""
    try:
        tree = ast.parse(sm120 or "")
    except (SyntaxError, ValueError):
        return []
    cls = impl_class(tree)
    fn = _forward(cls) if cls is not None else None
    if cls is None or fn is None:
        return []
    call = _decode_call(fn)
    steps = {"0003": lambda: _topk_step(tree, cls, fn),
             "0004": lambda: _seq_lens_step(fn, call),
             "0005": lambda: _lse_step(tree, cls, fn, call)}
    return [steps[p]() for p in sorted(patches) if p in steps]

