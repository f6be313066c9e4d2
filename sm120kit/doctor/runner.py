"""Run the selected checks, each isolated (exception → ``error``) and bounded by a timeout."""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Iterable, Sequence
from typing import Any

from sm120kit.doctor.context import DoctorContext
from sm120kit.doctor.model import CheckResult, DoctorReport, Outcome
from sm120kit.doctor.plan import PlanFlags, log_capacity, make_plan
from sm120kit.doctor.registry import Check, all_checks
from sm120kit.errors import UserError
from sm120kit.report import STATUSES


def run_one(chk: Check, ctx: DoctorContext, timeout: float | None = None) -> CheckResult:
    limit = chk.timeout if timeout is None else timeout
    if chk.kind == "launch" and ctx.launch is None:
        return CheckResult(chk.id, chk.area, chk.tier, "skip", "needs a launch config (pass "
                           "`-- vllm serve MODEL ...` or --config FILE)")
    if chk.kind == "log" and not ctx.has("log_kv_capacity"):
        return CheckResult(chk.id, chk.area, chk.tier, "skip", "needs a vLLM log (--log FILE)")
    box: list[Outcome | BaseException] = []

    def work() -> None:
        try:
            box.append(chk.fn(ctx))
        except BaseException as exc:  # isolate everything, even SystemExit from a library
            box.append(exc)

    t0 = time.perf_counter()
    th = threading.Thread(target=work, name=f"doctor-{chk.id}", daemon=True)
    th.start()
    th.join(limit)
    dt = time.perf_counter() - t0
    if not box:
        return CheckResult(chk.id, chk.area, chk.tier, "error",
                           f"check did not finish within {limit:g} s", {"timeout_s": limit},
                           None, dt)
    res = box[0]
    if isinstance(res, BaseException):
        tb = traceback.format_exception(type(res), res, res.__traceback__)
        return CheckResult(chk.id, chk.area, chk.tier, "error",
                           f"check raised {type(res).__name__}: {res}"[:300],
                           {"traceback_tail": "".join(tb[-3:])[-1500:]}, None, dt)
    if not isinstance(res, Outcome) or res.status not in STATUSES:
        return CheckResult(chk.id, chk.area, chk.tier, "error",
                           f"check returned an invalid result: {res!r}"[:300], {}, None, dt)
    return CheckResult(chk.id, chk.area, chk.tier, res.status, res.summary, res.evidence,
                       res.fix, dt)


def select(checks: Iterable[Check], *, tiers: Sequence[int], launch: bool, layout: bool,
           only: Sequence[str] | None, log: bool = False) -> list[Check]:
    pool = list(checks)
    if only:
        chosen: list[Check] = []
        for want in only:
            hit = [c for c in pool if c.id == want or c.id.startswith(want.rstrip(".") + ".")
                   or c.area == want]
            if not hit:
                areas = ", ".join(sorted({c.area for c in pool}))
                raise UserError(f"unknown check {want!r}",
                                hint=f"--only takes a check id, an id prefix or an area ({areas});"
                                " `sm120kit doctor --json` lists every check id")
            chosen += [c for c in hit if c not in chosen]
        # --only runs what was asked, whatever the tier (but a layout/launch check still needs
        # its input: it reports skip itself)
        return chosen
    out = []
    for c in pool:
        if c.tier not in tiers:
            continue
        if c.kind == "launch" and not launch:
            continue
        if c.kind == "layout" and not layout:
            continue
        if c.kind == "log" and not log:
            continue
        out.append(c)
    return out


def run_doctor(
    *,
    tiers: Sequence[int] = (0, 1),
    launch_argv: list[str] | None = None,
    config_path: str | None = None,
    dcp_planned: int | None = None,
    tp_planned: int | None = None,
    max_model_len: int | None = None,
    gpu_mem_gib: float | None = None,
    log_path: str | None = None,
    layout: bool = False,
    only: Sequence[str] | None = None,
    root: str = "/",
    environ: dict[str, str] | None = None,
    paths: Sequence[str] | None = None,
    series_root: Any = None,
    nvml_seam: Any = None,
    nvml_timeout: float = 5.0,
    timeout: float | None = None,
) -> DoctorReport:
    """Run doctor's checks and return the report (never raises for a broken check).

    ``--tp/--dcp/--max-model-len`` without a launch line build a launch plan of their own, so
    the launch checks (and the capacity planner, with a config) run on the flags alone.
    Raises ``UserError`` only for bad input: unknown ``--only`` id, unreadable ``--config`` or
    ``--log``, malformed launch arguments, sizes below 1.
    """
    t0 = time.perf_counter()
    env = dict(os.environ) if environ is None else environ
    flags = PlanFlags(tp=tp_planned, dcp=dcp_planned, max_model_len=max_model_len,
                      gpu_mem_gib=gpu_mem_gib)
    plan = make_plan(launch_argv, config_path, flags, env)
    ctx = DoctorContext(root=root, environ=env, paths=paths, launch=plan, dcp_planned=dcp_planned,
                  series_root=series_root, nvml_seam=nvml_seam, nvml_timeout=nvml_timeout)
    if gpu_mem_gib is not None:
        ctx.preset("gpu_mem_gib", gpu_mem_gib)
    kv_cap = log_capacity(log_path, plan, env) if log_path else None
    if log_path:
        ctx.preset("log_kv_capacity", kv_cap)
    kinds = {"base"} | ({"launch"} if plan is not None else set()) | (
        {"layout"} if layout else set()) | ({"log"} if log_path else set())
    pool = all_checks() if only else all_checks(tiers, kinds)
    chosen = select(pool, tiers=tiers, launch=plan is not None, layout=layout, only=only,
                    log=log_path is not None)
    if any(c.tier >= 1 for c in chosen):
        # one NVML read up front: tier-0 checks that can use it (kernel arch dir, visible GPUs'
        # bus ids) then see the real GPUs; it is bounded by nvml_timeout and never raises
        ctx.nvml()
    results = [run_one(c, ctx, timeout) for c in chosen]
    opts = {"launch_argv": launch_argv, "config_path": config_path, "dcp_planned": ctx.dcp,
            "tp_planned": plan.serve.tp if plan is not None else tp_planned,
            "max_model_len": max_model_len, "gpu_mem_gib": gpu_mem_gib, "log": log_path,
            "layout": layout, "only": list(only) if only else None, "root": root}
    return DoctorReport(checks=results, tiers=sorted(set(tiers)), options=opts,
                        duration_s=time.perf_counter() - t0,
                        kv_capacity=kv_cap.to_dict() if kv_cap is not None else None)
