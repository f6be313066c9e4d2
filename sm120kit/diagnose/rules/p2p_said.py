"""What a report says in words about the multi-GPU path of a hang (catalogue signals
``multi-gpu-only``, ``pcie-only-said``, ``geforce``). Part of the ``p2p-transport`` rule."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import RuleContext
from sm120kit.evidence.logs.analyze import Evidence


def multi_gpu(ctx: RuleContext, why: list[str]) -> tuple[list[str], list[Evidence]]:
    """What a report says in words about the multi-GPU path of a *hang* (a described or logged
    stall, not any complaint): it works on one GPU, the GPUs share PCIe only, consumer boards."""
    if not (ctx.facts.described.symptoms or ctx.stalled()):
        return why, []
    ev: list[Evidence] = []
    for sid, words in (("multi-gpu-only", "it works on one GPU and hangs only with tensor "
                        "parallelism (the multi-GPU transport)"),
                       ("pcie-only-said", "the GPUs are linked over PCIe only (no NVLink)")):
        h = ctx.hits(sid)
        if h:
            why = why + [words]
            ev += h[:1]
    # the board name is in every nvidia-smi table of a GeForce box, hang or not: it sharpens a
    # multi-GPU statement above, it is no reason of its own
    g = ctx.hits("geforce")
    if g and ev:
        why = why + ["the GPUs are consumer GeForce boards (no supported PCIe P2P)"]
        ev += g[:1]
    return why, ev
