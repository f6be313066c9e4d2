"""``sm120kit report BUNDLE``: a collect bundle as one self-contained HTML page (thin: the
composition is ``cli.compose.write_report``, the page ``services.htmlreport``)."""

from __future__ import annotations

from pathlib import Path

import click

from sm120kit.cli import options
from sm120kit.errors import ExitCode
from sm120kit.report import dump_json


@click.command("report")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("-o", "--out", "out", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="The HTML file to write (default: beside the bundle, "
              "<bundle name>.html).")
@click.option("--no-diagnose", is_flag=True,
              help="Leave the findings out (the page shows only what the bundle recorded).")
@options.json_option
def report_cmd(bundle: Path, out: Path | None, no_diagnose: bool, as_json: bool) -> int:
    """Draw a collect bundle as one HTML page: phase timeline per rank, progress channels over
    time, where each rank stopped, findings with their evidence.

    BUNDLE: a `sm120kit collect` bundle (.tar.gz or its directory). The page is self-contained
    (inline SVG, no script, no network): open it in any browser or attach it to a ticket.

    \b
    sm120kit report sm120kit-bundle-HOST-TIME.tar.gz
    sm120kit report sm120kit-bundle-HOST-TIME.tar.gz -o report.html
    """
    from sm120kit.cli.compose import write_report

    dest, diagnosis = write_report(bundle, out, judge=not no_diagnose)
    n = len(diagnosis.get("findings") or [])
    if as_json:
        dump_json("report", {"status": "ok", "bundle": str(bundle), "report": str(dest),
                             "findings": n}, exit_code=ExitCode.OK)
    else:
        click.echo(f"report: {dest}")
    return ExitCode.OK
