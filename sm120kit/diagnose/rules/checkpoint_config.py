"""A checkpoint whose config does not match its weights or the model code.

* ``Local/global number of experts: 64/256`` where the checkpoint has fewer routed experts: a
  stale ``num_experts`` key in config.json that transformers copies over ``n_routed_experts``
  (GLM-5.x REAP checkpoints), so vLLM allocates experts that do not exist and runs out of memory
  at weight load;
* ``Attempted to load weight (torch.Size([168])) into parameter (torch.Size([256]))``: a tensor in
  the checkpoint and the parameter the config made disagree (typically the MTP draft model, which
  does not receive a dict ``--hf-overrides``);
* ``KeyError: 'model.layers.N....weight'`` during weight load: the checkpoint lacks (or names
  differently) a tensor the model code expects.
"""

from __future__ import annotations

import re

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.report import clip_words

_SIZE = re.compile(r"torch\.Size\(\[(?P<a>[\d, ]+)\]\)\) into parameter \(torch\.Size\(\[(?P<b>[\d, ]+)\]\)")


def check(ctx: RuleContext) -> list[Finding]:
    out: list[Finding] = []
    experts = ctx.hits("experts-count")
    oom = ctx.hits("cuda-oom")
    shape = ctx.hits("weight-shape-mismatch")
    keys = ctx.hits("weight-key-missing")
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
    if shape:
        m = _SIZE.search(shape[0].text)
        what = f" ({m.group('a')} in the checkpoint vs {m.group('b')} in the model)" if m else ""
        drafter = any("draft" in e.text.lower() for e in ctx.hits("drafter-load")) or \
            bool(ctx.config.get("speculative_method") or ctx.config.get("mtp"))
        out.append(RULE.finding(
            0.85, f"a checkpoint tensor does not fit the parameter the config built{what}"
            + ("; the draft (MTP) model was built from the unmodified config" if drafter else ""),
            shape[:2] + experts[:1], phase="weight-load", role="cause",
            fix="Fix config.json itself (delete the stale key, e.g. `num_experts`) instead of "
                "--hf-overrides: a dict override does not reach the MTP draft model."))
    if keys and not shape:
        out.append(RULE.finding(
            0.7, "the model code asked for a weight the checkpoint does not have: "
            + clip_words(keys[0].text, 240), keys[:2], phase="weight-load", role="cause",
            fix="Check that the checkpoint matches the architecture and the vLLM version (MTP/"
                "draft layers, renamed tensors); re-download or convert the checkpoint."))
    return out


RULE = Rule(
    id="checkpoint-config",
    category="checkpoint-config",
    needs="'Local/global number of experts: A/B', 'Attempted to load weight (torch.Size(...)) "
          "into parameter', KeyError on a '.weight' name, OOM at weight load",
    tier="dead-rank",
    check=check,
    fix="Delete the stale `num_experts` key from the checkpoint's config.json (transformers "
        "copies it over `n_routed_experts`), so local/global experts match the checkpoint.",
    link=None,
)
