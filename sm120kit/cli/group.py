"""The lazy command group (Click's documented lazy-group pattern).

``sm120kit --help`` lists every command from :data:`COMMANDS` without importing any of them: each
row carries the module, the attribute and the one-line help shown in the listing. A command's
module is imported only when that command runs (or its own ``--help`` is asked for).
The table is the one place a command's listing line lives (``load`` gives it to the command).
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

import click


class Entry(NamedTuple):
    target: str  # "module:attribute" of a click.Command
    help: str  # the line shown by ``sm120kit --help``


COMMANDS: dict[str, Entry] = {
    "apply": Entry("sm120kit.cli.patch:apply_cmd",
                   "Apply the DCP series atomically: on a branch of a git checkout, or installed."),
    "status": Entry("sm120kit.cli.patch:status_cmd",
                    "Per patch: applied, not-applied, upstream or conflict."),
    "verify": Entry("sm120kit.cli.patch:verify_cmd",
                    "Touched files compile, no new pyflakes findings, markers present."),
    "export": Entry("sm120kit.cli.patch:export_cmd",
                    "Write the variant's patch files and series.mbox (for git am)."),
    "targets": Entry("sm120kit.cli.patch:targets_cmd",
                     "Supported aliases: release, base ref, variant, status."),
    "series": Entry("sm120kit.cli.patch:series_cmd",
                    "The series' variants and patches, with subjects and files."),
    "revert": Entry("sm120kit.cli.maint:revert_cmd",
                    "Undo an apply: original bytes of an installed vLLM, or the branch."),
    "rebase": Entry("sm120kit.cli.maint:rebase_cmd",
                    "3-way port a variant onto a new release or branch."),
    "refresh": Entry("sm120kit.cli.maint:refresh_cmd",
                     "Regenerate a variant's patch files and manifest hashes."),
    "doctor": Entry("sm120kit.cli.doctor:doctor_cmd",
                    "Judge FlashInfer, SM120 GPUs, the planned launch and the host."),
    "warmup": Entry("sm120kit.cli.warmup:warmup_group",
                    "Plan and run the DCP sparse-MLA decode warmup."),
    "collect": Entry("sm120kit.cli.collect:collect_cmd",
                     "Supervise `-- vllm serve ...` and bundle the evidence of a failure."),
    "diagnose": Entry("sm120kit.cli.diagnose:diagnose_cmd",
                      "Name the phase, the diverging rank and the likely cause of a failure."),
    "report": Entry("sm120kit.cli.report:report_cmd",
                    "Draw a collect bundle as one HTML page (timeline, channels, findings)."),
    "validate": Entry("sm120kit.cli.validate:validate_cmd",
                      "Prove DCP computes what DCP 1 computes (greedy logprobs)."),
}


def load(name: str) -> click.Command:
    """Import and return the command registered as ``name`` (KeyError when there is none)."""
    mod_name, attr = COMMANDS[name].target.split(":")
    cmd = getattr(importlib.import_module(mod_name), attr)
    if not isinstance(cmd, click.Command):
        raise TypeError(f"{COMMANDS[name].target} is not a click command")
    cmd.short_help = COMMANDS[name].help  # the table is the one place the listing line lives
    return cmd


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name not in COMMANDS:
            return None
        return load(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The listing from the table alone: ``--help`` imports no command module."""
        rows = [(name, COMMANDS[name].help) for name in sorted(COMMANDS)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
