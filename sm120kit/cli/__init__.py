"""Click entry point. Commands are loaded lazily so ``sm120kit doctor`` stays fast.

Each command lives in its own module under ``sm120kit/cli/`` and stays thin: parse options, call
the core, render. Register a command by adding one line to ``COMMANDS``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any

import click

from sm120kit import __version__
from sm120kit.errors import ExitCode, UserError

# name -> "module:attribute" of a click.Command
COMMANDS: dict[str, str] = {
    "apply": "sm120kit.cli.patch:apply_cmd",
    "status": "sm120kit.cli.patch:status_cmd",
    "verify": "sm120kit.cli.patch:verify_cmd",
    "export": "sm120kit.cli.patch:export_cmd",
    "targets": "sm120kit.cli.patch:targets_cmd",
    "series": "sm120kit.cli.patch:series_cmd",
    "revert": "sm120kit.cli.maint:revert_cmd",
    "rebase": "sm120kit.cli.maint:rebase_cmd",
    "refresh": "sm120kit.cli.maint:refresh_cmd",
    "doctor": "sm120kit.cli.doctor:doctor_cmd",
    "warmup": "sm120kit.cli.warmup:warmup_group",
    "collect": "sm120kit.cli.collect:collect_cmd",
    "diagnose": "sm120kit.cli.diagnose:diagnose_cmd",
    "validate": "sm120kit.cli.validate:validate_cmd",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        names = list(self.commands)
        for name, target in COMMANDS.items():
            mod = target.split(":")[0]
            if importlib.util.find_spec(mod) is not None:
                names.append(name)
        return sorted(set(names))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        mod_name, attr = target.split(":")
        try:
            mod = importlib.import_module(mod_name)
        except ModuleNotFoundError as exc:
            if exc.name == mod_name:
                return None
            raise
        cmd = getattr(mod, attr, None)
        return cmd if isinstance(cmd, click.Command) else None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sm120kit")
@click.option("--debug", is_flag=True, envvar="SM120KIT_DEBUG", help="Show tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """DCP for vLLM's FlashInfer sparse-MLA SM120 backend: patch, check, warm up, diagnose."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def main(argv: list[str] | None = None) -> None:
    """Run the CLI, mapping errors to exit codes in this one place."""
    sys.exit(run(argv))


def run(argv: list[str] | None = None) -> int:
    debug = "--debug" in (argv if argv is not None else sys.argv[1:]) or bool(
        os.environ.get("SM120KIT_DEBUG")
    )
    try:
        rv: Any = cli.main(args=argv, prog_name="sm120kit", standalone_mode=False)
    except UserError as exc:
        if debug:
            import traceback

            traceback.print_exc()
        click.echo(f"error: {exc.message}", err=True)
        if exc.hint:
            click.echo(f"hint: {exc.hint}", err=True)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        return ExitCode.INTERRUPTED
    except click.ClickException as exc:
        exc.show()
        return ExitCode.FAILURE
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        return ExitCode.OK
    return int(rv) if isinstance(rv, int) else ExitCode.OK
