"""Render a DoctorReport: rich table (grouped by area, worst first), Markdown, JSON."""

from __future__ import annotations

from typing import Any

from sm120kit import __version__
from sm120kit.doctor.model import DoctorReport
from sm120kit.report import cell, styled

ICON = {"ok": "ok", "warn": "WARN", "fail": "FAIL", "skip": "skip", "error": "ERROR"}


def summary_line(report: DoctorReport) -> str:
    c = report.counts
    parts = [f"{c[s]} {s}" for s in ("fail", "error", "warn", "ok", "skip") if c.get(s)]
    return f"doctor: {', '.join(parts)} in {report.duration_s:.2f} s (exit {report.exit_code})"


def render_table(report: DoctorReport, console: Any) -> None:
    from rich.table import Table

    table = Table(show_header=True, header_style="bold", expand=False, show_lines=False)
    table.add_column("area")
    table.add_column("check")
    table.add_column("status")
    table.add_column("summary / fix", overflow="fold")
    last_area = None
    for c in report.sorted_checks():
        text = cell(c.summary)
        if c.fix and c.status in ("fail", "warn", "error"):
            text += f"\n[bold]fix:[/bold] {cell(c.fix)}"
        area = c.area if c.area != last_area else ""
        if last_area is not None and c.area != last_area:
            table.add_section()
        last_area = c.area
        table.add_row(area, c.id.split(".", 1)[1], styled(c.status), text)
    console.print(table)
    console.print(summary_line(report))


def render_markdown(report: DoctorReport) -> str:
    lines = [f"## sm120kit doctor ({__version__})", "", summary_line(report), "",
             "| area | check | status | summary | fix |", "|---|---|---|---|---|"]

    def cell(s: str | None) -> str:
        return (s or "").replace("|", "\\|").replace("\n", " ")

    for c in report.sorted_checks():
        lines.append(f"| {c.area} | `{c.id}` | **{ICON[c.status]}** | {cell(c.summary)} | "
                     f"{cell(c.fix)} |")
    return "\n".join(lines) + "\n"
