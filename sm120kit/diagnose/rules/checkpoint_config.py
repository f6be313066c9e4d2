"""A checkpoint whose config does not match its weights or the model code.

``Local/global number of experts: 64/256`` where the checkpoint has fewer routed experts: a
stale ``num_experts`` key in config.json that transformers copies over ``n_routed_experts``
(GLM-5.x REAP checkpoints), so vLLM allocates experts that do not exist and runs out of memory
at weight load.

The tensor-level signatures (a weight whose shape does not fit, in every wording, and a missing
weight key) are catalogue entries (``catalogue/config.toml``); this rule reads the
experts/out-of-memory co-occurrence, which no single line states.
"""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext


def check(ctx: RuleContext) -> list[Finding]:
    out: list[Finding] = []
    experts = ctx.hits("experts-count")
    oom = ctx.hits("cuda-oom")
    shape = ctx.hits("cat:weight-shape-mismatch")
    if experts:
        pairs = sorted(ctx.values("experts-count"))
        loc_glob = pairs[0] if pairs else "?"
        conf = 0.9 if (oom or shape) else 0.55
        ev = experts[:2] + oom[:1] + shape[:1]
        out.append(RULE.finding(
            conf, f"vLLM built the MoE layers with local/global experts {loc_glob}"
            + (" and then ran out of memory at weight load" if oom else "")
            + ": if the checkpoint has fewer routed experts, its config.json carries a stale "
            "`num_experts` that overrides `n_routed_experts`", ev, phase="weight-load",
            role="cause"))
    return out


RULE = Rule(
    id="checkpoint-config",
    category="checkpoint-config",
    needs="'Local/global number of experts: A/B' with an OOM or a weight that does not fit "
          "(catalogue entry weight-shape-mismatch) at weight load",
    tier="dead-rank",
    check=check,
    fix="Delete the stale `num_experts` key from the checkpoint's config.json (transformers "
        "copies it over `n_routed_experts`), so local/global experts match the checkpoint.",
    link=None,
)
