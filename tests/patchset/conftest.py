"""Fixtures for the patch engine: real release repos (from the cached PyPI wheel) and a small real
series made with ``git format-patch --full-index`` on a clone of one.

Nothing here is a mock: the series is genuine format-patch output against vLLM 0.34.0's real
sources, and every target is a real git repository in a tmp dir.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

SM120 = "vllm/v1/attention/backends/mla/flashinfer_mla_sparse_sm120.py"
SPARSE_UTILS = "vllm/v1/attention/backends/mla/sparse_utils.py"
TEST_VERSION = "0.34.0"

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "author@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(cwd: Path, *args: str, check: bool = True) -> str:
    env = dict(os.environ)
    env.update(GIT_ENV)
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) >= 1, f"anchor not found in {path}: {old!r}"
    path.write_text(text.replace(old, new, 1))


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


@pytest.fixture(scope="session")
def release34() -> Path:
    from sm120kit.patchset.release import release_repo

    return release_repo(TEST_VERSION)


@pytest.fixture(scope="session")
def mini_series_master(tmp_path_factory: pytest.TempPathFactory, release34: Path) -> MiniSeries:
    return build_series(tmp_path_factory.mktemp("series"), release34)


@pytest.fixture()
def mini_series(tmp_path: Path, mini_series_master: MiniSeries, monkeypatch: pytest.MonkeyPatch) -> MiniSeries:
    """A private copy of the test series (tests may tamper with it); SM120KIT_PATCHES points at it."""
    root = tmp_path / "patches"
    shutil.copytree(mini_series_master.root, root)
    monkeypatch.setenv("SM120KIT_PATCHES", str(root))
    vdir = root / "v-test"
    return MiniSeries(root, vdir, sorted(vdir.glob("*.patch")), mini_series_master.alias)


@pytest.fixture()
def checkout(tmp_path: Path, release34: Path) -> Path:
    """A user's vLLM checkout: a clone of the 0.34.0 release repo (tag v0.34.0), with identity."""
    dest = tmp_path / "vllm"
    git(tmp_path, "clone", "-q", str(release34), str(dest))
    git(dest, "config", "user.name", "User")
    git(dest, "config", "user.email", "user@example.invalid")
    return dest


def state_fingerprint(repo: Path) -> dict[str, object]:
    """Independent of the engine: everything a failed apply must leave byte-identical."""
    gd = Path(git(repo, "rev-parse", "--absolute-git-dir").strip())
    files = {}
    for dirpath, dirnames, filenames in os.walk(repo):
        if ".git" in dirnames:
            dirnames.remove(".git")
        for n in filenames:
            p = Path(dirpath) / n
            st = p.lstat()
            files[str(p.relative_to(repo))] = (st.st_mode, hashlib.sha256(p.read_bytes()).hexdigest())
    return {
        "head": git(repo, "rev-parse", "HEAD"),
        "head_ref": git(repo, "symbolic-ref", "-q", "HEAD", check=False),
        "index": hashlib.sha256((gd / "index").read_bytes()).hexdigest(),
        "refs": git(repo, "for-each-ref"),
        "stash": git(repo, "stash", "list"),
        "worktrees": git(repo, "worktree", "list", "--porcelain"),
        "config": (gd / "config").read_bytes(),
        "worktree_dirs": sorted(os.listdir(gd / "worktrees")) if (gd / "worktrees").exists() else [],
        "files": files,
    }
