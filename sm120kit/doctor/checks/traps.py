"""Preflight for the field's known traps (field-notes §1, §4), each from config.json, the
environment or the installed packages:

* ``launch.stale_num_experts``: a checkpoint config with both ``num_experts`` and a different
  ``n_routed_experts``: transformers' glm_moe_dsa / deepseek config re-routes the deprecated key
  over the explicit one, vLLM builds the wrong expert count and OOMs at weight load (after the
  whole load). An ``--hf-overrides`` dict does not reach the MTP draft (vLLM's
  ``SpeculativeConfig`` applies only callable overrides to the draft), so the fix is deleting
  the key;
* ``flashinfer.version_guard``: flashinfer-python differs from flashinfer-cubin /
  flashinfer-jit-cache and ``FLASHINFER_DISABLE_VERSION_CHECK`` is unset: FlashInfer's
  ``flashinfer/jit/env.py`` raises ``RuntimeError`` at import (verified in the 0.6.x/0.7.x wheels);
* ``nccl.p2p_pcie``: SM120 GPUs on PCIe without NVLink with NCCL P2P left on: the all-reduce
  deadlock reported on 4x RTX PRO 6000 (hang with no error, in init or the first collective);
* ``launch.interleave_indexer``: ``--cp-kv-cache-interleave-size`` > 1 with DCP on vLLM
  0.25.0 - 0.29.0, whose sparse indexer raises ``NotImplementedError("DCP sparse indexer
  currently supports only cp_kv_cache_interleave_size=1")`` (``v1/attention/backends/mla/
  indexer.py``; absent in 0.24.0 and from 0.30.0 on).
"""

from __future__ import annotations

from typing import Any

from sm120kit.doctor.checks.packages import versions
from sm120kit.doctor.context import DoctorContext
from sm120kit.doctor.model import Outcome, fail, ok, skip, warn
from sm120kit.doctor.registry import check
from sm120kit.facts.packages import version_ge

INDEXER_REJECTS = ("0.25.0", "0.30.0")  # [first, first-fixed)
P2P_COST = ("with P2P off, NCCL stages collectives through host memory: the published GLM-5.2 "
            "4x RTX PRO 6000 run (P2P off) decoded at 43 tok/s with DCP 4 vs 52 tok/s without "
            "DCP (-18 %: DCP's 156 collectives per token are host-staged, latency-bound)")


@check("launch.stale_num_experts", tier=0, title="config.json num_experts vs n_routed_experts",
       kind="launch")
def stale_num_experts(ctx: DoctorContext) -> Outcome:
    p = ctx.launch
    assert p is not None
    cfg = p.hf_config
    if cfg is None:
        return skip("model config.json not found locally; pass --config path/to/config.json")
    ne, nre = cfg.get("num_experts"), cfg.get("n_routed_experts")
    ev = {"num_experts": ne, "n_routed_experts": nre, "config": p.hf_config_source}
    if ne is None or nre is None:
        return ok("config.json has at most one expert-count key", **ev)
    if ne == nre:
        return ok(f"num_experts = n_routed_experts = {nre}", **ev)
    tp = p.serve.tp
    local = f"{ne // max(1, tp)}/{ne}" if tp > 1 else f"{ne}"
    return fail(f"config.json has num_experts {ne} and n_routed_experts {nre}: transformers "
                f"copies the stale num_experts over n_routed_experts, vLLM builds {ne} experts "
                f"('Local/global number of experts: {local}') and runs out of memory at weight "
                "load", f"delete \"num_experts\" from {p.hf_config_source or 'config.json'} "
                "(an --hf-overrides dict does not reach the MTP draft)", **ev)


@check("flashinfer.version_guard", tier=0,
       title="flashinfer-python vs flashinfer-cubin/-jit-cache version guard")
