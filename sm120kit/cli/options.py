"""Click options shared by several commands, each declared once here.

A command composes them (``@options.json_option``, ``@options.branch_option("...")``); the
destination names are fixed (``as_json``, ``as_markdown``, ``alias``, ``repo``, ``installed``,
``python``, ``state_dir``, ``dcp``, ``block_size``, ``interleave``, ``stall_timeout``), so every
command's function takes the same parameter names.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from sm120kit.models.constants import DEFAULT_BLOCK_SIZE
from sm120kit.models.timeouts import DEFAULT_STALL_TIMEOUT_S

F = TypeVar("F", bound=Callable[..., Any])

json_option = click.option(
    "--json", "as_json", is_flag=True,
    help="Machine-readable output: one JSON object on stdout (errors too).",
)
markdown_option = click.option(
    "--markdown", "as_markdown", is_flag=True, help="Render the result as Markdown (for a ticket)."
)
repo_option = click.option(
    "--repo",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="vLLM git checkout (default: the checkout containing the current directory).",
)
installed_option = click.option(
    "--installed", is_flag=True,
    help="Work on the vLLM installed in a Python environment instead of a checkout.",
)
python_option = click.option(
    "--python", "python", default=None, metavar="PATH",
    help="With --installed: the interpreter whose vLLM is meant (default: this one).",
)
state_dir_option = click.option(
    "--state-dir", type=click.Path(path_type=Path), default=None,
    help="With --installed: where sm120kit keeps the originals (default: inside the vLLM package).",
)


def branch_option(help: str, *, required: bool = False) -> Callable[[F], F]:
    """``--branch ALIAS`` (a target alias such as ``vllm-0.34.0``; ``sm120kit targets`` lists them)."""
    return click.option("--branch", "alias", default=None, required=required, metavar="ALIAS",
                        help=help)


def installed_options(fn: F) -> F:
    """``--installed``, ``--python`` and ``--state-dir`` together."""
    return installed_option(python_option(state_dir_option(fn)))


# The DCP shape: each option once, one help text, the defaults from models/.
dcp_option = click.option(
    "--dcp", "dcp", type=click.IntRange(min=1), default=None, metavar="N",
    help="DCP size (vLLM's --decode-context-parallel-size); default: the launch line after `--`"
    " when given (warmup run under torchrun: WORLD_SIZE).",
)
block_size_option = click.option(
    "--block-size", "block_size", type=click.IntRange(min=1), default=None, metavar="B",
    help=f"KV block size per rank (vLLM's --block-size) [{DEFAULT_BLOCK_SIZE}].",
)
interleave_option = click.option(
    "--interleave", "interleave", type=click.IntRange(min=1), default=None, metavar="I",
    help="vLLM's --cp-kv-cache-interleave-size [1].",
)
stall_timeout_option = click.option(
    "--stall-timeout", "stall_timeout", type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_STALL_TIMEOUT_S, show_default=True, metavar="SECONDS",
    help="Seconds without output or phase change that count as a stall (a hang).",
)
