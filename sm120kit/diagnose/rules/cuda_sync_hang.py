"""A process waits for its GPU in a CUDA sync (``cudaDeviceSynchronize``, ``cuCtxSynchronize``,
``cudaStreamSynchronize``, ``cudaEventSynchronize``, a synchronous ``cudaMemcpy``) while that GPU
is busy: a kernel that never returns. The host thread is not the problem and no peer is missing:
the device is still running what it was given. Read from py-spy ``--native`` frames (or, weaker,
a Python ``synchronize``/``item``/``cpu`` in torch.cuda frames) and NVML utilization."""

from __future__ import annotations

from typing import Any

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext, StackView, field_phase
from sm120kit.evidence.logs.analyze import Evidence

WAITS = ("cuCtxSynchronize", "cudaDeviceSynchronize", "cudaStreamSynchronize", "cuStreamSynchronize",
         "cudaEventSynchronize", "cuEventSynchronize", "cudaMemcpy", "cuMemcpyDtoH")  # prefixes
BUSY = 80  # % NVML utilization
_NOT_PHASES = ("error", "shutdown")  # where a run ended, not a phase it was in


def _wait(s: StackView) -> str | None:
    """The native sample's CUDA waits, API first: ``cudaDeviceSynchronize → cuCtxSynchronize_v2``."""
    if cuda := [n for n in (f.split(" (", 1)[0] for f in s.native) if n.startswith(WAITS)]:
        return " → ".join(dict.fromkeys(reversed(cuda)))
    if s.sync in ("synchronize", "item", "cpu", "tolist") and any(
            "torch" in f or "cuda" in f for f in s.frames[:6]):
        return f"{s.sync} (Python, {s.top})"
    return None


def _busy(nvml: list[dict[str, Any]], pid: int) -> tuple[int, int] | None:
    """(index, utilization) of the busy GPU whose compute processes list it (or the only GPU)."""
    snap = nvml[-1] if nvml else {}
    gpus = [g for g in snap.get("gpus") or [] if isinstance(g, dict)]
    mine = [g for g in gpus if any(isinstance(p, dict) and p.get("pid") == pid
                                   for p in g.get("compute_processes") or [])]
    for g in mine or (gpus if len(gpus) == 1 else []):
        u = g.get("utilization_gpu")
        if isinstance(u, int | float) and u >= BUSY:
            return int(g.get("index", 0)), int(u)
    return None


def check(ctx: RuleContext) -> list[Finding]:
    b = ctx.bundle
    if b is None or not b.nvml:
        return []
    rows = {r.get("pid"): r for r in (b.stall or {}).get("ranks") or [] if isinstance(r, dict)}
    out: list[Finding] = []
    for s in b.stacks:
        wait, gpu = _wait(s), _busy(b.nvml, s.pid)
        if wait is None or gpu is None:
            continue
        ph = next((p for p in ((rows.get(s.pid) or {}).get("phase"), (b.timeline or {}).get(
            "current_phase"), ctx.facts.phases.stage) if p and p not in _NOT_PHASES), None)
        who = f"rank {s.rank}" if s.rank is not None else (s.label or f"pid {s.pid}")
        native = not wait.endswith(")")
        out.append(RULE.finding(
            0.75 if native else 0.6,
            f"{who} (pid {s.pid}) waits in {wait} while GPU {gpu[0]} runs at {gpu[1]}% "
            f"utilization{f' during {field_phase(ph) or ph}' if ph else ''}: a kernel that does not return",
            [Evidence(s.source, 0, f"{s.label or s.pid} waits in {wait}, called from {s.top}"),
             Evidence("nvml.json", 0, f"GPU {gpu[0]}: {gpu[1]}% utilization")],
            ranks=[s.rank] if s.rank is not None else [], phase=field_phase(ph),
            tier="stacks" if native else "gpu"))
    return out[:4]


RULE = Rule(
    id="cuda-sync-hang",
    category="kernel-hang",
    needs="py-spy --native stacks (a CUDA sync frame) and NVML utilization of that GPU",
    tier="stacks",
    check=check,
    role="cause",
    fix="Find the kernel: rerun with CUDA_LAUNCH_BLOCKING=1 (the hang moves to the launch that "
        "never returns) or under compute-sanitizer / nsys; try --enforce-eager to rule out a "
        "graph replay, and the previous release of the kernel library (FlashInfer, Triton).",
    link="https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__DEVICE.html",
)
