#!/usr/bin/env python3
"""Maintainer tool for the DCP patch series in ``patches/``.

Regenerate one variant's patch files from a git branch (one commit per patch, on top of the
release tag) and refresh that variant's ``sha256`` / ``files`` / ``subject`` entries in
``patches/manifest.json``. Markers are kept (patch *i* keeps the markers of the old patch *i*, or
of ``--markers-from VARIANT``'s patch *i* for a new variant). ``check`` recomputes the checksums.

    python scripts/series_tool.py export --repo /tmp/vllm-0.33 --base v0.33.0 --tip HEAD \\
        --variant v0.32-0.33 [--releases 0.32.0,0.33.0] [--markers-from v0.32-0.33]
    python scripts/series_tool.py check

Patches are written with ``git format-patch --full-index -N --no-signature`` so that ``git am -3``
can fall back on the blob ids in clones that hold the base release.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sm120kit.gitrun import run_git  # noqa: E402  (the one git runner: no hooks, no system config)

MANIFEST_NAME = "manifest.json"
_DIFF_RE = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)


def _git(repo: Path, *args: str) -> str:
    proc = run_git(list(args), repo, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def patch_info(path: Path) -> tuple[str, list[str]]:
    """(subject, touched files) of a format-patch file."""
    text = path.read_text(encoding="utf-8")
    m = re.search(r"^Subject: (?:\[PATCH[^\]]*\] )?(.*(?:\n [^\n]*)*)", text, re.M)
    subject = " ".join(m.group(1).split()) if m else path.stem
    files: dict[str, None] = {}
    for a, b in _DIFF_RE.findall(text):
        files.setdefault(b if b != "/dev/null" else a, None)
    return subject, list(files)


def load_manifest(patches: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((patches / MANIFEST_NAME).read_text(encoding="utf-8"))
    return data


def save_manifest(patches: Path, data: dict[str, Any]) -> None:
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    (patches / MANIFEST_NAME).write_text(text, encoding="utf-8")


def export(args: argparse.Namespace) -> int:
    repo = Path(args.repo).resolve()
    patches_dir = Path(args.patches_dir).resolve()
    out = patches_dir / args.variant
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.patch"):
        old.unlink()
    _git(repo, "format-patch", "-q", "--full-index", "-N", "--no-signature",
         "-o", str(out), f"{args.base}..{args.tip}")
    new_files = sorted(out.glob("*.patch"))
    if not new_files:
        raise SystemExit(f"no commits between {args.base} and {args.tip}")
    data = load_manifest(patches_dir)
    variants = data.setdefault("variants", {})
    entry = variants.setdefault(args.variant, {})
    donor = variants.get(args.markers_from, {}) if args.markers_from else entry
    old_patches = donor.get("patches", [])
    patches = []
    for i, path in enumerate(new_files):
        subject, files = patch_info(path)
        old = old_patches[i] if i < len(old_patches) else {}
        patches.append({
            "file": path.name,
            "sha256": sha256(path),
            "subject": subject,
            "files": files,
            "applied_markers": old.get("applied_markers", []),
            "upstream_markers": old.get("upstream_markers", []),
        })
    entry["base_release"] = args.base.lstrip("v")
    if args.releases:
        entry["releases"] = [r.strip() for r in args.releases.split(",") if r.strip()]
    entry.setdefault("releases", [entry["base_release"]])
    entry.setdefault("family", "0.30+")
    entry["patches"] = patches
    save_manifest(patches_dir, data)
    print(f"{args.variant}: wrote {len(patches)} patches to {out}")
    return 0


def check(args: argparse.Namespace) -> int:
    patches_dir = Path(args.patches_dir).resolve()
    data = load_manifest(patches_dir)
    bad = 0
    for name, v in data.get("variants", {}).items():
        d = patches_dir / v.get("dir", name)
        for p in v.get("patches", []):
            path = d / p["file"]
            if not path.is_file():
                print(f"MISSING {path}")
                bad += 1
            elif sha256(path) != p["sha256"]:
                print(f"SHA256 MISMATCH {path}")
                bad += 1
    print("ok" if not bad else f"{bad} problem(s)")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--patches-dir", default=str(ROOT / "patches"),
                    help="series directory holding manifest.json (default: the repo's patches/)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="regenerate a variant's patch files from commits")
    e.add_argument("--repo", required=True, help="git repo holding the patch commits")
    e.add_argument("--base", required=True, help="release tag the commits sit on, e.g. v0.33.0")
    e.add_argument("--tip", default="HEAD", help="last patch commit (default HEAD)")
    e.add_argument("--variant", required=True, help="variant name = directory under patches/")
    e.add_argument("--releases", help="comma-separated releases the variant covers")
    e.add_argument("--markers-from", help="copy markers from this variant (new variants)")
    e.set_defaults(fn=export)
    c = sub.add_parser("check", help="verify every manifest sha256 against its patch file")
    c.set_defaults(fn=check)
    args = ap.parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
