"""``sm120kit diagnose``: parse options, call ``sm120kit.diagnose.engine``, render.

Human output: the verdict first, then versions/config, the phase timeline, the per-rank table,
and the findings with their evidence (file:line) and fixes. ``--markdown`` is the same as a
ready-to-paste ticket comment; ``--json`` the tool envelope around ``DiagnoseResult.to_dict()``.
"""

from __future__ import annotations

from typing import Any

import click

from sm120kit.cli import options
from sm120kit.diagnose.catalogue import explain
from sm120kit.diagnose.catalogue import load as load_catalogue
from sm120kit.diagnose.engine import DiagnoseResult, diagnose
from sm120kit.diagnose.explain_line import explain_line
from sm120kit.diagnose.rules.base import Finding
from sm120kit.errors import UserError
from sm120kit.report import clip_words, console, dump_json


@click.command("diagnose")
@click.argument("inputs", nargs=-1)
@options.json_option
@options.markdown_option
@click.option("--max-ranks", default=16, show_default=True, help="Rows of the per-rank table.")
@click.option("--config", "config_path", type=click.Path(), default=None,
              help="The model's config.json (or dir) for kv_capacity / dcp-not-engaged "
              "(default: the model dir or HF cache the log names).")
@click.option("--catalogue", "catalogues", multiple=True, type=click.Path(),
              help="A catalogue file or directory of *.toml entries added to the shipped ones "
              "(repeatable; also $SM120KIT_CATALOGUE).")
@click.option("--explain", "explain_id", default=None, metavar="ID",
              help="Print one catalogue entry (patterns, fix, sources) and exit.")
@click.option("--explain-line", "explain_line", default=None, metavar="TEXT",
              help="Look one log line up: the catalogue entries that name it and the message-index "
              "templates it matches (source file:line, releases, category); then exit.")
def diagnose_cmd(inputs: tuple[str, ...], as_json: bool, as_markdown: bool, max_ranks: int,
                 config_path: str | None, catalogues: tuple[str, ...],
                 explain_id: str | None, explain_line: str | None) -> int:
    """Name the phase, the diverging rank and the likely cause of a vLLM hang or crash.

    INPUTS: a vLLM/NCCL log (any prefix era; `-` reads stdin), a directory of per-rank logs, or
    a `sm120kit collect` bundle (.tar.gz or directory). Exit 0: nothing wrong found;
    1: findings; 2: unusable input.
    """
    try:
        if explain_id is not None:
            return _explain(explain_id, catalogues, as_json)
        if explain_line is not None:
            return _explain_line(explain_line, catalogues, as_json)
        if not inputs:
            raise UserError("nothing to diagnose", hint="sm120kit diagnose LOG|DIR|BUNDLE.tar.gz")
        res = diagnose(list(inputs), config=config_path, catalogue=list(catalogues))
    except UserError as exc:  # printed by the one handler; the JSON keeps diagnose's keys
        exc.details = {"inputs": list(inputs), "findings": []}
        raise
    if as_json:
        dump_json("diagnose", res.to_dict(), exit_code=res.exit_code)
    elif as_markdown:
        click.echo(render_markdown(res, max_ranks=max_ranks))
    else:
        render_human(res, max_ranks=max_ranks)
    return res.exit_code


def _explain(eid: str, catalogues: tuple[str, ...], as_json: bool) -> int:
    d = explain(load_catalogue(catalogues), eid)
    if as_json:
        dump_json("diagnose", {"status": "ok", "entry": d}, exit_code=0)
        return 0
    for k, v in d.items():
        if isinstance(v, list):
            click.echo(f"{k}:")
            for x in v:
                click.echo(f"  - {x}")
        elif v not in (None, ""):
            click.echo(f"{k}: {v}")
    return 0


def _explain_line(text: str, catalogues: tuple[str, ...], as_json: bool) -> int:
    d = explain_line(text, load_catalogue(catalogues))
    if as_json:
        dump_json("diagnose", d, exit_code=0)
        return 0
    if d["advice"]:
        named = f" (catalogue entry {d['advice_entry']})" if d["advice_entry"] else ""
        click.echo("advice, help or a finished step: never read as evidence of a fault" + named)
    for e in d["entries"]:
        click.echo(f"[{e['category']}] catalogue entry {e['id']} ({e['role']}, "
                   f"confidence {e['confidence']:.2f}): {e['summary']}")
        for w in e["when"]:
            click.echo(f"  needs {w}")
        click.echo(f"  {e['file']}; source {e['sources'][0] if e['sources'] else 'none'}")
    if not d["entries"] and not d["advice"]:
        click.echo("no catalogue entry names this line")
    if not d["matches"]:
        click.echo(f"no indexed message matches ({d['index']['templates']} templates)")
    for m in d["matches"]:
        click.echo(f"[{m['category']}] {m['template']}")
        click.echo(f"  {m['source']}")
    return 0


