"""Library/build mismatches: undefined symbols, missing API parameters (FlashInfer SM120 sparse
MLA before 0.6.14 lacks kv_scale_format), kernels not built for sm_120, drivers too old, NCCL
versions with known SM120 bugs."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext


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
            0.9 if fi else 0.75,
            "a library call used a parameter the installed version does not have"
            + (" (FlashInfer older than the SM120 sparse-MLA API vLLM expects)" if fi else ""),
            kw[:3],
            fix="Install the FlashInfer version this vLLM pins (`sm120kit doctor` shows both); "
                "flashinfer-python >= 0.6.14 has the SM120 sparse-MLA decode path."
            if fi else None))
    if hard:
        out.append(RULE.finding(0.85, "a binary or API mismatch between installed libraries",
                                hard[:4]))
    nccl = ctx.versions.get("nccl")
    cc = str(ctx.versions.get("compute_capability") or "")
    if isinstance(nccl, str) and cc.startswith("12") and ctx.stalled():
        parts = nccl.split(".")
        try:
            ver = tuple(int(x) for x in parts[:3])
        except ValueError:
            ver = ()
        if ver and ver < (2, 26, 0):
            out.append(RULE.finding(
                0.45, f"NCCL {nccl} predates SM120 support fixes (RTX 5090 failures were fixed "
                "in 2.26)", [], tier="config",
                fix="Upgrade NCCL (pip install -U nvidia-nccl-cu12/cu13, or VLLM_NCCL_SO_PATH)."))
    return out


RULE = Rule(
    id="library-version",
    category="library-version",
    needs="'undefined symbol', 'unexpected keyword argument', 'no kernel image is available', "
          "'sm_120 is not compatible', driver-too-old messages, NCCL version + compute capability",
    tier="dead-rank",
    check=check,
    fix="Align the installed versions with what vLLM pins (`sm120kit doctor` reports the pins "
        "and the installed builds); wipe the FlashInfer/Triton JIT caches after upgrading.",
    link="README.md#doctor",
)
