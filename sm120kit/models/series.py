"""The series and targets manifest, ``patches/manifest.json``.

Schema (version 1)::

    {
      "schema": 1,
      "series": "sm120-dcp",                # series id, recorded in state files
      "title": "...",
      "credits": ["upstream work this ports: PRs, authors"],
      "variants": {
        "v0.32-0.34": {                      # directory patches/<variant>/
          "base_release": "0.33.0",          # release the patch files were generated against
          "releases": ["0.32.0", "0.33.0", "0.34.0"],
          "family": "0.30+",                 # free text: layout family
          "patches": [
            {
              "file": "0001-....patch",
              "sha256": "<hex of the patch file bytes>",
              "subject": "...",
              "files": ["vllm/..."],         # paths it touches, relative to the repo root
              "applied_markers": [{"file": "vllm/...", "text": "literal substring"}],
              "upstream_markers": [{"file": "vllm/...", "kind": "class_attr", "cls": "C",
                                    "name": "attr", "value": true}]  # see astmarkers
            }
          ]
        }
      },
      "targets": {
        "vllm-0.34.0": {
          "release": "0.34.0",               # PyPI version (null for forks)
          "base_ref": "v0.34.0",
          "variant": "v0.32-0.34",
          "status": "verified",              # verified | unverified-here | unsupported
          "verified": "how it was verified",
          "reason": null,                    # why, for unsupported / unverified-here
          "repo": null,                      # git URL for fork aliases
          "branch": null,                    # remote branch for fork aliases
          "port_from": null,                 # variant a fork alias is 3-way ported from
          "requires_flashinfer": null,       # minimum flashinfer-python when the pin is too old
          "requires_note": null              # why, and how users install it
        }
      }
    }

``applied_markers``: every one present → the patch is applied (literal comment tags only the
patched code has). ``upstream_markers``: every one present (and the patch not applied) →
upstream already has the change; they are judged on the syntax tree (``astmarkers``: a class
attribute assigned a constant, a call keyword inline or through a kwargs dict, a function, a
non-constant assignment), so comments and formatting do not matter; an empty list means "no
upstream release has it yet".
"""

from __future__ import annotations

import difflib
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sm120kit.errors import UserError
from sm120kit.models.astmarkers import holds as ast_holds
from sm120kit.paths import patches_dir

MANIFEST_NAME = "manifest.json"