def version_guard(ctx: DoctorContext) -> Outcome:
    v = versions(ctx)
    fi = v.get("flashinfer-python")
    disabled = bool(ctx.environ.get("FLASHINFER_DISABLE_VERSION_CHECK"))
    ev: dict[str, Any] = {"flashinfer-python": fi, "FLASHINFER_DISABLE_VERSION_CHECK": disabled}
    if not fi:
        return skip("flashinfer-python is not installed")
    base = fi.split("+", 1)[0]
    off: list[str] = []
    cubin = v.get("flashinfer-cubin")
    if cubin and cubin != fi:
        off.append(f"flashinfer-cubin {cubin}")
    for name, ver in v.items():
        if name.startswith("flashinfer-jit-cache") and ver and not ver.startswith(base):
            off.append(f"{name} {ver}")
    ev["mismatched"] = off
    if not off:
        return ok(f"flashinfer-python {fi}: companion wheels match (or are absent)", **ev)
    newer = cubin is not None and not version_ge(cubin, base)
    what = f"flashinfer-python {fi} with {', '.join(off)}"
    if disabled:
        return ok(f"{what}; FLASHINFER_DISABLE_VERSION_CHECK is set, the import guard is "
                  "bypassed", **ev)
    return fail(f"{what}: `import flashinfer` raises RuntimeError ('... does not match "
                "flashinfer version ...') in flashinfer/jit/env.py",
                "export FLASHINFER_DISABLE_VERSION_CHECK=1" + (
                    " (flashinfer-python newer than its cubin wheel, as with 0.6.14 over "
                    "cubin 0.6.13)" if newer else "") + ", or install matching versions", **ev)


def sm120_pcie_no_nvlink(snap: Any) -> tuple[bool, dict[str, Any]]:
    gpus = [g for g in snap.gpus if g.compute_capability and g.compute_capability[0] == 12]
    nv = (snap.p2p or {}).get("caps", {}).get("nvlink") or []
    n = len(snap.gpus)
    links = [nv[i][j] for i in range(min(n, len(nv))) for j in range(n)
             if i != j and j < len(nv[i]) and nv[i][j] is not None]
    no_nvlink = bool(links) and all(s != 0 for s in links)
    ev = {"sm120_gpus": len(gpus), "gpus": n, "nvlink_pairs_ok": sum(1 for s in links if s == 0),
          "nvlink_pairs_known": len(links)}
    return len(gpus) >= 2 and no_nvlink, ev


@check("nccl.p2p_pcie", tier=1, title="SM120 on PCIe without NVLink: NCCL P2P left on")
def p2p_pcie(ctx: DoctorContext) -> Outcome:
    snap = ctx.nvml()
    if not snap.available or len(snap.gpus) < 2:
        return skip("needs NVML and two or more GPUs")
    hit, ev = sm120_pcie_no_nvlink(snap)
    ev["NCCL_P2P_DISABLE"] = ctx.environ.get("NCCL_P2P_DISABLE")
    if not hit:
        return ok("not an SM120 PCIe-only box (or NVLink present)", **ev)
    if ctx.environ.get("NCCL_P2P_DISABLE") == "1":
        return ok(f"SM120 x{ev['sm120_gpus']} on PCIe, no NVLink, NCCL_P2P_DISABLE=1; cost: "
                  f"{P2P_COST}", **ev)
    return warn(f"{ev['sm120_gpus']} SM120 GPUs on PCIe without NVLink and NCCL P2P enabled: "
                "the all-reduce can deadlock with no error (init or first collective) on these "
                "boxes", "export NCCL_P2P_DISABLE=1 (and --disable-custom-all-reduce); "
                f"{P2P_COST}. NCCL >= 2.31 can judge P2P itself: NCCL_RUN_DIAGNOSTICS=1 "
                "(sm120kit doctor --deep runs it)", **ev)


@check("launch.interleave_indexer", tier=0,
       title="--cp-kv-cache-interleave-size 1 on releases whose sparse indexer needs it",
       kind="launch")
def interleave_indexer(ctx: DoctorContext) -> Outcome:
    p = ctx.launch
    assert p is not None
    ver = ctx.vllm().version
    sa = p.serve
    inter = sa.interleave_for(ver)
    ev = {"vllm": ver, "interleave": inter, "dcp": sa.dcp,
          "rejecting_releases": f">={INDEXER_REJECTS[0]},<{INDEXER_REJECTS[1]}"}
    if inter <= 1 or sa.dcp <= 1:
        return ok(f"interleave {inter}, DCP {sa.dcp}: the indexer accepts it", **ev)
    if ver is None:
        return warn(f"interleave {inter} with DCP {sa.dcp}: vLLM 0.25.0-0.29.x's sparse "
                    "indexer raises NotImplementedError for it; vLLM is not installed here to "
                    "tell", "use --cp-kv-cache-interleave-size 1 (the default)", **ev)
    lo, hi = INDEXER_REJECTS
    if version_ge(ver, lo) and not version_ge(ver, hi):
        return fail(f"vLLM {ver}'s sparse indexer raises NotImplementedError('DCP sparse "
                    f"indexer currently supports only cp_kv_cache_interleave_size=1') for "
                    f"interleave {inter}", "drop --cp-kv-cache-interleave-size (default "
                    "1)", **ev)
    return ok(f"vLLM {ver}'s sparse indexer accepts interleave {inter}", **ev)
