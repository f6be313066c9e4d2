"""Rich tables for the patch commands: long paths and patch names fold instead of being cut."""

from __future__ import annotations

from typing import Any

from sm120kit.report import LiteTable

# short columns keep their width when the table shrinks (a status cut in two is unreadable)
_MIN_WIDTH = {"#": 2, "state": 11, "status": 11, "result": 11, "release": 7, "patches": 7,
              "compiles": 8}


def new_table(title: str, *columns: str) -> Any:
    """A table of ``columns`` (a :class:`~sm120kit.report.LiteTable`: no rich import unless it
    is drawn on a terminal)."""
    t = LiteTable(title=title, title_justify="left")
    for c in columns:
        t.add_column(
            c, overflow="fold", min_width=_MIN_WIDTH.get(c),
            justify="right" if c == "#" else "left",
        )
    return t
