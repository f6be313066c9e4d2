"""``diagnose --explain-line TEXT``: the index templates one line matches, as one dict."""

from __future__ import annotations

from typing import Any

from sm120kit.diagnose.msgindex import IndexMissing, load
from sm120kit.errors import UserError


def lookup_line(text: str) -> dict[str, Any]:
    """``{"status", "line", "matches": [template dicts], "index": {...}}``; the first line of
    ``text`` is looked up (a pasted line's trailing newline or continuation is dropped)."""
    line = next((x for x in text.splitlines() if x.strip()), "")
    if not line:
        raise UserError("--explain-line needs a non-empty log line",
                        hint='sm120kit diagnose --explain-line "ValueError: ..."')
    try:
        idx = load()
    except IndexMissing as exc:
        raise UserError(str(exc),
                        hint="regenerate it: python scripts/build_message_index.py") from exc
    matches = idx.match(line)
    meta = idx.meta
    return {"status": "ok", "line": line, "matches": [m.to_dict() for m in matches],
            "index": {"templates": meta.get("templates"), "releases": {
                p: [v[0], v[-1], len(v)] for p, v in (meta.get("releases") or {}).items() if v}}}
