"""Does a tree already run DCP in the SM120 sparse-MLA backend? Judged from what the code does.

The series' exact markers name *our* helpers and comments; a fork that added DCP its own way
(PR #60 of local-inference-lab/vllm: its own global-to-local top-k helper, an LSE flag set in
``__init__``) carries none of them. So the decision is made per feature, on the syntax tree:

* **decode LSE**: a call passes ``return_lse`` that is not ``False``/``None``, on a live path
  (not only under a model-specific branch: :mod:`sm120kit.models.astlive`);
* **rank-local top-k**: a call passes a DCP rank that varies at run time (``dcp_rank=0`` is not
  DCP) to any helper, on a live path;

both together mean "this tree already supports DCP in this backend". Then every contract of the
series is checked and each one the tree lacks becomes a :class:`Gap` with why it matters, the
fix and the series patch that carries it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from sm120kit.models.astlive import path_is_live, self_attr_values, value_is_live

IMPL_CLASS = "FlashInferMLASparseSM120Impl"
#: keyword names that hand a helper the DCP rank (``kv_lora_rank`` is a model dimension)
_RANK = re.compile(r"^((dcp|cp|pcp)_)?rank$|dcp\w*rank|rank_in_group", re.I)


@dataclass(frozen=True)
class Gap:
    name: str
    why: str
    fix: str
    patch: str  # the series patch file (its number prefix) that carries the change


@dataclass
class DcpFeatures:
    supports_dcp: bool
    features: dict[str, bool] = field(default_factory=dict)
    evidence: dict[str, str] = field(default_factory=dict)
    gaps: list[Gap] = field(default_factory=list)


def _parse(text: str | None) -> ast.Module | None:
    if not text:
        return None
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def impl_class(tree: ast.Module) -> ast.ClassDef | None:
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    named = [c for c in classes if c.name == IMPL_CLASS]
    if named:
        return named[0]
    return next((c for c in classes if any(
        isinstance(f, ast.FunctionDef) and f.name == "forward_mqa" for f in c.body)), None)


def _calls(node: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call)]


def _const(node: ast.expr) -> object:
    return node.value if isinstance(node, ast.Constant) else ...


def _line(node: ast.AST) -> int:
    return getattr(node, "lineno", 0)


def decode_lse(tree: ast.Module, cls: ast.ClassDef) -> str | None:
    """Where the impl asks the kernel for the decode LSE on a live path (``return_lse`` not
    False/None, else an ``lse=`` output buffer that is not None), else None."""
    for key in ("return_lse", "lse"):
        for call in _calls(cls):
            for k in call.keywords:
                if k.arg != key or _const(k.value) in (False, None):
                    continue
                if path_is_live(tree, call):
                    return f"line {_line(call)}: {key}={ast.unparse(k.value)}"
    return None


def rank_local_topk(tree: ast.Module, cls: ast.ClassDef) -> str | None:
    """Where a helper is handed this rank's DCP rank (varying at run time) on a live path."""
    for call in _calls(cls):
        func = ast.unparse(call.func)
        for k in call.keywords:
            if k.arg and _RANK.search(k.arg) and value_is_live(tree, k.value, call) \
                    and path_is_live(tree, call):
                return f"line {_line(call)}: {func}({k.arg}={ast.unparse(k.value)})"
        for a in call.args:  # positional: self.dcp_rank, dcp_rank, group.rank_in_group
            name = a.attr if isinstance(a, ast.Attribute) else a.id if isinstance(a, ast.Name) \
                else ""
            if name and _RANK.search(name) and value_is_live(tree, a, call) \
                    and path_is_live(tree, call):
                return f"line {_line(call)}: {func}(..., {ast.unparse(a)}, ...)"
    return None


def class_or_self_value(cls: ast.ClassDef, name: str) -> object:
    """The constant ``name`` is set to on the class or on ``self`` (last one wins; ``...``:
    not set; None-like non-constants give ``"dynamic"``)."""
    vals = self_attr_values(cls, name)
    if not vals:
        return ...
    c = _const(vals[-1])
    return "dynamic" if c is ... else c


