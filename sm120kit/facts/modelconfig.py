"""Model config readers: find a model's ``config.json`` (local dir or Hugging Face cache snapshot,
never downloading) and load it."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def find_model_config(model: str | None, environ: Mapping[str, str]) -> Path | None:
    """config.json of a local model dir or a Hugging Face cache snapshot (never downloads)."""
    if not model:
        return None
    p = Path(model).expanduser()
    if (p / "config.json").is_file():
        return p / "config.json"
    if "/" not in model or model.startswith((".", "/")):
        return None
    home = environ.get("HF_HOME") or os.path.join(environ.get("HOME", "~"), ".cache",
                                                  "huggingface")
    hub = environ.get("HF_HUB_CACHE") or os.path.join(home, "hub")
    snap = Path(hub).expanduser() / ("models--" + model.replace("/", "--")) / "snapshots"
    try:
        cands = sorted(snap.iterdir(), key=lambda q: q.stat().st_mtime, reverse=True)
    except OSError:
        return None
    for c in cands:
        if (c / "config.json").is_file():
            return c / "config.json"
    return None


def load_config(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    data = json.loads(p.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{p} is not a JSON object")
    return data
