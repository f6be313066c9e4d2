"""Is the bundle whole?  A ``collect`` that was interrupted (Ctrl-C) or stopped by its own
``--deadline`` leaves a bundle flagged in ``manifest.json`` (``interrupted``, ``partial``,
``partial_nodes``, ``partial_reason``). diagnose leads with that fact, before any finding: what
is missing from such a bundle was not collected, which says nothing about the system.

Kept apart from the rules (it judges the evidence, not the system) and from the bundle loading
in :mod:`.engine`, which calls :func:`completeness` once and :func:`lead` once.
"""

from __future__ import annotations

from typing import Any


def completeness(manifest: Any) -> str | None:
    """One sentence when the bundle is interrupted or partial; None for a whole bundle."""
    if not isinstance(manifest, dict):
        return None
    nodes = [str(n) for n in manifest.get("partial_nodes") or [] if n]
    reason = manifest.get("partial_reason")
    if manifest.get("interrupted"):
        return ("INTERRUPTED bundle: the collect was stopped (Ctrl-C) before it finished; what "
                "is missing was not collected" + (f" ({', '.join(nodes[:4])})" if nodes else ""))
    if manifest.get("partial"):
        if nodes:
            return (f"PARTIAL bundle: {len(nodes)} node(s) not fully collected "
                    f"({', '.join(nodes[:4])})")
        return f"PARTIAL bundle: {reason}" if reason else "PARTIAL bundle"
    return None


def lead(verdict: str, incomplete: str | None) -> str:
    """The verdict line, led by the bundle's completeness when it is not whole."""
    return f"{incomplete} — {verdict}" if incomplete else verdict


__all__ = ["completeness", "lead"]
