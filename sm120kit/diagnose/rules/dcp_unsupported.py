"""DCP > 1 rejected because the attention backend does not return the softmax LSE."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext


def check(ctx: RuleContext) -> list[Finding]:
    out: list[Finding] = []
    rej = ctx.hits("dcp-not-supported")
    lse = ctx.hits("dcp-lse-assert")
    backend = ctx.config.get("attention_backend") or "the attention backend"
    if rej or lse:
        out.append(RULE.finding(
            0.95,
            f"{backend} does not support decode context parallelism in this vLLM build "
            "(no softmax LSE from decode)", rej + lse))
    nv = ctx.hits("dcp-nvfp4")
    if nv:
        out.append(RULE.finding(
            0.9, "this KV-cache dtype is not supported with decode context parallelism", nv,
            fix="Use --kv-cache-dtype fp8 (fp8_ds_mla layout) with DCP > 1, or run DCP 1."))
    il = ctx.hits("dcp-interleave")
    if il:
        out.append(RULE.finding(
            0.9, "the DCP KV-cache interleave size does not fit the block size / MTP", il,
            category="config-invalid",
            fix="Keep --cp-kv-cache-interleave-size 1 with MTP, and block_size a multiple of it "
                "(64 on the SM120 sparse-MLA backend)."))
    return out


RULE = Rule(
    id="dcp-unsupported",
    category="dcp-unsupported",
    needs="'DCP not supported' backend rejection; cp_utils 'requires attention implementations "
          "to return the softmax LSE' assertion",
    tier="dead-rank",
    check=check,
    fix="Patch vLLM with the DCP series for FLASHINFER_MLA_SPARSE_SM120: `sm120kit apply` "
        "(or run with --decode-context-parallel-size 1).",
    link="docs/apply.md",
)