def _lse_base(cls: ast.ClassDef) -> str:
    """The LSE base the FlashInfer call asks for: ``"2"`` unless ``return_lse_base`` says e."""
    for call in _calls(cls):
        for k in call.keywords:
            if k.arg == "return_lse_base":
                c = _const(k.value)
                if isinstance(c, str) and "2" not in c and "e" in c.lower():
                    return "e"
    return "2"


def _zeroes_empty_rows(cls: ast.ClassDef) -> bool:
    """A ``masked_fill`` (or ``torch.where``) whose mask is a row count compared with 0."""
    for call in _calls(cls):
        name = call.func.attr if isinstance(call.func, ast.Attribute) else ""
        if name not in ("masked_fill", "masked_fill_", "where"):
            continue
        for n in ast.walk(call):
            if isinstance(n, ast.Name) and "empty" in n.id:
                return True
            if isinstance(n, ast.Compare) and any(_const(c) == 0 for c in n.comparators):
                return True
    return False


def _per_device_workspace(sparse: ast.Module | None) -> bool | None:
    if sparse is None:
        return None
    fns = [n for n in ast.walk(sparse) if isinstance(n, ast.FunctionDef)
           and n.name == "_get_workspace_buffer"]
    if not fns:
        return None
    return not any(isinstance(g, ast.Global) for fn in fns for g in ast.walk(fn))


def _workspace_at_init(cls: ast.ClassDef) -> bool:
    init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"),
                None)
    return init is not None and any(
        isinstance(c.func, ast.Name | ast.Attribute)
        and (c.func.id if isinstance(c.func, ast.Name) else c.func.attr) == "_get_workspace_buffer"
        for c in _calls(init))


def _dcp_warmup(warmup: ast.Module | None) -> bool | None:
    if warmup is None:
        return None
    fn = next((n for n in ast.walk(warmup) if isinstance(n, ast.FunctionDef)
               and n.name == "run_mixed_prefill_decode_warmup"), None)
    if fn is None:
        return None
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and not isinstance(n.value, ast.Constant) and any(
                isinstance(t, ast.Name) and t.id == "decode_prompt_len" for t in n.targets):
            return True
        if isinstance(n, ast.Name | ast.Attribute):
            ident = n.id if isinstance(n, ast.Name) else n.attr
            if "dcp" in ident or "decode_context_parallel" in ident:
                return True
    return False


def backend_gates_dcp(backend_text: str | None) -> bool:
    """The tree's ``vllm/v1/attention/backend.py`` refuses DCP unless the impl declares
    ``supports_dcp`` (0.30+: a class attribute read by the backend's DCP check)."""
    tree = _parse(backend_text)
    if tree is None:
        return False
    reads = any(isinstance(n, ast.Attribute) and n.attr == "supports_dcp"
                and isinstance(n.ctx, ast.Load) for n in ast.walk(tree))
    default_false = any(
        isinstance(n, ast.AnnAssign | ast.Assign) and _const(n.value) is False
        and any(isinstance(t, ast.Name) and t.id == "supports_dcp"
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))
        for n in ast.walk(tree) if isinstance(n, ast.AnnAssign | ast.Assign) and n.value is not None)
    return reads and default_false


def layer_base_attrs(layer: str | None) -> tuple[set[str], bool] | None:
    """What the merging layer's ``is_lse_base_on_e=`` arguments read from the impl (attribute
    names), and whether one is a hard-coded constant; None without such a layer."""
    tree = _parse(layer)
    if tree is None:
        return None
    attrs: set[str] = set()
    constant = False
    for call in _calls(tree):
        for k in call.keywords:
            if k.arg == "is_lse_base_on_e":
                if isinstance(k.value, ast.Constant):
                    constant = True
                attrs |= {n.attr for n in ast.walk(k.value) if isinstance(n, ast.Attribute)}
    return (attrs, constant) if attrs or constant else None


