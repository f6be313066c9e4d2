"""A GPU-sharing interposer named beside a failed or stuck multi-GPU start.

HAMi / HAMi-core (``libvgpu.so``) and the device plugins that ship it (Volcano's vGPU device
plugin) ``LD_PRELOAD`` a hook over the CUDA driver and NVML calls of every process in the pod.
Their regressions show up as vLLM's own startup failing at NCCL / TCPStore / communicator init
(HAMi#1479, HAMi#1461, HAMi-core#261, volcano-vgpu-device-plugin#108): the log shows only the
cascade, the layer under it is named in the report or the environment. Named on a run that
neither failed nor stopped, it stays a ``position`` note of the catalogue
(catalogue/interposer.toml, ``requires = "stall"``). Structural, not a line signature: the
finding needs the layer's name *and* the failed/stopped start, so it lives here.
"""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence
from sm120kit.report import clip_words

# the startup steps an interposer breaks: process-group / NCCL communicator setup
_INIT_WORDS = ("NCCL", "nccl", "TCPStore", "communicator", "init_process_group",
               "Engine core initialization failed", "WorkerProc", "distributed")


def check(ctx: RuleContext) -> list[Finding]:
    named = ctx.hits("gpu-virt")
    lg = ctx.facts
    if not named or lg.phases.stage == "serving" or lg.progress.served:
        return []
    failed = bool(lg.failures) or bool(lg.waits.deaths)
    if not (failed or ctx.stalled()):
        return []
    texts = [e.text for e in lg.failures[:8]] + [t for _s, _l, t in lg.described.symptoms[:4]]
    at_init = lg.phases.stage in (None, "engine-init", "nccl-init") or any(
        w in t for t in texts for w in _INIT_WORDS)
    if not at_init:
        return []
    ev: list[Evidence] = named[:2] + (list(lg.failures[:2]) if failed else [])
    how = "failed" if failed else "stopped"
    return [RULE.finding(
        0.6, f"the multi-GPU start {how} at process-group / NCCL init under a GPU-sharing "
        f"interposer ({clip_words(named[0].text.strip(), 120)}): its CUDA/NVML hook is the usual cause of "
        "this startup failure", ev, phase="startup", role="cause")]


RULE = Rule(
    id="gpu-sharing-init",
    category="interposer",
    needs="a GPU-sharing layer named (HAMi, HAMi-core, libvgpu.so, a vGPU device plugin) and a "
          "start that failed or stopped at NCCL / process-group init",
    tier="disagreement",
    check=check,
    fix="A/B test without the hook: run the pod with whole GPUs and no libvgpu.so preload (HAMi-"
        "core: CUDA_DISABLE_CONTROL=true) or on the interposer version that last worked; report it "
        "to the interposer's tracker with NCCL_DEBUG=INFO output.",
    link="https://github.com/Project-HAMi/HAMi/issues/1479",
)
