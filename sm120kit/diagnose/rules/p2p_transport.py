"""GPU peer-to-peer problems: failed P2P checks, NCCL transport errors, or a stall right after
NCCL init on a PCIe box that uses the P2P transport (ACS/IOMMU redirect)."""

from __future__ import annotations

from sm120kit.diagnose.rules import collective_not_started
from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence
from sm120kit.evidence.logs.nccl_state import warn_goes_on


def check(ctx: RuleContext) -> list[Finding]:
    out: list[Finding] = []
    # the GPU peer path, not a network peer ("Got completion from peer 10.0.0.2<52310>",
    # "Connection closed by remote peer": catalogue/transport.toml)
    # ("Invalid value x for NCCL_P2P_LEVEL, using default ..." is an env value NCCL replaced)
    warns = [e for e in ctx.facts.nccl.warns
             if ctx.says("gpu-peer-path", e.text) and not warn_goes_on(e.text)]
    if warns:
        out.append(RULE.finding(0.8, "NCCL warned about the peer-to-peer path", warns[:4],
                                tier="dead-rank"))
    # the lines that state P2P failed are catalogue entries (catalogue/p2p.toml)
    # a stall right after NCCL init (the first collective) with P2P transports in use
    out += _first_collective(ctx) + _described(ctx) + _first_forward(ctx)
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


def _first_collective(ctx: RuleContext) -> list[Finding]:
    """The watchdog says the rank *enqueued* one of its first collectives and it never completed
    (``last enqueued 2, last completed 1``): not a missing peer, the transport under it."""
    if collective_not_started.check(ctx):
        return []  # the collective never started on the GPU: work ahead of it, not the transport
    hit = []
    for r, ev, _k in ctx.facts.waits.watchdog:
        if r.last_enqueued is None or r.last_completed is None:
            continue
        seq = r.seq if r.seq is not None else r.last_enqueued
        if seq <= 3 and r.last_enqueued >= seq and r.last_completed < seq:
            hit.append((r, ev))
    if not hit:
        return []
    r, ev = hit[0]
    big = any((x.numel_in or 0) >= 1 << 20 for x, _e in hit) or \
        any((x.numel_in or 0) >= 1 << 20 for x, _e, _k in ctx.facts.waits.watchdog)
    size = " (a large one)" if big else ""
    evs = [e for _x, e in hit[:2]]
    evs += [e for x, e, _k in ctx.facts.waits.watchdog if x.numel_in and e not in evs][:1]
    return [RULE.finding(
        0.7 if big else 0.6,
        f"collective {r.seq if r.seq is not None else r.last_enqueued} of the run{size} was "
        f"enqueued (last enqueued {r.last_enqueued}) and never completed (last completed "
        f"{r.last_completed}): the ranks reached it, the data never moved: the P2P/SHM transport "
        "under the first collectives is stuck", evs, tier="disagreement",
        phase="startup" if not ctx.facts.progress.served else "serving", role="cause")]


def _first_forward(ctx: RuleContext) -> list[Finding]:
    """NCCL set up its transports, then the first generation never produced a token (a bar
    stuck at 0 with 0.00 tokens/s) and nothing failed: the first collectives of the first forward
    never completed."""
    lg = ctx.facts
    if lg.progress.zero_progress is None or lg.failures or lg.progress.metrics_lines:
        return []
    ts = sorted({t for v in lg.nccl.transports.values() for t in v})
    if not ts:
        return []
    ev = [lg.progress.zero_progress] + [lg.phases.first_seen[p] for p in ("nccl-init",) if p in lg.phases.first_seen]
    return [RULE.finding(
        0.5, f"NCCL connected the ranks ({', '.join(ts)}) but the first forward never produced a "
        "token: the first collectives did not complete (a P2P/PCIe transport stall: ACS/IOMMU "
        "redirect or unsupported peer access)", ev, tier="config", phase="serving",
        role="cause")]


def _described(ctx: RuleContext) -> list[Finding]:
    """A pasted topology table, GPU state or prose that describes the PCIe P2P deadlock: a hang
    around NCCL init / the first collective on GPUs linked over PCIe only."""
    d = ctx.facts.described
    ev: list[Evidence] = []
    why: list[str] = []
    hang = bool(d.symptoms) or ctx.stalled() or bool(d.complaints)
    if not hang:
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
    why, more = _multi_gpu(ctx, why)
    ev += more
    nccl_init = ctx.facts.phases.stage == "nccl-init" or any(
        "NCCL" in t or "nccl" in t for _s, _l, t in d.symptoms)
    if nccl_init and not first:
        why.append("it stops around NCCL init")
    score = len(why)
    if score < 2:
        return []
    ev = [Evidence(*d.symptoms[0])] + ev if d.symptoms else ev
    return [RULE.finding(
        min(0.5 + 0.08 * score, 0.8), "a hang on GPUs linked over PCIe, described as: "
        + "; ".join(why) + ": the Blackwell/PCIe peer-to-peer deadlock (ACS/IOMMU redirect or "
        "unsupported P2P)", ev[:5], tier="disagreement", phase="startup", role="cause",
        fix="Run with NCCL_P2P_DISABLE=1 (SHM transport) to confirm; for a real fix disable ACS on "
            "the PCIe bridges (BIOS, or setpci) and set iommu=pt/off; check "
            "`nvidia-smi topo -p2p r` and `sudo lspci -vvv | grep ACSCtl`.")]


def _multi_gpu(ctx: RuleContext, why: list[str]) -> tuple[list[str], list[Evidence]]:
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
