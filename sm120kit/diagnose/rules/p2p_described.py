"""A report that describes the PCIe P2P deadlock: a hang around NCCL init / the first collective,
with reasons a person gives (a PCIe-only topology table, `topo -p2p` refusals, GPUs spinning at
low power, NCCL_P2P_DISABLE, ACS/IOMMU, "works on one GPU"). Part of the ``p2p-transport`` rule
(rules/p2p_transport.py); the words are catalogue signals (catalogue/signals.toml)."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.diagnose.rules.p2p_said import multi_gpu
from sm120kit.evidence.logs.analyze import Evidence


def described(ctx: RuleContext, rule: Rule) -> list[Finding]:
    """A pasted topology table, GPU state or prose that describes the PCIe P2P deadlock: a hang
    around NCCL init / the first collective on GPUs linked over PCIe only."""
    d = ctx.facts.described
    ev: list[Evidence] = []
    why: list[str] = []
    # a hang said or recorded (stalled() holds the described symptoms); an excerpt that only
    # ends around NCCL init is no stated hang: it needs more of the picture (a third reason)
    said = bool(d.complaints) or ctx.stalled(excerpt_end=False)
    if not said and ctx.stopped_at() is None:
        return []
    peer = ctx.hits("p2p-mention")
    if peer:
        why.append("the report names the GPU peer-to-peer path")
        ev += peer[:1]
    car = ctx.hits("custom-ar")
    if car:
        why.append("custom all-reduce (a P2P kernel) is involved")
        ev += car[:1]
    if d.pcie_only():
        why.append(f"the topology table links the GPUs over PCIe only ({', '.join(d.link_kinds())}, "
                   "no NVLink)")
        ev += [Evidence(src, ln, t) for src, ln, t in d.table_lines[1:3]]
    if d.p2p_refused():
        why.append(f"`nvidia-smi topo -p2p` reports {', '.join(d.p2p_refused())}")
    spin = d.spinning()
    if spin:
        why.append("the GPUs sit at ~100% utilization at low power (a spin-wait on a peer write)")
        ev.append(Evidence(spin[0].source, spin[0].line, spin[0].text))
    first = ctx.hits("first-collective")
    if first:
        why.append("the hang is at the first collective")
        ev += first[:1]
    works = [e for e in ctx.hits("nccl-p2p-env") if "DISABLE" in e.text]
    if works:
        why.append("the report mentions NCCL_P2P_DISABLE")
        ev += works[:1]
    acs = ctx.hits("acs-iommu")
    if acs:
        why.append("ACS/IOMMU is named")
        ev += acs[:1]
    why, more = multi_gpu(ctx, why)
    ev += more
    nccl_init = ctx.facts.phases.stage == "nccl-init" or any(
        "NCCL" in t or "nccl" in t for _s, _l, t in d.symptoms)
    if nccl_init and not first and ctx.completed() is None:
        why.append("it stops around NCCL init")
    score = len(why)
    if score < (2 if said else 3):
        return []
    ev = [Evidence(*d.symptoms[0])] + ev if d.symptoms else ev
    return [rule.finding(
        min(0.5 + 0.08 * score, 0.8), "a hang on GPUs linked over PCIe, described as: "
        + "; ".join(why) + ": the Blackwell/PCIe peer-to-peer deadlock (ACS/IOMMU redirect or "
        "unsupported P2P)", ev[:5], tier="disagreement", phase="startup", role="cause",
        fix="Run with NCCL_P2P_DISABLE=1 (SHM transport) to confirm; for a real fix disable ACS on "
            "the PCIe bridges (BIOS, or setpci) and set iommu=pt/off; check "
            "`nvidia-smi topo -p2p r` and `sudo lspci -vvv | grep ACSCtl`.")]