def _lse_base_gaps(res: DcpFeatures, cls: ast.ClassDef, layer: str | None) -> list[Gap]:
    """The LSE base contract, judged against what the tree's merging layer reads."""
    want_e = _lse_base(cls) == "e"
    read = layer_base_attrs(layer)
    attrs = read[0] if read else {"lse_base_on_e"}
    own = sorted(a for a in attrs if a != "lse_base_on_e" and
                 class_or_self_value(cls, a) is not ...)
    declared = class_or_self_value(cls, "lse_base_on_e")
    ok = bool(own) or (declared is not ... and declared == want_e)
    res.features["LSE base declared"] = ok
    gaps = []
    why = ("FlashInfer's sparse MLA returns a base-2 LSE; the layer that merges the DCP ranks "
           "assumes base e unless the impl says otherwise, so the merged output is wrong "
           "(fluent, wrong text) without an error")
    if not ok and not want_e:
        gaps.append(Gap("lse_base_on_e = False", why,
                        f"set `lse_base_on_e = False` on {cls.name}", "0002"))
    if read is not None and read[1] and not want_e:
        gaps.append(Gap("the merging layer hard-codes is_lse_base_on_e=True",
                        why + "; here the layer does not even ask the impl",
                        "pass is_lse_base_on_e=self.impl.lse_base_on_e in the MLA layer's DCP "
                        "merge (mla_attention.py)", "0002"))
    return gaps


def analyze(sm120: str | None, sparse: str | None = None, warmup: str | None = None,
            backend: str | None = None, layer: str | None = None) -> DcpFeatures:
    """The DCP features of the SM120 impl (``sm120``) and its neighbours (``layer``: the file
    that runs ``forward_mqa`` and merges the ranks), and the gaps."""
    tree = _parse(sm120)
    cls = impl_class(tree) if tree is not None else None
    if tree is None or cls is None:
        return DcpFeatures(False)
    lse = decode_lse(tree, cls)
    topk = rank_local_topk(tree, cls)
    res = DcpFeatures(bool(lse and topk))
    res.features = {"decode LSE": bool(lse), "rank-local top-k": bool(topk)}
    res.evidence = {k: v for k, v in (("decode LSE", lse), ("rank-local top-k", topk)) if v}
    res.gaps += _lse_base_gaps(res, cls, layer)
    res.features["empty local rows zeroed"] = _zeroes_empty_rows(cls)
    if not res.features["empty local rows zeroed"]:
        res.gaps.append(Gap(
            "zeroing of rows with no local keys",
            "a token whose top-k has no key on this rank gets an undefined output and LSE from "
            "FlashInfer before 0.7.2; the DCP merge then mixes garbage (or NaN) into every rank",
            "after the FlashInfer call, fill output rows whose valid count is 0 with 0 and "
            "their LSE with -inf", "0005"))
    if backend_gates_dcp(backend):
        res.features["supports_dcp"] = class_or_self_value(cls, "supports_dcp") is True
        if not res.features["supports_dcp"]:
            res.gaps.append(Gap(
                "supports_dcp = True",
                "this tree's attention backend refuses -dcp > 1 for an impl that does not "
                "declare supports_dcp (its default is False)",
                f"set `supports_dcp = True` on {cls.name}", "0002"))
    per_device = _per_device_workspace(_parse(sparse))
    if per_device is not None:
        res.features["per-device workspace"] = per_device
        if not per_device:
            res.gaps.append(Gap(
                "one FlashInfer workspace per CUDA device",
                "_get_workspace_buffer keeps one process-wide buffer (global), bound to the "
                "first device that asked; FlashInfer refuses a workspace on another device",
                "key the workspace by torch.device in flashinfer_mla_sparse.py", "0001"))
    res.features["workspace at init"] = _workspace_at_init(cls)
    if not res.features["workspace at init"]:
        res.gaps.append(Gap(
            "workspace taken at init",
            "taken on the first decode instead, the workspace is not in vLLM's memory "
            "profile, so the KV cache is sized without it and the first decode can OOM",
            "call _get_workspace_buffer(this device) in __init__", "0001"))
    warm = _dcp_warmup(_parse(warmup))
    if warm is not None:
        res.features["DCP-valid warmup"] = warm
        if not warm:
            res.gaps.append(Gap(
                "DCP-valid warmup",
                "the mixed warmup decodes a 2-token prompt, which leaves every DCP rank but "
                "one without local KV, so the warmup (and FlashInfer's autotuner in it) never "
                "sees the shapes serving produces",
                "give the warmup's decode request dcp_size * block_size prompt tokens", "0006"))
    return res