@dataclass(frozen=True)
class Marker:
    """``text``: a literal substring (the applied markers' comment tags). Any other ``kind`` is
    judged on the syntax tree (``astmarkers``); ``spec`` holds its JSON fields, sorted."""

    file: str
    text: str = ""
    kind: str = "text"
    spec: tuple[tuple[str, Any], ...] = ()

    def holds(self, content: str | None) -> bool:
        if content is None:
            return False
        if self.kind == "text":
            return self.text in content
        return ast_holds(self.kind, {k: (list(v) if isinstance(v, tuple) else v)
                                 for k, v in self.spec}, content)

    def to_json(self) -> dict[str, Any]:
        if self.kind == "text":
            return {"file": self.file, "text": self.text}
        return {"file": self.file, "kind": self.kind,
                **{k: (list(v) if isinstance(v, tuple) else v) for k, v in self.spec}}

    def describe(self) -> str:
        if self.kind == "text":
            return self.text
        return f"{self.kind}(" + ", ".join(f"{k}={v!r}" for k, v in self.spec) + ")"

    def present_in(self, root: Path) -> bool:
        p = root / self.file
        try:
            return self.holds(p.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            return False


@dataclass(frozen=True)
class Patch:
    file: str
    sha256: str
    subject: str
    files: tuple[str, ...]
    applied_markers: tuple[Marker, ...] = ()
    upstream_markers: tuple[Marker, ...] = ()


@dataclass(frozen=True)
class Variant:
    name: str
    directory: Path
    base_release: str
    releases: tuple[str, ...]
    family: str
    patches: tuple[Patch, ...]

    def patch_path(self, patch: Patch) -> Path:
        return self.directory / patch.file

    def touched_files(self) -> list[str]:
        seen: dict[str, None] = {}
        for p in self.patches:
            for f in p.files:
                seen.setdefault(f, None)
        return list(seen)

    def check_checksums(self) -> None:
        """Refuse a missing or tampered patch file (sha256 differs from the manifest)."""
        for p in self.patches:
            path = self.patch_path(p)
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise UserError(
                    f"patch file missing: {path}", hint="reinstall sm120kit or restore patches/"
                ) from exc
            digest = hashlib.sha256(data).hexdigest()
            if digest != p.sha256:
                raise UserError(
                    f"patch {p.file} of variant {self.name} fails its checksum "
                    f"(sha256 {digest[:12]}… != manifest {p.sha256[:12]}…)",
                    hint="the patch file was modified; restore it or regenerate the manifest",
                )


@dataclass(frozen=True)
class Target:
    alias: str
    release: str | None
    base_ref: str
    variant: str
    status: str = "verified"
    verified: str = ""
    reason: str | None = None
    repo: str | None = None
    branch: str | None = None
    port_from: str | None = None
    #: minimum flashinfer-python when the release's own pin lacks the SM120 API (0.25.x)
    requires_flashinfer: str | None = None
    requires_note: str | None = None


@dataclass
class Series:
    id: str
    title: str
    root: Path
    credits: list[str] = field(default_factory=list)
    variants: dict[str, Variant] = field(default_factory=dict)
    targets: dict[str, Target] = field(default_factory=dict)

    def target(self, alias: str) -> Target:
        try:
            return self.targets[alias]
        except KeyError:
            near = self.near_aliases(alias)
            known = ", ".join(sorted(self.targets)) or "(none)"
            raise UserError(
                f"unknown branch alias {alias!r}"
                + (f"; did you mean {' or '.join(near)}?" if near else "")
                + f" (known aliases: {known})",
                hint="`sm120kit targets` lists them with their status",
            ) from None

    def near_aliases(self, alias: str) -> list[str]:
        """Known aliases close to ``alias`` (``0.34.0`` -> ``vllm-0.34.0``), best first."""
        low = alias.strip().lower()
        exact = [a for a in self.targets if a.lower() in (low, f"vllm-{low.lstrip('v')}")]
        if exact:
            return exact
        return difflib.get_close_matches(low, list(self.targets), n=2, cutoff=0.75)

    def variant(self, name: str) -> Variant:
        try:
            return self.variants[name]
        except KeyError:
            raise UserError(
                f"unknown variant {name!r}; known variants: {', '.join(sorted(self.variants))}"
            ) from None

    def variant_for(self, alias: str) -> tuple[Target, Variant]:
        t = self.target(alias)
        if t.status == "unsupported":
            raise UserError(f"{alias} is not supported: {t.reason}")
        return t, self.variant(t.variant)

    def alias_for_release(self, version: str) -> str | None:
        for alias, t in self.targets.items():
            if t.release == version:
                return alias
        return None


def _marker(m: dict[str, Any]) -> Marker:
    kind = m.get("kind", "text")
    if kind == "text":
        return Marker(file=m["file"], text=m["text"])
    spec = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in m.items()
                        if k not in ("file", "kind")))
    return Marker(file=m["file"], text="", kind=kind, spec=spec)


def _markers(raw: list[dict[str, Any]] | None) -> tuple[Marker, ...]:
    return tuple(_marker(m) for m in (raw or []))


def load_series(root: Path | None = None) -> Series:
    """Load ``manifest.json`` from ``root`` (default: the packaged ``patches/``)."""
    root = Path(root) if root else patches_dir()
    path = root / MANIFEST_NAME
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"no patch series manifest at {path}") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"unreadable patch series manifest {path}: {exc}") from exc
    if data.get("schema") != 1:
        raise UserError(f"unsupported manifest schema {data.get('schema')!r} in {path}")
    series = Series(
        id=data.get("series", "sm120-dcp"),
        title=data.get("title", ""),
        root=root,
        credits=list(data.get("credits", [])),
    )
    for name, v in (data.get("variants") or {}).items():
        patches = tuple(
            Patch(
                file=p["file"],
                sha256=p["sha256"],
                subject=p.get("subject", ""),
                files=tuple(p.get("files", [])),
                applied_markers=_markers(p.get("applied_markers")),
                upstream_markers=_markers(p.get("upstream_markers")),
            )
            for p in v.get("patches", [])
        )
        series.variants[name] = Variant(
            name=name,
            directory=root / v.get("dir", name),
            base_release=v.get("base_release", ""),
            releases=tuple(v.get("releases", [])),
            family=v.get("family", ""),
            patches=patches,
        )
    for alias, t in (data.get("targets") or {}).items():
        series.targets[alias] = Target(
            alias=alias,
            release=t.get("release"),
            base_ref=t.get("base_ref") or (f"v{t['release']}" if t.get("release") else ""),
            variant=t.get("variant", ""),
            status=t.get("status", "verified"),
            verified=t.get("verified", ""),
            reason=t.get("reason"),
            repo=t.get("repo"),
            branch=t.get("branch"),
            port_from=t.get("port_from"),
            requires_flashinfer=t.get("requires_flashinfer"),
            requires_note=t.get("requires_note"),
        )
    return series


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
