"""FlashInfer SM120 sparse decode: API by signature, dispatch coverage, kernels, JIT state."""

from __future__ import annotations

from typing import Any

from sm120kit.doctor.context import DoctorContext
from sm120kit.doctor.model import Outcome, fail, ok, skip, warn
from sm120kit.doctor.registry import check
from sm120kit.facts import flashinfer as fif
from sm120kit.facts.packages import get_dist, version_ge

MIN_API = fif.SM120_MIN
UPGRADE = (f"pip install flashinfer-python=={MIN_API} (vLLM 0.25.x pins 0.6.13, which lacks the "
           "SM120 API; a newer vLLM: the version it pins), with "
           f"{fif.VERSION_CHECK_ENV}=1 when an older flashinfer-cubin is installed")


def _not_installed(ctx: DoctorContext) -> Outcome:
    if ctx.vllm().installed:
        return fail("flashinfer-python is not installed but vLLM is",
                    "pip install flashinfer-python (the version vLLM pins)")
    return skip("flashinfer-python is not installed")


@check("flashinfer.sm120_api", tier=0, title="FlashInfer SM120 sparse decode API (signature)")
def sm120_api(ctx: DoctorContext) -> Outcome:
    info = ctx.flashinfer()
    if not info.installed:
        return _not_installed(ctx)
    ev: dict[str, Any] = {"version": info.version, "core": info.core_path,
                          "missing_params": info.missing_params,
                          "sm120_module": info.sm120_module, "routing": info.routing_present}
    if info.decode_params is None:
        return fail(f"flashinfer {info.version}: {fif.DECODE_FN} not found in mla/_core.py",
                    UPGRADE, **ev)
    if info.missing_params:
        return fail(f"flashinfer {info.version}: {fif.DECODE_FN} lacks "
                    f"{', '.join(info.missing_params)} (SM120 sparse decode needs >= {MIN_API})",
                    UPGRADE, **ev)
    if not info.sm120_module:
        return fail(f"flashinfer {info.version}: no mla/_sparse_mla_sm120 module", UPGRADE, **ev)
    ev["return_lse_base"] = "return_lse_base" in info.decode_params
    vi = ctx.vllm()
    if (vi.installed and vi.series_applied and version_ge(vi.version, "0.34.0")
            and not ev["return_lse_base"]):
        # the v0.34 variant passes return_lse_base="base2" (FlashInfer >= 0.7.2.post1)
        return fail(f"flashinfer {info.version}: {fif.DECODE_FN} has no return_lse_base, which "
                    f"the patched vLLM {vi.version} passes", "pip install the FlashInfer vLLM "
                    f"{vi.version} pins (flashinfer-python >= 0.7.2.post1)", **ev)
    cubin = get_dist("flashinfer-cubin", ctx.paths)
    if fif.cubin_mismatch(info.version, cubin.version if cubin else None, ctx.environ):
        return fail(f"flashinfer {info.version} has the SM120 API but flashinfer-cubin "
                    f"{cubin.version if cubin else '?'} differs: FlashInfer refuses to import",
                    f"export {fif.VERSION_CHECK_ENV}=1 (flashinfer-cubin has no "
                    f"{info.version} release) or install the matching flashinfer-cubin", **ev)
    if info.routing_present is False:
        return warn(f"flashinfer {info.version}: API present but the SM120 routing line "
                    f"({fif.ROUTING_TEXT!r}) was not found; a fork?", None, **ev)
    return ok(f"flashinfer {info.version}: {fif.DECODE_FN} has sparse_mla_top_k, "
              "kv_scale_format, lse, return_lse; SM120 sparse module present", **ev)


def _target_capabilities(ctx: DoctorContext) -> tuple[list[tuple[int, int]], str]:
    snap = ctx.peek("nvml")
    if snap is not None and snap.available and snap.gpus:
        ccs = sorted({g.compute_capability for g in snap.gpus if g.compute_capability})
        if ccs:
            return list(ccs), "NVML"
    return [(12, 0)], "assumed SM 12.0 (no NVML answer yet)"


def _cuda_for_jit(ctx: DoctorContext) -> tuple[str | None, str | None]:
    nv = ctx.nvcc()
    if nv.get("version"):
        return nv["version"], "nvcc"
    tb = ctx.torch()
    if tb and tb.get("cuda"):
        return tb["cuda"], "torch/version.py"
    return None, None


