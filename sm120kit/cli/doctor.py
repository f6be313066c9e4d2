"""``sm120kit doctor``: thin CLI over ``sm120kit.doctor.run_doctor``."""

from __future__ import annotations

import sys

import click

from sm120kit.cli import options
from sm120kit.doctor import run_doctor
from sm120kit.doctor.render import render_markdown, render_table
from sm120kit.report import console, dump_json


@click.command("doctor", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--tier", type=click.IntRange(0, 2), default=1, show_default=True,
              help="Run tiers 0..N: 0 stdlib/source only, 1 NVML, 2 deep (root, slow).")
@click.option("--deep", is_flag=True, help="Same as --tier 2: ACS, AER, Xid, P2P+NCCL smoke test.")
@click.option("--layout", is_flag=True, help="Run the fp8_ds_mla layout self-test (needs torch).")
@click.option("--only", "only", multiple=True, metavar="ID",
              help="Run only this check id, id prefix or area (repeatable).")
@click.option("--config", "config_path", type=click.Path(dir_okay=True), default=None,
              help="A model config.json (or its directory) or a vllm serve options file.")
@options.dcp_option
@click.option("--tp", "tp", type=int, default=None,
              help="Planned TP size with --config (default: argv, else = --dcp).")
@click.option("--max-model-len", "max_model_len", type=int, default=None,
              help="Planned --max-model-len for the capacity planner (overrides argv).")
@click.option("--gpu-mem-gib", "gpu_mem_gib", type=float, default=None,
              help="Memory per GPU in GiB for the capacity planner (default: NVML).")
@click.option("--log", "log_path", type=click.Path(dir_okay=False), default=None,
              help="A vLLM server log: report kv_capacity and whether DCP engaged.")
@options.json_option
@options.markdown_option
@click.option("--root", default="/", hidden=True, help="Root of procfs/sysfs (tests).")
@click.argument("launch", nargs=-1, type=click.UNPROCESSED)
def doctor_cmd(tier: int, deep: bool, layout: bool, only: tuple[str, ...],
               config_path: str | None, dcp: int | None, tp: int | None, max_model_len: int | None,
               gpu_mem_gib: float | None, log_path: str | None, as_json: bool, as_markdown: bool,
               root: str, launch: tuple[str, ...]) -> int:
    """Judge FlashInfer, SM120 GPUs, the planned launch and the host before a DCP start.

    Pass the launch after `--`, plan from flags alone, or check a running server's log
    (kv_capacity):

    \b
    sm120kit doctor -- vllm serve MODEL -tp 8 -dcp 8 ...
    sm120kit doctor --tp 8 --dcp 4 --config config.json
    sm120kit doctor --log serve.log --json

    Exit code: 0 all ok, 1 warnings, 2 failures.
    """
    if as_json and as_markdown:
        raise click.UsageError("--json and --markdown are exclusive")
    top = 2 if deep else tier
    report = run_doctor(tiers=tuple(range(top + 1)), launch_argv=list(launch) or None,
                        config_path=config_path, dcp_planned=dcp, tp_planned=tp,
                        max_model_len=max_model_len, gpu_mem_gib=gpu_mem_gib, log_path=log_path,
                        layout=layout,
                        only=list(only) or None, root=root)
    if as_json:
        dump_json("doctor", report.to_dict(), exit_code=report.exit_code)
    elif as_markdown:
        sys.stdout.write(render_markdown(report))
    else:
        render_table(report, console())
    return report.exit_code