def _kv(d: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items() if v not in (None, "")) or "none found"


def _where(r: dict[str, Any]) -> str:
    """``autotune→error``: the stage a process stopped in, then its terminal phase."""
    stage, cur = r.get("stage"), r.get("phase")
    if stage and cur and cur != stage:
        return f"{stage}→{cur}"
    return str(cur or stage or "")


def _rank_rows(res: DiagnoseResult, max_ranks: int) -> list[list[str]]:
    rows = []
    for r in res.ranks[:max_ranks]:
        last = r.get("last_line") or {}
        err = r.get("exception") or ((r.get("first_error") or {}).get("text") or "")
        stalls = ", ".join(f"{k}×{v}" for k, v in (r.get("stalls") or {}).items())
        rows.append([
            "" if r.get("rank") is None else str(r["rank"]),
            str(r.get("process") or r.get("role") or ""),
            "" if r.get("pid") is None else str(r["pid"]),
            _where(r),
            f"{last.get('source')}:{last.get('line')}" if last else "",
            str(r.get("last_time") or ""),
            (err[:70] + ("…" if len(err) > 70 else "")) if err else stalls,
        ])
    return rows


def render_human(res: DiagnoseResult, max_ranks: int = 16) -> None:
    # rich only for the human form: --json and --markdown never import it (~30 ms)
    from rich.markup import escape
    from rich.table import Table

    con = console()
    style = "bold red" if res.findings else "green"
    con.print(f"[{style}]{escape(res.verdict)}[/{style}]")
    if res.findings:  # the verdict's own evidence, quoted whole, then its fix
        _print_finding_body(con, res.findings[0])
    con.print(f"engine:   {escape(res.engine)}")
    con.print(f"versions: {escape(_kv(res.versions))}")
    con.print(f"config:   {escape(_kv(res.config))}")
    if res.kv_capacity:
        keys = ("tokens", "available_gib", "tokens_per_gib", "effective_dcp", "requested_dcp",
                "max_concurrency", "engaged")
        con.print(f"kv:       {escape(_kv({x: res.kv_capacity.get(x) for x in keys}))}")
    if res.nccl_diag:
        con.print(f"nccl diag: {escape(str(res.nccl_diag.get('summary')))}")
    if res.phases:
        t = Table(title="phase timeline (first appearance)", show_lines=False)
        for c in ("phase", "first seen", "where"):
            t.add_column(c)
        for ph in res.phases:
            ev = ph.get("evidence") or {}
            t.add_row(ph["phase"], ph.get("first_seen") or "",
                      escape(f"{ev.get('source')}:{ev.get('line')}" if ev else ""))
        con.print(t)
    if res.ranks:
        # plain aligned columns: rich tables collapse narrow no-wrap columns on 80-column pipes
        rows = [[x for i, x in enumerate(row) if i != 5] for row in _rank_rows(res, max_ranks)]
        heads = ["rank", "process", "pid", "phase", "last line", "first error / stalls"]
        widths = [min(28, max(len(h), *(len(r[i]) for r in rows))) for i, h in enumerate(heads[:-1])]
        left = max(8, int(con.width) - sum(widths) - 2 * len(widths))
        con.print(f"[bold]processes ({len(res.ranks)}): where each stopped[/bold]")
        for k, row in enumerate([heads, *rows]):
            cells = [c[:w].ljust(w) for c, w in zip(row[:-1], widths, strict=True)]
            last = row[-1] if len(row[-1]) <= left else _cut_words(row[-1], left - 1) + "…"
            line = "  ".join(cells + [last]).rstrip()
            con.print(f"[dim]{escape(line)}[/dim]" if k == 0 else escape(line), no_wrap=True,
                      crop=True)
    for line in node_lines(res):
        con.print(escape(line), no_wrap=True, crop=True)
    if not res.findings:
        con.print("[green]no findings[/green]")
    elif len(res.findings) > 1:
        con.print("\n[bold]other findings[/bold] (the first is the verdict above)")
    for i, f in enumerate(res.findings[1:], 2):
        con.print(f"\n[bold]{i}. {escape(f'[{f.category}]')} {escape(f.summary)}[/bold]  "
                  f"(rule {f.rule}, confidence {f.confidence:.2f})")
        _print_finding_body(con, f)
    for n in res.notes[:10]:
        con.print(f"[yellow]note:[/yellow] {escape(n)}")


