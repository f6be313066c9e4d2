"""A small real series made with git format-patch on a clone of vLLM 0.34.0's release repository (patchset tests)."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from tests.support.gitrepo import edit, git
from tests.support.paths import SM120, SPARSE_UTILS

TEST_VERSION = "0.34.0"


@dataclass
class MiniSeries:
    root: Path  # directory holding manifest.json and the variant dir
    variant_dir: Path
    patches: list[Path]
    alias: str = "vllm-0.34.0"

    def manifest(self) -> dict:
        return json.loads((self.root / "manifest.json").read_text())

    def write_manifest(self, data: dict) -> None:
        (self.root / "manifest.json").write_text(json.dumps(data, indent=2))


# (subject, [(file, old, new)], applied markers, upstream markers)
EDITS = [
    (
        "sm120: report the decode LSE capability",
        [(SM120, "    is_sparse = True\n",
          "    is_sparse = True\n    can_return_lse_for_decode = True  # sm120kit-test: lse\n")],
        [(SM120, "can_return_lse_for_decode = True  # sm120kit-test: lse")],
        [(SM120, "supports_dcp_upstream_marker_that_no_release_has")],
    ),
    (
        "sm120: pass per-token valid counts",
        [
            (SM120, "            seq_lens=None,\n", "            seq_lens=None,  # sm120kit-test: seq_lens\n"),
            (SPARSE_UTILS, "import torch\n", "import torch\n\n# sm120kit-test: utils marker\n"),
        ],
        [(SM120, "# sm120kit-test: seq_lens"), (SPARSE_UTILS, "# sm120kit-test: utils marker")],
        [],
    ),
    (
        "sm120: note the workspace",
        [(SM120, "        if self._workspace_buffer is None:\n",
          "        # sm120kit-test: workspace note\n        if self._workspace_buffer is None:\n")],
        [(SM120, "# sm120kit-test: workspace note")],
        [],
    ),
]


def build_series(dest: Path, release_repo: Path, edits=EDITS, version: str = TEST_VERSION) -> MiniSeries:
    work = dest / "work"
    git(dest, "clone", "-q", str(release_repo), str(work))
    for subject, changes, _a, _u in edits:
        for f, old, new in changes:
            edit(work / f, old, new)
        git(work, "commit", "-q", "-am", f"{subject}\n\nWhy: test series for the sm120kit engine.")
    root = dest / "patches"
    vdir = root / "v-test"
    vdir.mkdir(parents=True)
    git(work, "format-patch", "-q", "--full-index", "-o", str(vdir), f"v{version}")
    files = sorted(vdir.glob("*.patch"))
    assert len(files) == len(edits)
    patches = []
    for path, (subject, changes, applied, upstream) in zip(files, edits, strict=True):
        patches.append({
            "file": path.name,
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "subject": subject,
            "files": sorted({c[0] for c in changes}),
            "applied_markers": [{"file": f, "text": t} for f, t in applied],
            "upstream_markers": [{"file": f, "text": t} for f, t in upstream],
        })
    manifest = {
        "schema": 1, "series": "sm120-dcp-test", "title": "test series", "credits": ["tests"],
        "variants": {"v-test": {"base_release": version, "releases": [version], "family": "test",
                                 "patches": patches}},
        "targets": {
            f"vllm-{version}": {"release": version, "base_ref": f"v{version}", "variant": "v-test",
                                "status": "verified", "verified": "tests"},
            "vllm-9.9.9": {"release": "9.9.9", "base_ref": "v9.9.9", "variant": "v-test",
                           "status": "unsupported", "reason": "a test release that does not exist"},
        },
    }
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2))
    shutil.rmtree(work)
    return MiniSeries(root, vdir, files, f"vllm-{version}")


