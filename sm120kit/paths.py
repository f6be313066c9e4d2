"""Places on disk: the cache for release wheels and trees, and state directories."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$SM120KIT_CACHE``, else ``$XDG_CACHE_HOME/sm120kit``, else ``~/.cache/sm120kit``."""
    env = os.environ.get("SM120KIT_CACHE")
    if env:
        p = Path(env)
    elif os.environ.get("XDG_CACHE_HOME"):
        p = Path(os.environ["XDG_CACHE_HOME"]) / "sm120kit"
    else:
        p = Path.home() / ".cache" / "sm120kit"
    p.mkdir(parents=True, exist_ok=True)
    return p


def project_root() -> Path:
    """The source checkout (or installed package parent) holding ``patches/``."""
    here = Path(__file__).resolve().parent
    for cand in (here.parent, here):
        if (cand / "patches").is_dir():
            return cand
    return here.parent


def patches_dir() -> Path:
    env = os.environ.get("SM120KIT_PATCHES")
    if env:
        return Path(env)
    packaged = Path(__file__).resolve().parent / "_patches"
    if packaged.is_dir():
        return packaged
    return project_root() / "patches"
