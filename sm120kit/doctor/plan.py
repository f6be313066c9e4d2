"""doctor's launch plan from its own flags (``--tp/--dcp/--max-model-len`` with or without a
launch line) and the KV capacity a vLLM log shows (``--log FILE``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sm120kit.doctor.launch import LaunchPlan, build_plan
from sm120kit.errors import UserError
from sm120kit.evidence.kv import capacity, scan_lines
from sm120kit.models.kv import KvCapacity


@dataclass(frozen=True)
class PlanFlags:
    tp: int | None = None
    dcp: int | None = None
    max_model_len: int | None = None
    gpu_mem_gib: float | None = None

    def any_plan_flag(self) -> bool:
        return any(v is not None for v in (self.tp, self.dcp, self.max_model_len))


def _check_sizes(flags: PlanFlags) -> None:
    for name, val in (("--dcp", flags.dcp), ("--tp", flags.tp),
                      ("--max-model-len", flags.max_model_len)):
        if val is not None and val < 1:
            raise UserError(f"{name} must be >= 1, got {val}",
                            hint=f"give {name} a positive size, or leave it out to plan without it")
    if flags.gpu_mem_gib is not None and flags.gpu_mem_gib <= 0:
        raise UserError(f"--gpu-mem-gib must be > 0, got {flags.gpu_mem_gib}")


def make_plan(launch_argv: Sequence[str] | None, config_path: str | None, flags: PlanFlags,
              env: Mapping[str, str]) -> LaunchPlan | None:
    """The launch plan: argv and/or --config, then doctor's flags on top; flags alone make one."""
    _check_sizes(flags)
    plan = build_plan(launch_argv, config_path, env)
    if plan is None:
        if not flags.any_plan_flag():
            if flags.gpu_mem_gib is not None:
                raise UserError("--gpu-mem-gib is only used by the capacity planner, which needs "
                                "a launch plan",
                                hint="add `-- vllm serve MODEL ...`, --config config.json or "
                                "--tp/--dcp/--max-model-len")
            return None
        plan = LaunchPlan()
        plan.serve.notes.append("no launch line: plan built from doctor's flags")
    plan.serve = plan.serve.override(dcp=flags.dcp, tp=flags.tp,
                                     max_model_len=flags.max_model_len)
    return plan


def read_log(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.readlines()
    except OSError as exc:
        raise UserError(f"cannot read log {path}: {exc.strerror or exc}",
                        hint="pass a vLLM server log (stdout/stderr of `vllm serve`)") from None


def log_capacity(path: str, plan: LaunchPlan | None,
                 env: Mapping[str, str]) -> KvCapacity | None:
    """``kv_capacity`` of the launch a vLLM log records (None when it has no KV lines); doctor's
    own flags / launch line win over what the log says."""
    kv, scan = scan_lines(read_log(path))
    sa = plan.serve if plan is not None else None
    given = sa.given if sa is not None else set()
    return capacity(
        kv, scan.config, env, cfg=plan.hf_config if plan is not None else None,
        requested_dcp=sa.dcp if sa is not None and "decode_context_parallel_size" in given
        else None,
        kv_dtype=sa.kv_cache_dtype if sa is not None and "kv_cache_dtype" in given else None,
        block=sa.block_size if sa is not None else None)


def model_dir_of(source: str | None) -> Path | None:
    if not source:
        return None
    p = Path(source)
    return p.parent if p.name == "config.json" else None
