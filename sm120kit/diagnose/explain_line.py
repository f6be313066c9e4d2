"""``diagnose --explain-line TEXT``: what diagnose knows of one log line, as one dict: the
curated catalogue entries that name it (with the conditions they need from the rest of a log)
and the message-index templates it matches (where the message is printed, releases, category)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sm120kit.diagnose.catalogue import Catalogue, explain, not_evidence
from sm120kit.diagnose.msgindex.lookup import lookup_line


def explain_line(text: str, cat: Catalogue) -> dict[str, Any]:
    """``{"status", "line", "entries": [...], "matches": [...], "index": {...}}``; ``entries``
    in the order diagnose tries them (priority); an advice/completion line (or one an ``advice``
    entry of benign.toml names: ``advice_entry``) names nothing."""
    out = lookup_line(text)
    line = out["line"]
    adv = cat.advice(line)
    out["advice"] = not_evidence(line) or adv is not None
    out["advice_entry"] = adv.id if adv is not None else None
    out["entries"] = [] if out["advice"] else [_entry(cat, eid, line)
                                               for eid, _ in cat.scan(line)]
    return out


def _entry(cat: Catalogue, eid: str, line: str) -> dict[str, Any]:
    e = cat.get(eid)
    assert e is not None
    d = explain(cat, e.id)
    return {"id": e.id, "category": e.category, "confidence": e.confidence, "role": e.role,
            "summary": e.summary_for(line), "when": d["when"], "phase": e.phase,
            "sources": e.sources, "file": Path(e.file).name}
