"""``sm120kit warmup plan|run``: DCP-valid warmup shapes and the multi-rank decode warmup."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from sm120kit.cli import options
from sm120kit.cli.compose import bundle_hooks
from sm120kit.errors import UserError
from sm120kit.models.dcp import plan_for
from sm120kit.models.serve_args import ServeArgs, parse_human_int, parse_serve_args
from sm120kit.report import console, dump_json
from sm120kit.warmup import runner
from sm120kit.warmup.config import RunConfig, parse_inject_stall
from sm120kit.warmup.render import LiveProgress, render_plan, render_result


def _serve(args: tuple[str, ...], **ours: Any) -> Any:
    """The launch line after ``--`` with this command's options winning (ServeArgs.override)."""
    sa = parse_serve_args(list(args)) if args else ServeArgs()
    for key in ("max_model_len", "max_num_batched_tokens"):
        if ours.get(key) is not None:
            ours[key] = parse_human_int(ours[key], "--" + key.replace("_", "-"))
    return sa.override(**ours)


@click.group("warmup")
def warmup_group() -> None:
    """Plan and run the DCP sparse-MLA decode warmup (the patched vLLM warmup step)."""


@warmup_group.command("plan")
@options.dcp_option
@options.block_size_option
@options.interleave_option
@click.option("--max-num-seqs", type=int, default=None, metavar="N",
              help="vLLM's --max-num-seqs (below 2, vLLM skips the mixed prefill+decode "
              "warmup: the plan notes it).")
@click.option("--mtp", type=int, default=None, help="Speculative (MTP) tokens per step [0].")
@click.option("--max-model-len", default=None, help="Clamp: prompt + decode + 1 <= this.")
@click.option("--max-num-batched-tokens", default=None, help="Clamp: prompt <= this.")
@options.json_option
@click.argument("serve_args", nargs=-1, type=click.UNPROCESSED)
def plan_cmd(
    dcp: int | None,
    block_size: int | None,
    interleave: int | None,
    max_num_seqs: int | None,
    mtp: int | None,
    max_model_len: str | None,
    max_num_batched_tokens: str | None,
    as_json: bool,
    serve_args: tuple[str, ...],
) -> int:
    """Fixed (N*B, clamped) vs unpatched (2-token) warmup decode prompt, per-rank local KV.

    Values come from the options, else from `-- vllm serve ...` arguments after `--`.
    """
    sa = _serve(serve_args, dcp=dcp, block_size=block_size, interleave=interleave,
                max_num_seqs=max_num_seqs, mtp=mtp, max_model_len=max_model_len,
                max_num_batched_tokens=max_num_batched_tokens)
    if "decode_context_parallel_size" not in sa.given:
        raise UserError("no DCP size", hint="give --dcp N or the launch line: -- vllm serve ...")
    try:
        wp = plan_for(sa)
    except ValueError as exc:
        raise UserError(str(exc), hint="vLLM rejects this configuration too") from None
    code = 1 if wp.status == "warn" else 0
    if as_json:
        dump_json("warmup plan", wp.to_dict(), exit_code=code)
    else:
        render_plan(wp, console())
    return code


def _under_torchrun() -> bool:
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"))


