"""``sm120kit validate``: DCP numerics against a DCP-1 reference (thin: parse, call, render).

Exit 0: every check within noise, the reference proven another server; 1: suspicious (drift,
near-tie flips, no reference, identity unproven); 2: refused to run (unusable input, an
unreachable or silent server, one server behind both URLs); 3: numerically wrong (a systematic
error against the reference).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sm120kit.cli import options
from sm120kit.cli.compose import bundle_hooks
from sm120kit.cli.output import progress
from sm120kit.errors import UserError
from sm120kit.report import console, dump_json, styled
from sm120kit.validate.launch import LaunchSettings, validate_launch
from sm120kit.validate.run import ValidateOptions, validate

if TYPE_CHECKING:
    from sm120kit.validate.model import Check, ValidateResult


def _ints(value: str | None, name: str) -> list[int] | None:
    if not value:
        return None
    try:
        out = [int(x.strip().lower().replace("k", "000")) for x in value.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"{name} takes comma-separated token counts, got {value!r}") from None
    return out or None


@click.command("validate", context_settings={"ignore_unknown_options": True})
@click.option("--url", help="The DCP server, e.g. http://127.0.0.1:8000.")
@click.option("--reference-url", help="A DCP-1 server of the same model, to compare against.")
@click.option("--model", help="Served model name (default: the first one listed).")
@click.option("--api-key", default=None, metavar="KEY",
              help="Bearer key of the servers (vLLM --api-key) [env: VLLM_API_KEY, "
                   "OPENAI_API_KEY]; launch mode uses the line's own --api-key.")
@click.option("--reference-api-key", default=None, metavar="KEY",
              help="Key of --reference-url when it differs from --api-key.")
@options.dcp_option
@options.interleave_option
@options.block_size_option
@click.option("--lengths", help="Needle probe lengths in tokens, e.g. 4k,32k (default: up to "
              "the server's max_model_len).")
@click.option("--prompt-lengths", help="Lengths of the compared prompts (default: 256,2k).")
@click.option("--max-tokens", default=32, show_default=True, help="Tokens generated per prompt.")
@click.option("--top-logprobs", default=5, show_default=True, help="Top-k logprobs per token.")
@click.option("--timeout", default=600.0, show_default=True,
              help="Seconds per generation request (/v1/models, /tokenize and /metrics must "
              "answer within 10 s).")
@click.option("--assume-distinct", is_flag=True,
              help="Let a pass stand when nothing proves the reference is another server "
              "(remote hosts without /metrics).")
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
              default=Path("."), show_default=True,
              help="Launch mode: where a bundle goes when a server crashes or hangs.")
@click.option("--ready-timeout", default=1800.0, show_default=True,
              help="Launch mode: seconds a server may take to become ready.")
@options.stall_timeout_option
@options.json_option
@options.markdown_option
@click.argument("launch", nargs=-1, type=click.UNPROCESSED)
def validate_cmd(url: str | None, reference_url: str | None, model: str | None,
                 api_key: str | None, reference_api_key: str | None, dcp: int | None,
                 interleave: int | None, block_size: int | None, lengths: str | None,
                 prompt_lengths: str | None, max_tokens: int, top_logprobs: int, timeout: float,
                 assume_distinct: bool, out_dir: Path, ready_timeout: float, stall_timeout: float,
                 as_json: bool, as_markdown: bool, launch: tuple[str, ...]) -> int:
    """Prove DCP computes what DCP 1 computes: greedy logprobs and needles on every rank.

    Against running servers: `sm120kit validate --url http://HOST:PORT --reference-url
    http://HOST:PORT2 --dcp 4 --interleave 64`. Or launch it: `sm120kit validate -- vllm serve
    MODEL --decode-context-parallel-size 4 ...` (under collect's supervisor; the reference is the
    same line relaunched with DCP 1 unless --reference-url is given). Exit 0 pass, 1 suspicious
    (or identity unproven), 2 refused to run, 3 numerically wrong.

    \b
    Minimum context per error kind (N ranks, interleave I, indexer top-k K):
      dropped rank                  N*I + needle + question (~300 at N 4, I 64)
      wrong interleave, sparse      more than K tokens
      wrong interleave, dense       (N+1)*I + needle + question + answer (~400)
      LSE base 2 merged as base e   more than I (two ranks); size depends on the
                                    ranks' LSE spread (docs/validate.md)
    """
    argv = [a for a in launch]
    if argv and argv[0] == "--":
        argv = argv[1:]
    if argv and url:
        raise UserError("give either --url or a launch line after --, not both")
    if argv and argv[0].startswith("-"):
        raise UserError(f"unknown option {argv[0]}", hint="a launch line goes after --")
    if not url and not argv:
        raise UserError("no server to validate",
                        hint="pass --url http://HOST:PORT, or a launch line: -- vllm serve ...")
    opts = ValidateOptions(
        url=url or "", reference_url=reference_url, model=model, dcp=dcp, interleave=interleave,
        block_size=block_size, lengths=_ints(lengths, "--lengths"),
        prompt_lengths=_ints(prompt_lengths, "--prompt-lengths"), max_tokens=max_tokens,
        top_logprobs=top_logprobs, timeout=timeout,
        api_key=api_key or os.environ.get("VLLM_API_KEY") or os.environ.get("OPENAI_API_KEY"),
        reference_api_key=reference_api_key, assume_distinct=assume_distinct)
    show = None if (as_json or as_markdown) else progress()
    if argv:
        settings = LaunchSettings(out_dir=out_dir, ready_timeout=ready_timeout,
                                  stall_timeout=stall_timeout, hooks=bundle_hooks(doctor=False))
        res = validate_launch(argv, opts, settings, progress=show)
    else:
        res = validate(opts, progress=show)
    render(res, as_json=as_json, markdown=as_markdown)
    return res.exit_code


def render(res: ValidateResult, *, as_json: bool, markdown: bool) -> None:
    if as_json:
        dump_json("validate", {"status": res.verdict.value, **res.to_dict()},
                  exit_code=res.exit_code)
    elif markdown:
        click.echo(render_markdown(res))
    else:
        render_human(res)


def _f(x: float | None, nd: int = 3) -> str:
    return "" if x is None else f"{x:.{nd}f}"


def _row(c: Check) -> list[str]:
    needle = ""
    if c.needle is not None:
        found = {True: "found", False: "MISSED", None: "?"}[c.needle_found]
        needle = f"rank {','.join(map(str, c.needle.ranks))} @{c.needle.start}: {found}"
    div = "" if c.first_divergence is None else (
        f"tok {c.first_divergence} (margin {_f(c.divergence_margin, 2)})")
    return [c.name, str(c.context_tokens), needle, str(c.compared_positions),
            _f(c.max_abs_diff), _f(c.mean_abs_diff), div, c.verdict.value]


HEADS = ["check", "tokens", "needle", "compared", "max|Δ|", "mean|Δ|", "first divergence",
         "verdict"]


def _kv_line(res: ValidateResult) -> str | None:
    k = res.kv_capacity
    if k is None:
        return None
    parts = []
    if k.gpu_kv_cache_tokens is not None:
        parts.append(f"GPU KV cache {k.gpu_kv_cache_tokens:,} tokens")
    if k.available_kv_gib is not None:
        parts.append(f"available {k.available_kv_gib:g} GiB")
    if k.max_concurrency is not None:
        parts.append(f"max concurrency {k.max_concurrency:g}x at {k.max_concurrency_len:,} tokens")
    if k.num_gpu_blocks is not None:
        parts.append(f"{k.num_gpu_blocks:,} blocks of {k.block_size} per rank")
    return f"KV capacity ({k.source}): " + ", ".join(parts) if parts else None


def _head_lines(res: ValidateResult) -> list[str]:
    lay = res.layout
    ref = res.reference
    lines = [
        f"server {res.server.url} ({res.server.model}, max_model_len {res.server.max_model_len})",
        f"reference {ref.url} ({ref.model})" if ref else "reference: none",
        *([f"identity: {res.identity['status']} ({res.identity['how']})"] if res.identity else []),
        f"DCP {lay.dcp}, interleave {lay.interleave}, block size {lay.block_size} ({lay.source}):"
        f" token t on rank (t // {lay.interleave}) % {lay.dcp}",
    ]
    kv = _kv_line(res)
    if kv:
        lines.append(kv)
    nf = res.noise_floor
    if nf is not None:
        lines.append(
            f"noise floor (reference, {nf.prompts} prompts alone vs batched): mean|Δ| "
            f"{_f(nf.mean_abs, 4) or '-'}, max|Δ| {_f(nf.max_abs, 4) or '-'} over {nf.compared} "
            f"tokens, {nf.flips} greedy flips" + ("; lines raised to 3x it" if nf.widened else ""))
    lines.append(f"thresholds (nats): {res.thresholds.describe()}")
    return lines


def render_human(res: ValidateResult) -> None:
    from rich.markup import escape
    from rich.table import Table

    con = console()
    style = {"pass": "green", "suspicious": "yellow", "fail": "bold red"}[res.verdict.value]
    con.print(f"[{style}]{escape(res.summary)}[/{style}]")
    for line in _head_lines(res):
        con.print(escape(line))
    t = Table(show_lines=False)
    for h in HEADS:
        t.add_column(h, justify="right" if h in ("tokens", "compared", "max|Δ|", "mean|Δ|")
                     else "left", overflow="fold")
    for c in res.checks:
        row = [escape(x) for x in _row(c)]
        v = {"pass": "ok", "suspicious": "warn", "fail": "fail"}[c.verdict.value]
        row[7] = styled(v).replace(v, c.verdict.value)
        t.add_row(*row)
    con.print(t)
    for c in res.checks:
        for r in c.reasons:
            con.print(f"[bold]{escape(c.name)}[/bold] ({c.verdict.value}): {escape(r)}")
    for n in res.notes:
        con.print(f"[yellow]note:[/yellow] {escape(n)}")


def render_markdown(res: ValidateResult) -> str:
    def cell(s: Any) -> str:
        return str(s).replace("|", "\\|").replace("\n", " ")

    out = [f"**sm120kit validate: {res.verdict.value}** — {cell(res.summary)}", ""]
    out += [f"- {cell(x)}" for x in _head_lines(res)]
    out += ["", "| " + " | ".join(cell(h) for h in HEADS) + " |", "|" + "---|" * len(HEADS)]
    out += ["| " + " | ".join(cell(x) for x in _row(c)) + " |" for c in res.checks]
    why = [f"- **{cell(c.name)}** ({c.verdict.value}): {cell(r)}" for c in res.checks
           for r in c.reasons]
    if why:
        out += [""] + why
    if res.notes:
        out += ["", "Notes: " + "; ".join(cell(n) for n in res.notes)]
    return "\n".join(out)