def kernel_state(ctx: DoctorContext) -> dict[str, Any]:
    def read() -> dict[str, Any]:
        info = ctx.flashinfer()
        ccs, cc_src = _target_capabilities(ctx)
        cuda, cuda_src = _cuda_for_jit(ctx)
        arch, how = fif.jit_arch_dir(ccs, cuda, ctx.environ)
        k = fif.kernels(info, arch_dir=arch, environ=ctx.environ, paths=ctx.paths)
        k.update({"arch_dir": arch, "arch_from": how, "capabilities": ccs, "cc_from": cc_src,
                  "cuda": cuda, "cuda_from": cuda_src})
        return k

    return ctx.cached("fi_kernels", read)


@check("flashinfer.kernels", tier=0, title="sparse_mla_sm120 kernel available (AOT/JIT cache)",
       timeout=10.0)
def kernels(ctx: DoctorContext) -> Outcome:
    info = ctx.flashinfer()
    if not info.installed:
        return _not_installed(ctx)
    if not info.has_sm120_api:
        return skip(f"flashinfer {info.version} has no SM120 sparse module (see "
                    "flashinfer.sm120_api)")
    k = kernel_state(ctx)
    if k["cc_from"] == "NVML" and not any(cc[0] == 12 for cc in k["capabilities"]):
        ccs = ", ".join(f"{a}.{b}" for a, b in k["capabilities"])
        return skip(f"no SM12x GPU visible (compute capability {ccs}): the SM120 kernel is not "
                    "used on this machine", **k)
    if k["found"]:
        return ok(f"compiled sparse_mla_sm120 found: {k['found'][0]}", **k)
    need = "12.8" if version_ge(info.version, "0.7.1") else "12.9"
    cuda = k["cuda"]
    nv = ctx.nvcc()
    if not nv.get("path"):
        return fail("no prebuilt sparse_mla_sm120 kernel and no nvcc for FlashInfer's JIT",
                    f"install the CUDA toolkit >= {need} (nvcc, ninja) or a flashinfer-jit-cache "
                    "provider for sm120", **k)
    if not version_ge(nv.get("version"), need):
        return fail(f"nvcc {nv.get('version') or '?'} at {nv['path']} is too old: FlashInfer "
                    f"{info.version} needs CUDA >= {need} for SM 12.0",
                    f"install CUDA toolkit >= {need} and set CUDA_HOME", **k)
    return warn(f"no prebuilt sparse_mla_sm120 kernel: the first start JIT-compiles it with "
                f"nvcc {cuda} (several minutes, on every rank that misses the cache)",
                "warm the JIT cache before launching (`sm120kit warmup run`) or install a "
                "flashinfer-jit-cache provider for sm120", **k)


@check("flashinfer.disable_jit", tier=0, title="FLASHINFER_DISABLE_JIT with no compiled kernel")
def disable_jit(ctx: DoctorContext) -> Outcome:
    val = ctx.environ.get("FLASHINFER_DISABLE_JIT")
    if not val or val in ("0", "false", "False"):
        return ok("FLASHINFER_DISABLE_JIT is not set", value=val)
    info = ctx.flashinfer()
    if not info.installed or not info.has_sm120_api:
        return skip("FLASHINFER_DISABLE_JIT is set; no FlashInfer SM120 module to judge",
                    value=val)
    k = kernel_state(ctx)
    if k["found"]:
        return ok("FLASHINFER_DISABLE_JIT is set and a compiled kernel exists", value=val,
                  found=k["found"])
    return fail("FLASHINFER_DISABLE_JIT is set but no compiled sparse_mla_sm120 exists: the "
                "first SM120 decode raises", "unset FLASHINFER_DISABLE_JIT or install an AOT "
                "provider / warm the JIT cache", value=val, searched=k)


@check("flashinfer.stale_jit_cache", tier=0, title="JIT caches of other FlashInfer versions")
def stale_jit_cache(ctx: DoctorContext) -> Outcome:
    info = ctx.flashinfer()
    base = str(fif.cache_base(ctx.environ))
    stale = fif.stale_caches(ctx.environ, info.version if info.installed else None)
    if not stale:
        return ok("no JIT cache of another FlashInfer version", cache=base)
    names = ", ".join(s["version"] for s in stale)
    return warn(f"JIT caches of other FlashInfer versions in {base}: {names}",
                f"remove them after an upgrade: rm -rf {' '.join(s['path'] for s in stale)}",
                cache=base, stale=stale, installed=info.version)
