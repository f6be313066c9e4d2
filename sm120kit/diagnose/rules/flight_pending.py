"""Flight Recorder groups (the bundle's summary of the dumps): each rank's entries still pending
and the ranks that never joined. Structure for the ``collective-not-started`` rule."""

from __future__ import annotations

from typing import Any


def pending(flight: dict[str, Any] | None) -> tuple[dict[int, list[dict[str, Any]]], list[Any]]:
    """rank -> pending FR entries, plus the ranks that never joined (any group)."""
    per: dict[int, list[dict[str, Any]]] = {}
    not_joined: list[Any] = []
    for g in (flight or {}).get("groups") or []:
        summ = g.get("summary") if isinstance(g, dict) else None
        if not isinstance(summ, dict):
            continue
        not_joined += list(summ.get("not_joined") or [])
        for rank, info in (summ.get("per_rank") or {}).items():
            if isinstance(info, dict) and str(rank).isdigit():
                per.setdefault(int(rank), []).extend(
                    p for p in info.get("pending") or [] if isinstance(p, dict))
    return per, not_joined
