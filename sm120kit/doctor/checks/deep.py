"""Tier 2 (``--deep``): ACS bits, AER counters, Xid lines, functional P2P + NCCL smoke test."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from sm120kit.doctor.context import DoctorContext
from sm120kit.doctor.model import Outcome, fail, ok, skip, warn
from sm120kit.doctor.registry import check
from sm120kit.evidence.logs.nccl_diag import NcclDiag
from sm120kit.facts import host, kernlog
from sm120kit.facts.packages import package_dir
from sm120kit.services.proctree import stop_pids

REDIRECT_BITS = {"ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl"}


@check("deep.acs", tier=2, title="ACS redirect bits on the GPUs' upstream bridges")
def acs(ctx: DoctorContext) -> Outcome:
    gpus = ctx.gpu_bus_ids()
    if not gpus:
        return skip("no NVIDIA GPU found in sysfs")
    bridges: dict[str, dict[str, Any]] = {}
    for g in gpus:
        for b in host.upstream_bridges(ctx.root, g):
            if b not in bridges:
                bridges[b] = host.acs_control(ctx.root, b)
    if not bridges:
        return skip("no upstream PCI bridges found for the GPUs")
    unreadable = [b for b, a in bridges.items() if not a["readable"]]
    flagged = {b: sorted(set(a["bits"]) & REDIRECT_BITS) for b, a in bridges.items()
               if a.get("present") and set(a["bits"]) & REDIRECT_BITS}
    ev = {"bridges": bridges}
    if flagged:
        lst = "; ".join(f"{b}: {', '.join(v)}" for b, v in flagged.items())
        return warn(f"ACS redirects P2P through the root complex on {lst} (hangs or half "
                    "bandwidth)", "clear ACS on every bridge: setpci -s <bdf> ECAP_ACS+6.w=0000 "
                    "(as root, each boot) or disable ACS in the BIOS", **ev)
    if unreadable and len(unreadable) == len(bridges):
        return skip("extended config space not readable (run doctor --deep as root)", **ev)
    return ok(f"no ACS redirect bits on {len(bridges) - len(unreadable)} bridge(s)"
              + (f"; {len(unreadable)} unreadable" if unreadable else ""), **ev)


@check("deep.aer", tier=2, title="PCIe AER error counters (GPUs and bridges)")
def aer(ctx: DoctorContext) -> Outcome:
    gpus = ctx.gpu_bus_ids()
    if not gpus:
        return skip("no NVIDIA GPU found in sysfs")
    devs = list(dict.fromkeys(gpus + [b for g in gpus for b in host.upstream_bridges(ctx.root, g)]))
    counters = {d: c for d in devs if (c := host.aer_counters(ctx.root, d)) is not None}
    if not counters:
        return skip("no AER counters in sysfs (kernel without AER or not exposed)")
    nonzero = {d: {k: v for k, v in c.items() if v} for d, c in counters.items()}
    nonzero = {d: c for d, c in nonzero.items() if c}
    if not nonzero:
        return ok(f"no AER errors on {len(counters)} device(s)", counters=counters)
    fatal = [d for d, c in nonzero.items() if c.get("fatal") or c.get("nonfatal")]
    msg = "; ".join(f"{d}: " + ", ".join(f"{k} {sum(v.values())}" for k, v in c.items())
                    for d, c in nonzero.items())
    fix = ("boot with pcie_aspm=off pcie_port_pm=off; reseat risers/cables; check "
           "`journalctl -k | grep -i aer`")
    if fatal:
        return fail(f"uncorrectable PCIe errors: {msg}", fix, counters=counters)
    return warn(f"correctable PCIe errors: {msg}", fix, counters=counters)


@check("deep.xid", tier=2, title="NVIDIA Xid lines in the kernel log", timeout=10.0)
def xid(ctx: DoctorContext) -> Outcome:
    log = kernlog.read_kernel_log(ctx.root, timeout=5.0)
    if log["text"] is None:
        return skip(f"kernel log not readable ({log['source']}; needs root or "
                    "kernel.dmesg_restrict=0)")
    x = kernlog.xids(log["text"])
    ev = {"source": log["source"], "xids": x[-50:]}
    if not x:
        return ok(f"no Xid lines ({log['source']})", **ev)
    codes = sorted({e["xid"] for e in x})
    severe = [c for c in codes if c in kernlog.SEVERE_XIDS]
    msg = f"{len(x)} Xid line(s), codes {codes}: " + ", ".join(
        f"{c} {kernlog.XID_MEANING.get(c, '')}".strip() for c in codes[:6])
    if severe:
        return fail(msg, "GPU fell off the bus / uncorrectable error: check power, PCIe "
                    "seating, cooling; reboot before launching", **ev)
    return warn(msg, "see NVIDIA's Xid catalog for each code", **ev)


@check("deep.p2p_smoke", tier=2, title="Functional P2P copy + NCCL all-reduce (subprocess)",
       timeout=180.0)
def p2p_smoke(ctx: DoctorContext) -> Outcome:
    if package_dir("torch", ctx.paths) is None:
        return skip("torch is not installed (the smoke test needs torch with CUDA)")
    limit = ctx.deep_timeout
    cmd = [sys.executable, "-m", "sm120kit.doctor.smoke", "--timeout", str(limit / 2)]
    env = dict(ctx.environ)
    # NCCL >= 2.31 checks every GPU pair itself at communicator init ('NCCL DIAG' report)
    env.setdefault("NCCL_RUN_DIAGNOSTICS", "1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        stop_pids([proc.pid], pgid=proc.pid)  # the one process-tree stop (SIGKILL, no grace)
        proc.communicate()
        return fail(f"P2P/NCCL smoke test hung for {limit:g} s: the 'P2P OK but hangs' case",
                    "check IOMMU (iommu=pt), ACS (doctor --deep as root), uvm_disable_hmm; "
                    "workaround NCCL_P2P_DISABLE=1 --disable-custom-all-reduce", timeout_s=limit)
    line = (out or "").strip().splitlines()[-1:] or [""]
    diag = NcclDiag()
    for ln in (out or "").splitlines() + (err or "").splitlines():
        diag.feed(ln)
    try:
        res = json.loads(line[0])
    except ValueError:
        return fail(f"smoke test crashed (exit {proc.returncode})", "run "
                    "`python -m sm120kit.doctor.smoke` to see the error",
                    stderr_tail=(err or "")[-1500:], rc=proc.returncode)
    res["nccl_diag"] = diag.to_dict() if diag.seen else None
    res["nccl_run_diagnostics"] = env["NCCL_RUN_DIAGNOSTICS"]
    if res["status"] == "skip":
        return skip(res.get("reason") or "skipped", **res)
    if diag.p2p_failed:
        return fail(diag.summary(), "NCCL_P2P_DISABLE=1 (+ --disable-custom-all-reduce) until "
                    "IOMMU/ACS are fixed for real P2P", **res)
    if res["status"] == "fail":
        return fail(res.get("reason") or "smoke test failed", "NCCL_P2P_DISABLE=1 as a "
                    "workaround; fix IOMMU/ACS for real P2P", **res)
    ar = res.get("all_reduce") or {}
    nv = str(res.get("nccl_version") or "?")
    if diag.seen:
        own = f"; {diag.summary()}"
    elif _version(nv) >= (2, 31):
        own = f"; NCCL {nv} printed no NCCL DIAG report"
    else:
        own = (f"; NCCL {nv} predates NCCL's own P2P diagnostics (2.31+: pip install -U "
               "nvidia-nccl-cu13 and point VLLM_NCCL_SO_PATH at it)")
    return ok(f"{res.get('gpus')} GPU(s): {len(res.get('pairs', []))} P2P copies OK; NCCL "
              f"all-reduce {ar.get('status')}{own}", **res)


def _version(v: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in v.split(".")[:3])
    except ValueError:
        return ()