def _cut_words(text: str, width: int) -> str:
    """``text`` to at most ``width`` characters, cut between words where one ends in its last half."""
    cut = text.rfind(" ", width // 2, width + 1)
    return text[:cut] if cut > 0 else text[:width]


def _print_finding_body(con: Any, f: Finding) -> None:
    """A finding's evidence lines (whole, cut only between words) and its fix."""
    from rich.markup import escape

    for e in f.evidence[:6]:
        con.print(f"   [dim]{escape(e.ref)}[/dim]  {escape(clip_words(e.text))}")
    if f.fix:
        con.print(f"   [cyan]fix:[/cyan] {escape(f.fix)}" + (f" ({f.link})" if f.link else ""))


def node_lines(res: DiagnoseResult) -> list[str]:
    """Multi-node bundles: one line per node, then one per rank on it (where it stopped)."""
    out: list[str] = []
    if res.nodes:
        out.append(f"nodes ({len(res.nodes)}): ranks across nodes")
    for n in res.nodes:
        err = f" — {n['error']}" if n.get("error") else ""
        out.append(f"  node {n['node']}{' (head)' if n.get('is_head') else ''}: "
                   f"{n.get('status')}{err}")
        for r in n["ranks"]:
            out.append(f"    rank {'' if r.get('rank') is None else r['rank']:<3} "
                       f"{r.get('label') or ''}  pid {r.get('pid')}  {r.get('state') or ''}  "
                       f"{r.get('where') or ''}")
    return out


def _md_evidence(f: Finding) -> list[str]:
    """A finding's evidence lines in a code block (whole lines, cut only between words)."""
    if not f.evidence:
        return []
    return ["```", *(f"{e.ref}: {clip_words(e.text)}".replace("```", "'''")
                     for e in f.evidence[:6]), "```"]


def render_markdown(res: DiagnoseResult, max_ranks: int = 16) -> str:
    def cell(s: Any) -> str:
        return str(s).replace("|", "\\|").replace("\n", " ")

    out = [f"**sm120kit diagnose:** {cell(res.verdict)}", ""]
    if res.findings:  # the verdict's evidence and fix right under it
        top = res.findings[0]
        out += _md_evidence(top)
        if top.fix:
            out += [f"Fix: {cell(top.fix)}" + (f" ({top.link})" if top.link else ""), ""]
    out.append(f"- engine: {cell(res.engine)}")
    out.append(f"- versions: {cell(_kv(res.versions))}")
    out.append(f"- config: {cell(_kv(res.config))}")
    out.append(f"- input: {cell(', '.join(res.inputs))} ({res.kind})")
    if res.phases:
        out += ["", "| phase | first seen | where |", "|---|---|---|"]
        for ph in res.phases:
            ev = ph.get("evidence") or {}
            out.append(f"| {ph['phase']} | {cell(ph.get('first_seen') or '')} | "
                       f"`{cell(ev.get('source'))}:{ev.get('line')}` |")
    if res.ranks:
        out += ["", "| rank | process | pid | stopped in | last line | time | first error / stalls |",
                "|---|---|---|---|---|---|---|"]
        for row in _rank_rows(res, max_ranks):
            out.append("| " + " | ".join(cell(x) for x in row) + " |")
    if res.nodes:
        out += ["", "| node | status | rank | process | pid | state | stopped at |",
                "|---|---|---|---|---|---|---|"]
        for n in res.nodes:
            for r in n["ranks"] or [{}]:
                out.append("| " + " | ".join(cell(x) for x in (
                    n["node"], n.get("status") or "", r.get("rank", ""), r.get("label", ""),
                    r.get("pid", ""), r.get("state") or "", r.get("where") or "")) + " |")
    if len(res.findings) > 1:
        out += ["", "### Other findings"]
    elif not res.findings:
        out += ["", "No findings."]
    for i, f in enumerate(res.findings[1:], 2):
        out.append(f"{i}. **{f.category}** ({f.rule}, confidence {f.confidence:.2f}): "
                   f"{cell(f.summary)}")
        out += ["   " + x for x in _md_evidence(f)]
        if f.fix:
            out.append(f"   Fix: {cell(f.fix)}" + (f" ({f.link})" if f.link else ""))
    if res.notes:
        out += ["", "Notes: " + "; ".join(cell(n) for n in res.notes[:10])]
    return "\n".join(out)
