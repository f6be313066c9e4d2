"""Click options shared by several commands, each declared once here.

A command composes them (``@options.json_option``, ``@options.branch_option("...")``); the
destination names are fixed (``as_json``, ``as_markdown``, ``alias``, ``repo``, ``installed``,
``python``, ``state_dir``), so every command's function takes the same parameter names.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

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
