"""Library/build mismatches: undefined symbols, missing API parameters (FlashInfer SM120 sparse
MLA before 0.6.14 lacks kv_scale_format), kernels not built for sm_120, drivers too old, NCCL
versions with known SM120 bugs."""

from __future__ import annotations

import re

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence

_NCCL_V = re.compile(r"\b(2\.\d{1,2}\.\d{1,2})\b")


def check(ctx: RuleContext) -> list[Finding]:
    out: list[Finding] = []
    hard = (ctx.hits("undefined-symbol") + ctx.hits("flashinfer-api") + ctx.hits("no-kernel-image")
            + ctx.hits("sm-not-compatible") + ctx.hits("driver-too-old"))
    kw = [e for e in ctx.hits("unexpected-kwarg") if "TypeError" in e.text or "kwarg" in e.text
          or "keyword" in e.text]
    if kw:
        fi = any("kv_scale_format" in e.text or "return_lse" in e.text or "lse" in e.text
                 for e in kw)
        out.append(RULE.finding(
            0.93 if fi else 0.75,
            "a library call used a parameter the installed version does not have"
            + (" (FlashInfer older than the SM120 sparse-MLA API vLLM expects)" if fi else ""),
            kw[:3],
            fix="Install the FlashInfer version this vLLM pins (`sm120kit doctor` shows both); "
                "flashinfer-python >= 0.6.14 has the SM120 sparse-MLA decode path (its "
                "`kv_scale_format` keyword); with flashinfer-cubin lagging behind, set "
                "FLASHINFER_DISABLE_VERSION_CHECK=1." if fi else None, role="cause"))
    cu = ctx.hits("cuda-too-old")
    if cu:
        out.append(RULE.finding(
            0.85, "the CUDA toolkit/runtime is older than this GPU needs: " + cu[0].text[-160:],
            cu[:2], role="cause",
            fix="Use a CUDA toolkit >= 12.9 (13.0 verified for FlashInfer JIT on sm_120) and a "
                "torch/vLLM build for it; JIT-compiled kernels (FlashInfer, Triton) use the "
                "toolkit on the host/container, not the one torch was built with."))
    vc = [e for e in ctx.hits("flashinfer-version-check") if "does not match" in e.text]
    if vc:
        out.append(RULE.finding(
            0.92, "FlashInfer's import-time version check aborted: the flashinfer-cubin (or "
            "jit-cache) package and flashinfer-python have different versions", vc[:2],
            phase="startup", role="cause",
            fix="Install matching flashinfer-python and flashinfer-cubin versions; when the "
                "cubin package has no release for the flashinfer-python you need (e.g. 0.6.14 "
                "for the SM120 call site), set FLASHINFER_DISABLE_VERSION_CHECK=1."))
    if hard:
        out.append(RULE.finding(0.85, "a binary or API mismatch between installed libraries",
                                hard[:4], role="cause"))
    arch = ctx.hits("nccl-arch-unsupported")
    if arch:
        out.append(RULE.finding(
            0.9, f"NCCL {ctx.versions.get('nccl') or ''} does not know this GPU: its kernels ask "
            "for more shared memory than the device has (the NCCL build predates the "
            "architecture)".replace("NCCL  ", "NCCL "), arch[:1], role="cause",
            fix="Use an NCCL release that supports the GPU (SM120: NCCL >= 2.26.2; 2.27+ "
                "recommended) via pip nvidia-nccl-cu12/cu13 or VLLM_NCCL_SO_PATH."))
    old = _old_nccl(ctx) if not arch else None
    if old is not None:
        nccl, ev = old
        out.append(RULE.finding(
            0.6, f"NCCL {nccl} on an SM120 (Blackwell RTX) box: NCCL releases before 2.27 have "
            "SM120 failures (hangs and illegal memory accesses on large collectives over PCIe)",
            ev, tier="config", role="cause",
            fix="Upgrade NCCL (pip install -U nvidia-nccl-cu12/cu13, or point VLLM_NCCL_SO_PATH "
                "at a newer libnccl); the installed torch/vLLM may pin an older one."))
    return out


def _ver(v: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in v.split("+")[0].split(".")[:3])
    except ValueError:
        return ()


def _old_nccl(ctx: RuleContext) -> tuple[str, list[Evidence]] | None:
    """The oldest NCCL the input names, when it is older than 2.27 on an SM120 box that failed."""
    cc = str(ctx.versions.get("compute_capability") or "")
    sm120 = cc.startswith("12") or bool(ctx.hits("sm120-gpu"))
    failed = ctx.stalled() or bool(ctx.logs.failures) or bool(ctx.logs.described.complaints)
    if not (sm120 and failed):
        return None
    cands: list[tuple[tuple[int, ...], str, list[Evidence]]] = []
    nccl = ctx.versions.get("nccl")
    if isinstance(nccl, str) and _ver(nccl):
        cands.append((_ver(nccl), nccl, []))
    for e in ctx.hits("nccl-version-mention"):
        for v in _NCCL_V.findall(e.text):
            if _ver(v):
                cands.append((_ver(v), v, [e]))
    old = [c for c in cands if c[0] < (2, 27, 0)]
    if not old:
        return None
    ver, name, ev = min(old, key=lambda c: c[0])
    return name, ev + ctx.hits("sm120-gpu")[:1]


RULE = Rule(
    id="library-version",
    category="library-version",
    needs="'undefined symbol', 'unexpected keyword argument', 'no kernel image is available', "
          "'sm_120 is not compatible', driver-too-old messages, NCCL version + compute capability",
    tier="dead-rank",
    check=check,
    fix="Align the installed versions with what vLLM pins (`sm120kit doctor` reports the pins "
        "and the installed builds); wipe the FlashInfer/Triton JIT caches after upgrading.",
    link="docs/doctor.md",
)
