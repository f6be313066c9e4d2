"""The installed vLLM: the SM120 backend, and DCP support (our series' markers or upstream LSE)."""

from __future__ import annotations

from sm120kit.doctor.context import DoctorContext
from sm120kit.doctor.model import Outcome, fail, ok, skip, warn
from sm120kit.doctor.registry import check
from sm120kit.facts.vllm import SM120_FILE

APPLY_FIX = "sm120kit apply --installed"


@check("vllm.sm120_backend", tier=0, title="vLLM has FLASHINFER_MLA_SPARSE_SM120")
def sm120_backend(ctx: DoctorContext) -> Outcome:
    vi = ctx.vllm()
    if not vi.installed:
        return skip("vLLM is not installed")
    ev = {"version": vi.version, "root": vi.root, "file": SM120_FILE}
    if not vi.has_sm120_backend:
        return fail(f"vLLM {vi.version} has no FLASHINFER_MLA_SPARSE_SM120 backend "
                    f"({SM120_FILE} is missing; it exists from vLLM 0.24)",
                    "pip install 'vllm>=0.30' (the series supports 0.30-0.34)", **ev)
    return ok(f"vLLM {vi.version} ships FLASHINFER_MLA_SPARSE_SM120", **ev)


@check("vllm.dcp_support", tier=0, title="SM120 backend supports DCP (returns decode LSE)")
def dcp_support(ctx: DoctorContext) -> Outcome:
    vi = ctx.vllm()
    dcp = ctx.dcp
    if not vi.installed:
        return skip("vLLM is not installed")
    if not vi.has_sm120_backend:
        return skip("no SM120 backend (see vllm.sm120_backend)")
    ev = {"version": vi.version, "dcp_planned": dcp, "series": vi.series,
          "impl_attrs": {k: (v if v is not ... else "<expr>") for k, v in vi.impl_attrs.items()},
          "passes_return_lse": vi.passes_return_lse}
    if vi.series_applied:
        return ok(f"sm120kit DCP series applied ({vi.series['applied_variant']})", **ev)
    if vi.upstream_lse:
        return ok("the SM120 impl returns decode LSE (can_return_lse_for_decode = True, "
                  "return_lse=): an upstream or fork DCP implementation", **ev)
    partial = [n for n, s in (vi.series.get("variants") or {}).items() if s.get("present")]
    if partial:
        msg = (f"sm120kit DCP series only partly applied to vLLM {vi.version} "
               f"(variants with some markers: {', '.join(partial)})")
        if dcp and dcp > 1:
            return fail(msg, f"{APPLY_FIX} (or `sm120kit status --installed` to see why)", **ev)
        return warn(msg, f"`sm120kit status --installed`, then {APPLY_FIX}", **ev)
    if dcp and dcp > 1:
        return fail(f"vLLM {vi.version}'s FLASHINFER_MLA_SPARSE_SM120 does not support DCP "
                    f"(no decode LSE) but DCP={dcp} is planned", APPLY_FIX, **ev)
    return ok(f"vLLM {vi.version}: SM120 backend without DCP support; fine while DCP is 1 "
              f"(DCP > 1 needs `{APPLY_FIX}`)", **ev)
