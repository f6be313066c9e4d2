"""GPU peer-to-peer problems: failed P2P checks, NCCL transport errors, or a stall right after
NCCL init on a PCIe box that uses the P2P transport (ACS/IOMMU redirect)."""

from __future__ import annotations

from sm120kit.diagnose.rules import p2p_described, p2p_first
from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence


def check(ctx: RuleContext) -> list[Finding]:
    out: list[Finding] = []
    # the GPU peer path, not a network peer ("Got completion from peer 10.0.0.2<52310>",
    # "Connection closed by remote peer": catalogue/transport.toml)
    # ("Invalid value x for NCCL_P2P_LEVEL, using default ..." is an env value NCCL replaced)
    warns = [e for e in ctx.facts.nccl.warns
             if ctx.says("gpu-peer-path", e.text) and not ctx.says("nccl-warn-goes-on", e.text)]
    if warns:
        out.append(RULE.finding(0.8, "NCCL warned about the peer-to-peer path", warns[:4],
                                tier="dead-rank"))
    # the lines that state P2P failed are catalogue entries (catalogue/p2p.toml)
    # a stall right after NCCL init (the first collective) with P2P transports in use
    out += p2p_first.first_collective(ctx, RULE) + p2p_described.described(ctx, RULE) + \
        p2p_first.first_forward(ctx, RULE)
    p2p = sorted({t for ts in ctx.facts.nccl.transports.values() for t in ts if t.startswith("P2P")})
    ws = ctx.workers()
    stuck_nccl = [p for p in ws if p.tracker.stage == "nccl-init"]
    hang = ctx.stalled() or bool(ctx.facts.described.symptoms)
    if p2p and hang and stuck_nccl and len(stuck_nccl) >= max(1, len(ws) // 2):
        ev: list[Evidence] = [p.last for p in stuck_nccl[:3] if p.last is not None]
        out.append(RULE.finding(
            0.45, f"the ranks stopped right after NCCL init while using {', '.join(p2p)}: the "
            "first collective over PCIe P2P did not complete (ACS/IOMMU redirect is the usual "
            "cause)", ev, tier="config"))
    return out


RULE = Rule(
    id="p2p-transport",
    category="p2p-transport",
    needs="P2P check messages, NCCL WARN lines about P2P/IPC, NCCL transports ('via P2P/...'), "
          "phase where the ranks stopped",
    tier="gpu",
    check=check,
    fix="Check IOMMU (iommu=pt or off) and ACS on the PCIe bridges (`sm120kit doctor`); as an "
        "A/B test run NCCL_P2P_DISABLE=1 with --disable-custom-all-reduce.",
    link="https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#pci-access-control-services-acs",
)
