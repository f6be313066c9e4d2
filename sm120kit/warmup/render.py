"""Rich rendering of warmup plans, run results and live per-rank progress (no torch)."""

from __future__ import annotations

import time
from typing import Any

from sm120kit.models.dcp import WarmupPlan
from sm120kit.report import styled
from sm120kit.warmup.runner import RankState, RunResult


def render_plan(wp: WarmupPlan, con: Any) -> None:
    from rich.table import Table

    con.print(
        f"DCP {wp.dcp}, block size {wp.block_size}, interleave {wp.interleave}, "
        f"decode tokens {wp.decode_query_len}: fixed decode prompt [bold]{wp.fixed_prompt_len}[/] "
        f"tokens (unpatched: {wp.unpatched_prompt_len})"
    )
    t = Table(title="local KV per DCP rank (decode step: prompt + decode tokens)")
    for col in ("rank", "fixed tokens", "fixed blocks", "unpatched tokens", "unpatched blocks"):
        t.add_column(col, justify="right")
    t.add_column("zero local KV")
    for f, u in zip(wp.fixed.ranks, wp.unpatched.ranks, strict=True):
        flags = []
        if f.zero_local_kv:
            flags.append("[bold red]fixed[/]")
        if u.zero_local_kv:
            flags.append("[yellow]unpatched[/]")
        t.add_row(
            str(f.rank),
            str(f.decode_tokens),
            str(f.decode_blocks),
            str(u.decode_tokens),
            str(u.decode_blocks),
            ", ".join(flags) or "-",
        )
    con.print(t)
    for n in wp.notes:
        con.print(f"[yellow]note[/]: {n}")
    con.print(f"status: {styled(wp.status)}")


def _fmt(x: float) -> str:
    return f"{x:.2e}"


def render_result(res: RunResult, con: Any) -> None:
    cfg = res.config
    con.print(
        f"warmup run: DCP {cfg['dcp']}, backend {cfg['backend']} on {cfg['device']}, "
        f"{cfg['plan']} plan (prompt {cfg['prompt_len']}, KV {cfg['kv_len']} tokens/request, "
        f"{cfg['num_tokens']} decode tokens, top-k {cfg['topk']}, "
        f"{cfg['total_heads']} heads after gather)"
    )
    if res.stall is not None:
        _render_stall(res, con)
    if res.ranks:
        _render_ranks(res, con)
        _render_errors(res, con)
    for n in res.notes:
        con.print(f"[yellow]note[/]: {n}")
    status = {"ok": "ok", "fail": "fail", "stall": "fail", "error": "error"}.get(
        res.status, "error"
    )
    if res.exit_code == 1:
        status = "warn"
    con.print(f"{styled(status)}: {res.message}")
    if res.status in ("error", "stall") and res.log_tail:
        con.print("[dim]last rank output:[/]")
        con.print(res.log_tail[-1500:], markup=False, highlight=False)


def _render_stall(res: RunResult, con: Any) -> None:
    from rich.table import Table

    assert res.stall is not None
    t = Table(title=f"stall after {res.stall.silent_for_s:.1f}s without progress")
    for col in ("rank", "pid", "phase", "state", "silent s"):
        t.add_column(col)
    for row in res.stall.ranks:
        mark = " [bold red]<- suspect[/]" if row["rank"] in res.stall.suspects else ""
        t.add_row(
            str(row["rank"]),
            str(row["pid"]),
            str(row["phase"]),
            row["state"] + mark,
            f"{row['silent_for_s']:.1f}",
        )
    con.print(t)
    if res.bundle:
        con.print(f"bundle: {res.bundle}")
    elif res.bundle_error:
        con.print(f"[yellow]no bundle[/]: {res.bundle_error}")


def _render_ranks(res: RunResult, con: Any) -> None:
    from rich.table import Table

    t = Table(title="ranks")
    cols = ["rank", "pid", "local KV", "blocks", "local slots", "attend s", "merge s"]
    cols.append("max abs err")
    for col in cols:
        t.add_column(col, justify="right")
    for r in res.ranks:
        worst = max((v["max_abs"] for v in r["errors"].values()), default=0.0)
        t.add_row(
            str(r["rank"]),
            str(r["pid"]),
            str(sum(r["local_kv_tokens"])),
            str(sum(r["local_kv_blocks"])),
            str(sum(r["valid_counts"])),
            f"{r['timings'].get('attend', 0):.3f}",
            f"{r['timings'].get('merge', 0):.3f}",
            _fmt(worst),
        )
    con.print(t)


def _render_errors(res: RunResult, con: Any) -> None:
    from rich.table import Table

    e = Table(title=f"merged vs single-rank attention (threshold {res.threshold:g} abs)")
    for col in ("merge", "max abs", "max rel", "LSE max abs", "empty rows", "result"):
        e.add_column(col)
    for m, v in res.errors.items():
        ok = v["max_abs"] <= res.threshold and v["empty_rows_match"]
        e.add_row(
            m,
            _fmt(v["max_abs"]),
            _fmt(v["max_rel"]),
            _fmt(v["lse_max_abs"]),
            "match" if v["empty_rows_match"] else "[red]differ[/]",
            styled("ok" if ok else "fail"),
        )
    con.print(e)
    ratios = res.timings.get("merge_over_attend", {})
    if ratios:
        con.print(
            "merge / local attention time: "
            + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items())
            + f"; wall {res.timings.get('wall_s', 0):.2f}s"
        )


class LiveProgress:
    """Per-rank phase table on a TTY (rich Live on stderr); logs print above it."""

    def __init__(self, dcp: int) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = Console(stderr=True, highlight=False, emoji=False)
        self.t0 = time.monotonic()
        self.live = Live(console=self.console, refresh_per_second=8, transient=True)
        self.dcp = dcp

    def __enter__(self) -> LiveProgress:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.live.__exit__(*exc)

    def update(self, states: list[RankState]) -> None:
        from rich.table import Table

        now = time.monotonic()
        t = Table(title=f"warmup DCP {self.dcp}  {now - self.t0:.1f}s", box=None)
        for col in ("rank", "pid", "phase", "state", "quiet s"):
            t.add_column(col)
        for s in states:
            t.add_row(
                f"DCP{s.rank}",
                str(s.pid or "-"),
                s.phase or "-",
                s.describe(now),
                f"{s.quiet_s:.1f}",
            )
        self.live.update(t)

    def log(self, rank: int, pid: int | None, text: str) -> None:
        self.console.print(f"(Warmup_DCP{rank} pid={pid}) {text}", markup=False)
