"""``--layout``: the fp8_ds_mla row layout self-test (torch CPU, subprocess) and the SM120
kernel-read part (needs an SM120 GPU with FlashInfer's SM120 API; skipped with a reason
elsewhere)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from sm120kit.doctor.context import DoctorContext
from sm120kit.doctor.model import Outcome, fail, ok, skip
from sm120kit.doctor.registry import check
from sm120kit.facts.packages import package_dir


def _run_module(ctx: DoctorContext, module: str, timeout: float) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", module], capture_output=True, text=True,
                          timeout=timeout, env=dict(ctx.environ))
    line = (proc.stdout or "").strip().splitlines()[-1:] or [""]
    try:
        res: dict[str, Any] = json.loads(line[0])
        return res
    except ValueError:
        return {"status": "error", "reason": f"{module} exited {proc.returncode}: "
                f"{(proc.stderr or '').strip()[-400:]}"}


@check("layout.fp8_ds_mla", tier=0, title="fp8_ds_mla pack/unpack round trip (656 / 528 B)",
       timeout=120.0, kind="layout")
def fp8_ds_mla(ctx: DoctorContext) -> Outcome:
    if package_dir("torch", ctx.paths) is None:
        return skip("torch is not installed (the layout self-test needs torch, CPU is enough)")
    res = _run_module(ctx, "sm120kit.doctor.layout_selftest", 110.0)
    st = res.get("status")
    if st == "skip":
        return skip(res.get("reason") or "skipped", **res)
    if st == "ok":
        worst = max((c["max_abs_err"] for c in res["cases"]), default=0.0)
        return ok(f"{len(res['cases'])} layouts x scale formats round-trip within the e4m3 bound "
                  f"(max abs err {worst:.3g})", **res)
    if st == "fail":
        return fail(f"layout self-test failed: {res.get('reason')}", "report this with "
                    "`sm120kit doctor --layout --json`", **res)
    raise RuntimeError(res.get("reason") or "layout self-test broke")


@check("layout.sm120_kernel", tier=1, title="SM120 kernel reads the packed rows", timeout=900.0,
       kind="layout")
def sm120_kernel(ctx: DoctorContext) -> Outcome:
    snap = ctx.nvml()
    if not snap.available:
        return skip(f"needs an SM120 GPU; NVML unavailable ({snap.error})")
    non = [g for g in snap.gpus if g.compute_capability != (12, 0)]
    if not snap.gpus or non:
        names = ", ".join(f"GPU {g.index} {g.name} {g.sm}" for g in non) or "no GPU"
        return skip(f"needs an SM120 GPU (found {names})")
    fi = ctx.flashinfer()
    if not fi.installed or not fi.has_sm120_api:
        return skip("needs FlashInfer with the SM120 sparse decode API")
    # The FlashInfer SM120 decode over packed fp8_ds_mla pages, compared with the reference
    # attention on the dequantized rows (sm120kit.warmup's flashinfer backend, DCP 1). May
    # JIT-compile sparse_mla_sm120 first (minutes) when no compiled kernel exists.
    cmd = [sys.executable, "-m", "sm120kit", "warmup", "run", "--backend", "flashinfer",
           "--device", "cuda", "--dcp", "1", "--json"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=840,
                              env=dict(ctx.environ))
    except subprocess.TimeoutExpired:
        return fail("FlashInfer SM120 decode on packed rows did not finish within 840 s",
                    "run `sm120kit warmup run --backend flashinfer --device cuda` to watch it")
    tail = ((proc.stdout or "") + (proc.stderr or ""))[-1500:]
    if proc.returncode in (0, 1):
        return ok("FlashInfer SM120 decode reads the packed fp8_ds_mla rows (matches the "
                  "reference)", rc=proc.returncode, output_tail=tail)
    return fail(f"FlashInfer SM120 decode on packed rows failed (exit {proc.returncode})",
                "run `sm120kit warmup run --backend flashinfer --device cuda` for details",
                rc=proc.returncode, output_tail=tail)
