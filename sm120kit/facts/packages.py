"""Installed distributions (``*.dist-info``) and package directories (``find_spec``).

Nothing here imports the packages. Distributions are found by listing each path entry once and
reading only the matching dist-info's METADATA (what ``importlib.metadata`` does, without its
~40 ms import); legacy ``*.egg-info`` installs fall back to ``importlib.metadata``. ``paths`` (a ``sys.path``-like list) lets callers point at an
unpacked release tree instead of the running interpreter's site-packages.
"""

from __future__ import annotations

import importlib.machinery
import os
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_REQ_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._\-]*)\s*(\[[^\]]*\])?\s*\(?([^;()]*)\)?\s*(;.*)?$")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Dist:
    name: str
    version: str
    location: str | None  # directory holding the dist-info
    requires: list[str] = field(default_factory=list)


def _metadata(path: str) -> tuple[str | None, list[str]]:
    """Version and Requires-Dist lines from a METADATA file's header (up to the blank line)."""
    version: str | None = None
    requires: list[str] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    break
                if line.startswith("Version:") and version is None:
                    version = line.split(":", 1)[1].strip()
                elif line.startswith("Requires-Dist:"):
                    requires.append(line.split(":", 1)[1].strip())
    except OSError:
        return None, []
    return version, requires


def _path_entries(paths: Sequence[str] | None) -> Iterator[tuple[str, str]]:
    """(directory, name) of every entry in each directory of ``paths`` (default ``sys.path``),
    in path order; an unreadable directory is passed over."""
    for entry in paths if paths is not None else sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for n in names:
            yield entry or ".", n


def get_dist(name: str, paths: Sequence[str] | None = None) -> Dist | None:
    """The installed distribution ``name`` (first on the path), or ``None``."""
    want = normalize(name)
    egg = False
    for entry, n in _path_entries(paths):
        if n.endswith(".dist-info"):
            proj, _, ver = n[: -len(".dist-info")].partition("-")
            if normalize(proj) != want:
                continue
            version, requires = _metadata(os.path.join(entry, n, "METADATA"))
            return Dist(name=name, version=version or ver or "?",
                        location=os.path.abspath(entry), requires=requires)
        if n.endswith(".egg-info") and normalize(n[: -len(".egg-info")].split("-", 1)[0]) == want:
            egg = True
    return _get_dist_md(name, paths) if egg else None


def _get_dist_md(name: str, paths: Sequence[str] | None) -> Dist | None:
    import importlib.metadata as md

    try:
        if paths is None:
            d = md.distribution(name)
        else:
            found = list(md.distributions(name=name, path=list(paths)))
            if not found:
                return None
            d = found[0]
    except md.PackageNotFoundError:
        return None
    except Exception:
        return None
    loc = None
    try:
        loc = str(d.locate_file(""))
    except Exception:
        loc = None
    try:
        ver = d.version or "?"
    except Exception:
        ver = "?"
    return Dist(name=name, version=ver, location=loc, requires=list(d.requires or []))


def pin_of(requires: Sequence[str], project: str) -> tuple[str | None, str | None]:
    """``(specifier, marker)`` of ``project`` in a Requires-Dist list (e.g. ``("==0.7.2.post1",
    None)``); unconditional requirements win over ones behind an extra."""
    best: tuple[str | None, str | None] = (None, None)
    for req in requires:
        m = _REQ_RE.match(req)
        if not m or normalize(m.group(1)) != normalize(project):
            continue
        spec = (m.group(3) or "").strip() or None
        marker = (m.group(4) or "").lstrip(";").strip() or None
        if marker is None:
            return spec, None
        if best == (None, None):
            best = (spec, marker)
    return best


def exact_pin(spec: str | None) -> str | None:
    if spec and spec.startswith("==") and "," not in spec and "*" not in spec:
        return spec[2:].strip()
    return None


def package_dir(import_name: str, paths: Sequence[str] | None = None) -> Path | None:
    """Directory of a top-level package, found without executing its ``__init__``."""
    try:
        spec = importlib.machinery.PathFinder.find_spec(
            import_name, list(paths) if paths is not None else None)
    except Exception:
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def dist_names_matching(pattern: str, paths: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """(name, version) of every ``*.dist-info`` whose normalised name matches ``pattern``.

    Lists each path entry's directory once (names only, no walk, no metadata parse).
    """
    rx = re.compile(pattern)
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for _entry, n in _path_entries(paths):
        if not n.endswith(".dist-info"):
            continue
        proj, _, ver = n[: -len(".dist-info")].partition("-")
        norm = normalize(proj)
        if rx.fullmatch(norm) and norm not in seen:
            seen.add(norm)
            out.append((norm, ver))
    return out


_VER_RE = re.compile(r"^\s*v?(\d+(?:\.\d+)*)(?:[.-]?post(\d+))?")


def version_tuple(v: str | None) -> tuple[int, ...]:
    """Release part (plus post number) as ints: ``"0.7.2.post1" -> (0, 7, 2, 0, 1)``-ish order.

    Enough for minimum checks; pre/dev/local parts are ignored (see :func:`is_local`).
    """
    if not v:
        return ()
    m = _VER_RE.match(v)
    if not m:
        return ()
    rel = tuple(int(x) for x in m.group(1).split("."))
    rel = rel + (0,) * max(0, 3 - len(rel))
    return rel + (int(m.group(2)) if m.group(2) else 0,)


def version_ge(v: str | None, minimum: str) -> bool:
    return bool(v) and version_tuple(v) >= version_tuple(minimum)


def is_local(v: str | None) -> bool:
    """A local / fork / dev build: a ``+local`` segment, ``.dev``, or a git hash (``g1a2b3c4``)."""
    if not v:
        return False
    return "+" in v or ".dev" in v or bool(re.search(r"g[0-9a-f]{7}", v))
