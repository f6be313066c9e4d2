"""The ``eldritch-20260627`` fork alias: local ref, fetch, offline error, clone into the cache.

The real Eldritch branch cannot be fetched from here, so the alias' remote is replaced (in a tmp
copy of ``patches/``, via ``SM120KIT_PATCHES``) by a real local git remote (``file://``) that
carries a branch of the same name: vLLM 0.25.1's real sources (the Eldritch generation) re-committed with fork drift, like a
fork of the 0.24-0.29 generation. Everything else is the real manifest, series and CLI.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sm120kit.cli import run
from sm120kit.patchset.snapshot import snapshot_repo_state
from sm120kit.paths import cache_dir
from tests.support.forks import SM, WU, edit, git, make_fork
from tests.support.paths import PATCHES

pytestmark = pytest.mark.network  # builds vLLM release trees/repositories (PyPI wheels)

ALIAS = "eldritch-20260627"
BRANCH = "codex/eldritch-enlightenment-release-20260627"


def drift_eldritch(root: Path) -> None:
    edit(root, SM, "import torch\n", "import functools\nimport torch\n")
    edit(root, SM, ")\n\nif TYPE_CHECKING:",
         ")\nfrom vllm.logger import init_logger  # eldritch\n\nif TYPE_CHECKING:")
    edit(root, SM, '    return "pow2_fp32"\n',
         '    return "pow2_fp32"\n\n\n@functools.cache\ndef _eldritch_tag() -> str:\n'
         '    init_logger(__name__).debug("eldritch")\n    return "enlightenment"\n')
    with open(root / WU, "a") as fh:
        fh.write("\n\ndef eldritch_banner() -> str:\n    return \"enlightenment\"\n")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict, str]:
    capsys.readouterr()
    rc = run(list(argv))
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if out.strip().startswith("{") else {}), err


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("eldritch-remote")
    src = make_fork(base / "src", "0.25.1", drift_eldritch, branch=BRANCH)
    bare = base / "vllm.git"
    git(base, "clone", "-q", "--bare", str(src), str(bare))
    return bare


def use_remote(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, url: str) -> Path:
    patches = tmp_path / "patches"
    shutil.copytree(PATCHES, patches)
    m = json.loads((patches / "manifest.json").read_text())
    t = m["targets"][ALIAS]
    assert t["status"] == "unverified-here" and t["port_from"] == "v0.25"
    assert t["repo"] == "https://github.com/local-inference-lab/vllm.git" and t["branch"] == BRANCH
    t["repo"] = url
    (patches / "manifest.json").write_text(json.dumps(m, indent=2))
    monkeypatch.setenv("SM120KIT_PATCHES", str(patches))
    return patches


def user_checkout(tmp_path: Path) -> Path:
    """The user's own vLLM checkout (0.25.1 sources, no Eldritch branch)."""
    return make_fork(tmp_path / "user", "0.25.1", None)


def test_fetches_branch_and_ports(remote: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    use_remote(monkeypatch, tmp_path, remote.as_uri())
    user = user_checkout(tmp_path)
    refs_before = git(user, "for-each-ref")
    rc, doc, err = cli(capsys, "apply", "--branch", ALIAS, "--repo", str(user), "--json")
    assert rc == 0, err
    assert doc["status"] == "ported" and doc["source"]["variant"] == "v0.25"
    assert doc["source"]["release"] == "0.25.1"  # nearest release of the family
    tip = git(remote, "rev-parse", BRANCH).strip()
    assert doc["base"] == tip
    assert "sm120kit verify" in doc["note"]  # unverified-here: the user is told to verify
    # only the result branch was added
    added = set(git(user, "for-each-ref").splitlines()) - set(refs_before.splitlines())
    assert [ln.split()[-1] for ln in added] == [f"refs/heads/sm120kit/dcp-{ALIAS}"]
    git(user, "checkout", "-q", f"sm120kit/dcp-{ALIAS}")
    assert "_eldritch_tag" in (user / SM).read_text()
    rc, vdoc, err = cli(capsys, "verify", "--repo", str(user), "--branch", ALIAS, "--base", tip,
                        "--json")
    assert rc == 0, (err, vdoc)


def test_local_ref_is_used_without_network(remote: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    user = user_checkout(tmp_path)
    git(user, "fetch", "-q", remote.as_uri(), f"{BRANCH}:{BRANCH}")
    use_remote(monkeypatch, tmp_path, "file:///nonexistent/eldritch.git")
    rc, doc, err = cli(capsys, "apply", "--branch", ALIAS, "--repo", str(user), "--json")
    assert rc == 0, err
    assert doc["status"] == "ported" and doc["base"] == git(user, "rev-parse", BRANCH).strip()


def test_offline_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    use_remote(monkeypatch, tmp_path, "file:///nonexistent/eldritch.git")
    user = user_checkout(tmp_path)
    before = snapshot_repo_state(user, include_files=True)
    rc, _, err = cli(capsys, "apply", "--branch", ALIAS, "--repo", str(user))
    assert rc == 2
    assert f"error: cannot fetch {BRANCH} from file:///nonexistent/eldritch.git" in err
    assert "hint: offline?" in err and "Traceback" not in err
    assert snapshot_repo_state(user, include_files=True) == before

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    monkeypatch.chdir(outside)
    shutil.rmtree(cache_dir() / "forks" / ALIAS, ignore_errors=True)
    rc, _, err = cli(capsys, "apply", "--branch", ALIAS)
    assert rc == 2 and f"error: cannot clone {BRANCH} from file:///nonexistent" in err
    assert not (cache_dir() / "forks" / ALIAS).exists()
    assert list(outside.iterdir()) == []


def test_outside_a_checkout_clones_into_the_cache(remote: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    use_remote(monkeypatch, tmp_path, remote.as_uri())
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    monkeypatch.chdir(outside)
    clone = cache_dir() / "forks" / ALIAS
    shutil.rmtree(clone, ignore_errors=True)
    try:
        rc, doc, err = cli(capsys, "apply", "--branch", ALIAS, "--json")
        assert rc == 0, err
        assert doc["status"] == "ported" and Path(doc["repo"]) == clone
        assert f"checked out sm120kit/dcp-{ALIAS} in {clone}" in doc["note"]
        assert git(clone, "symbolic-ref", "--short", "HEAD").strip() == f"sm120kit/dcp-{ALIAS}"
        assert "# sm120kit: decode LSE" in (clone / SM).read_text()
        # a second run reuses the clone: the branch exists and carries the series
        rc, doc, err = cli(capsys, "apply", "--branch", ALIAS, "--json")
        assert rc == 0 and doc["status"] == "already-applied", err
    finally:
        shutil.rmtree(clone, ignore_errors=True)
