"""Frames are evidence: where the input's first placed traceback ends (its innermost frames, mapped by
``catalogue/frames/frames.toml``) names the phase and the kind of failure: weight loading,
CUDA-graph capture, a device communicator, KV-cache profiling, JIT/autotune, torch.distributed.
A weak claim (the place, not the message): it ranks below any entry that knows the message."""

from __future__ import annotations

from sm120kit.diagnose.catalogue.frames import place
from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext

CONFIDENCE = 0.4


def check(ctx: RuleContext) -> list[Finding]:
    # the first traceback whose frames the map places, of the process that failed first: a
    # chained report prints the root first, but an excerpt may hold only its tail (frames of a
    # kernel call, no module of a known role); other processes' tracebacks are its cascade
    tbs = ctx.facts.tracebacks
    first = tbs[0].proc if tbs else None
    found = next(((tb, h) for tb in tbs[:4] if tb.proc == first and (h := place(tb.frames))),
                 None)
    if found is None:
        return []
    tb, (rule, f) = found
    inner = tb.frames[-1]
    where = f"{f.file.rsplit('/', 2)[-2:][-1]}:{f.line} in {f.function}"
    also = "" if f is inner else f" (innermost: {inner.function} at {inner.file}:{inner.line})"
    return [RULE.finding(
        CONFIDENCE, f"the first traceback fails inside {rule.what}: {where}{also}",
        [f.ev] + ([inner.ev] if f is not inner else []), category=rule.category,
        phase=rule.phase)]


RULE = Rule(
    id="traceback-frames",
    category="unknown",
    needs="Python traceback frames ('File \"...\", line N, in f') and the frame map",
    tier="config",
    check=check,
    fix="The exception line under these frames says what failed there; read it with the phase "
        "named here (weight files and config for weight loading, --enforce-eager for capture, "
        "NCCL_P2P_DISABLE=1 / --disable-custom-all-reduce for communicators).",
)