@warmup_group.command("run")
@options.dcp_option
@click.option("--backend", type=click.Choice(["reference", "flashinfer"]), default="reference",
              show_default=True,
              help="Partial attention: sm120kit's torch reference, or FlashInfer's SM120 sparse "
              "MLA kernel (needs flashinfer and an SM120 GPU).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="Where the ranks compute: cpu (any machine) or cuda (one GPU per rank with "
              "NCCL, or shared with --dist-backend gloo).")
@click.option(
    "--dist-backend",
    type=click.Choice(["auto", "nccl", "gloo"]),
    default="auto",
    show_default=True,
    help="Collectives: auto = NCCL on cuda (one GPU per rank), gloo on cpu; gloo with --device "
    "cuda lets several ranks share a GPU (host-staged collectives).",
)
@click.option("--plan", "plan_name", type=click.Choice(["fixed", "unpatched"]), default="fixed",
              show_default=True,
              help="Warmup prompt: fixed = the patched series' N*B tokens (every rank holds KV), "
              "unpatched = vLLM's 2-token prompt (ranks without local KV).")
@click.option("--heads-per-rank", type=int, default=8, show_default=True,
              help="Query heads each rank attends with (the model's heads / TP).")
@click.option("--topk", type=int, default=2048, show_default=True,
              help="Sparse top-k: KV tokens each query attends to (GLM-5, DeepSeek-V3.2: 2048).")
@click.option("--kv-lora-rank", type=int, default=512, show_default=True,
              help="MLA latent KV width (the model config's kv_lora_rank).")
@click.option("--rope-dim", type=int, default=64, show_default=True,
              help="Rotary part of each head (the model config's qk_rope_head_dim).")
@options.interleave_option
@options.block_size_option
@click.option("--batch", type=int, default=1, show_default=True, help="Decode requests.")
@click.option("--mtp", type=int, default=None, help="MTP draft tokens per request [0].")
@click.option("--seq-len", type=int, default=None, help="KV tokens per request (default: plan).")
@click.option("--max-model-len", default=None, metavar="N",
              help="Clamp the plan: prompt + decode + 1 <= N (accepts 128k, 1M).")
@click.option("--max-num-batched-tokens", default=None, metavar="N",
              help="Clamp the plan: prompt <= N (accepts 16k).")
@click.option("--lse-base", type=click.Choice(["2", "e"]), default="2", show_default=True,
              help="Base of the log-sum-exp the ranks return and the merge reads (FlashInfer's "
              "sparse kernel: 2; e reproduces a wrong-base merge).")
@click.option("--merge", type=click.Choice(["ag_rs", "a2a", "both"]), default="both",
              show_default=True,
              help="How partial outputs are merged across ranks: all-gather + reduce-scatter, "
              "all-to-all, or both (each compared with single-rank attention).")
@click.option(
    "--scale-format",
    type=click.Choice(["arbitrary_fp32", "pow2_fp32"]),
    default="arbitrary_fp32",
    show_default=True,
    help="fp8_ds_mla scales (vLLM: arbitrary for GLM, pow2 for DeepSeek).",
)
@click.option("--threshold", type=float, default=None, help="Max abs error to pass.")
@options.stall_timeout_option
@click.option("--inject-stall", default=None, metavar="RANK[:PHASE]",
              help="Stop rank RANK before PHASE (default: the merge) to try stall detection "
              "and the stall bundle.")
@click.option("--bundle-dir", type=click.Path(file_okay=False), default=None,
              help="On a stall, write a collect bundle of the ranks here (default: none).")
@click.option("--bundle-deadline", type=float, default=30.0, show_default=True,
              help="Upper bound in seconds for writing that bundle.")
@click.option("--autotune-cache", type=click.Path(dir_okay=False), default=None,
              help="With --backend flashinfer: FlashInfer autotune results written to FILE "
              "(rank 0 only, as vLLM's DCP warmup does).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the synthetic KV, queries and top-k indices.")
@options.json_option
@click.argument("serve_args", nargs=-1, type=click.UNPROCESSED)
def run_cmd(
    dcp: int | None,
    backend: str,
    device: str,
    dist_backend: str,
    plan_name: str,
    heads_per_rank: int,
    topk: int,
    kv_lora_rank: int,
    rope_dim: int,
    interleave: int | None,
    block_size: int | None,
    batch: int,
    mtp: int | None,
    seq_len: int | None,
    max_model_len: str | None,
    max_num_batched_tokens: str | None,
    lse_base: str,
    merge: str,
    scale_format: str,
    threshold: float | None,
    stall_timeout: float,
    inject_stall: str | None,
    bundle_dir: str | None,
    bundle_deadline: float,
    autotune_cache: str | None,
    seed: int,
    as_json: bool,
    serve_args: tuple[str, ...],
) -> int:
    """Spawn N DCP ranks and run the sparse-MLA decode of the planned warmup step end to end.

    Synthetic fp8_ds_mla KV sharded by DCP ownership, global->local top-k conversion, partial
    attention with LSE, ag_rs/a2a merge with real collectives, compared with single-rank
    attention. Exit 0 pass, 1 pass with zero-local-KV ranks, 2 failure or stall.
    """
    torchrun = _under_torchrun()
    sa = _serve(serve_args, dcp=dcp, block_size=block_size, interleave=interleave, mtp=mtp,
                max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens)
    if "decode_context_parallel_size" not in sa.given and torchrun:
        sa = sa.override(dcp=int(os.environ["WORLD_SIZE"]))
    if "decode_context_parallel_size" not in sa.given:
        raise UserError("no DCP size", hint="give --dcp N or the launch line: -- vllm serve ...")
    cfg = RunConfig.from_serve(
        sa,
        backend=backend,
        device=device,
        dist_backend=dist_backend,
        plan=plan_name,
        heads_per_rank=heads_per_rank,
        topk=topk,
        kv_lora_rank=kv_lora_rank,
        rope_dim=rope_dim,
        batch=batch,
        seq_len=seq_len,
        lse_base=lse_base,
        merge=merge,
        scale_format=scale_format,
        stall_timeout=stall_timeout,
        inject_stall=parse_inject_stall(inject_stall),
        bundle_dir=bundle_dir,
        bundle_deadline=bundle_deadline,
        autotune_cache=autotune_cache,
        threshold=threshold,
        seed=seed,
    )
    res = _run(cfg, as_json)
    if res is None:  # a torchrun rank other than the reporting one
        return 0
    if as_json:
        dump_json("warmup run", res.to_dict(), exit_code=res.exit_code)
    else:
        render_result(res, console())
    return res.exit_code


def _run(cfg: RunConfig, as_json: bool) -> runner.RunResult | None:
    """Run under torchrun, with the live progress display (a terminal), or logging to stderr."""
    if _under_torchrun():
        return runner.run_under_torchrun(cfg)
    if not as_json and sys.stderr.isatty():
        with LiveProgress(cfg.dcp) as live:
            return runner.run_warmup(cfg, on_update=live.update, on_log=live.log,
                                     hooks=bundle_hooks())
    err = console(stderr=True)

    def log(rank: int, pid: int | None, text: str) -> None:
        err.print(f"(Warmup_DCP{rank} pid={pid}) {text}", markup=False)

    return runner.run_warmup(cfg, on_log=log, hooks=bundle_hooks())
