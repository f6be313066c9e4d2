"""The real series in ``patches/`` on every target release 0.30.0–0.34.0 (PyPI wheels, cached).

Per release: status before (all not-applied, applies cleanly), apply on a clone of the release
repo, status applied, verify passes, re-apply is a no-op; and cross-release checks: the wrong
variant conflicts, verify catches broken code, export gives an mbox ``git am`` applies.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sm120kit.cli import run
from sm120kit.models.series import load_series
from sm120kit.paths import project_root
from tests.support.gitrepo import git, state_fingerprint

RELEASES = ["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"]
PATCHES = project_root() / "patches"
SM120 = "vllm/v1/attention/backends/mla/flashinfer_mla_sparse_sm120.py"

pytestmark = pytest.mark.network  # clones of vLLM release repositories (PyPI wheels)


@pytest.fixture(autouse=True)
def _real_series(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SM120KIT_PATCHES", str(PATCHES))


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    rc = run([*args, "--json"])
    out, _ = capsys.readouterr()
    return rc, json.loads(out)


def _clone(version: str, dest: Path) -> Path:
    from sm120kit.patchset.release import release_repo

    git(dest.parent, "clone", "-q", str(release_repo(version)), str(dest))
    return dest


def test_manifest_covers_every_release() -> None:
    series = load_series(PATCHES)
    for v in RELEASES:
        alias = f"vllm-{v}"
        assert alias in series.targets
        t = series.targets[alias]
        assert t.base_ref == f"v{v}" and t.status == "verified"
        assert v in series.variants[t.variant].releases
        series.variants[t.variant].check_checksums()


@pytest.mark.parametrize("version", RELEASES)
def test_apply_status_verify_reapply(
    version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = _clone(version, tmp_path / f"vllm-{version}")
    alias = f"vllm-{version}"
    rc, st = _cli(capsys, "status", "--repo", str(repo))  # alias inferred from vllm/_version.py
    assert st["alias"] == alias
    assert [p["state"] for p in st["patches"]] == ["not-applied"] * 6, st
    assert rc == 1 and st["summary"] == "not-applied"
    rc, v = _cli(capsys, "verify", "--repo", str(repo))
    assert rc == 2 and v["status"] == "fail"  # unpatched: markers missing
    rc, res = _cli(capsys, "apply", "--branch", alias, "--repo", str(repo), "--checkout")
    assert rc == 0, res
    assert res["status"] == "applied" and res["checked_out"] is True
    assert [p["state"] for p in res["patches"]] == ["applied"] * 6
    assert git(repo, "rev-list", "--count", f"v{version}..HEAD").strip() == "6"
    # reproducible: the same series on the same release gives the same commit everywhere
    other = _clone(version, tmp_path / "again")
    assert run(["apply", "--branch", alias, "--repo", str(other), "--json"]) == 0
    capsys.readouterr()
    assert git(other, "rev-parse", f"sm120kit/dcp-{alias}") == git(repo, "rev-parse", "HEAD")
    rc, st = _cli(capsys, "status", "--repo", str(repo))
    assert rc == 0 and st["summary"] == "applied"
    assert [p["state"] for p in st["patches"]] == ["applied"] * 6
    rc, v = _cli(capsys, "verify", "--repo", str(repo))
    assert rc == 0 and v["status"] == "ok", v
    assert {f["file"] for f in v["files"]} >= {SM120, "vllm/v1/worker/gpu/warmup.py"}
    assert all(f["compiles"] for f in v["files"])
    before = state_fingerprint(repo)
    rc, res = _cli(capsys, "apply", "--branch", alias, "--repo", str(repo))
    assert rc == 0 and res["status"] == "already-applied"
    assert state_fingerprint(repo) == before


def test_wrong_variant_conflicts_in_status_and_apply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = _clone("0.30.0", tmp_path / "vllm-0.30.0")
    git(repo, "tag", "v0.34.0", "v0.30.0")  # pretend this is 0.34.0: the 0.34 variant's context differs
    rc, st = _cli(capsys, "status", "--repo", str(repo), "--branch", "vllm-0.34.0")
    assert rc == 2 and st["summary"] == "conflict"
    bad = [p for p in st["patches"] if p["state"] == "conflict"]
    assert bad
    # each conflict names the file and the hunk of the patch that does not apply:
    # "<touched file>: hunk #N (@@ ... @@ context)"
    for p in bad:
        assert re.fullmatch(r"vllm/\S+\.py: hunk #\d+ \(@@ -\d+,\d+ \+\d+,\d+ @@.*\)", p["detail"]), p
    before = state_fingerprint(repo)
    rc = run(["apply", "--branch", "vllm-0.34.0", "--repo", str(repo), "--no-port"])
    _, err = capsys.readouterr()
    assert rc == 2 and "nothing was changed" in err and ".patch" in err and "hunk #" in err, err
    assert state_fingerprint(repo) == before
    # without --no-port the missing preimages hand over to a port from release 0.34.0, which
    # conflicts in the definitions 0.30.0 really has differently; still nothing is changed
    rc, doc = _cli(capsys, "apply", "--branch", "vllm-0.34.0", "--repo", str(repo))
    assert rc == 2 and doc["mode"] == "port" and doc["status"] == "conflict", doc
    assert "lacks the preimage blobs of vllm 0.34.0" in doc["note"]
    assert "FlashInferMLASparseSM120Impl.forward_mqa" in {c["definition"] for c in doc["conflicts"]}
    assert state_fingerprint(repo) == before


def test_verify_catches_new_undefined_names_and_syntax_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = _clone("0.34.0", tmp_path / "vllm-0.34.0")
    assert run(["apply", "--branch", "vllm-0.34.0", "--repo", str(repo), "--checkout"]) == 0
    capsys.readouterr()
    f = repo / SM120
    good = f.read_text()
    f.write_text(good + "\n\ndef _broken():\n    return undefined_thing_xyz\n\nimport json\n")
    rc, v = _cli(capsys, "verify", "--repo", str(repo))
    assert rc == 2
    (entry,) = [x for x in v["files"] if x["file"] == SM120]
    assert entry["status"] == "fail"
    assert any("undefined_thing_xyz" in m for m in entry["new_messages"])
    assert any("'json' imported but unused" in m for m in entry["new_messages"])
    f.write_text(good + "\ndef oops(:\n")
    rc, v = _cli(capsys, "verify", "--repo", str(repo))
    (entry,) = [x for x in v["files"] if x["file"] == SM120]
    assert rc == 2 and entry["compiles"] is False
    # a removed comment tag is no loss (the code still runs DCP: judged by what it does), but
    # the LSE base the series declares, flipped back, is: the merge would use the wrong base
    f.write_text(good.replace("# sm120kit: DCP class attributes", "# removed"))
    rc, v = _cli(capsys, "verify", "--repo", str(repo))
    assert rc == 0, v
    f.write_text(good.replace("    lse_base_on_e = False", "    lse_base_on_e = True"))
    rc, v = _cli(capsys, "verify", "--repo", str(repo))
    assert rc == 2 and any(x["check"] == "lse-base" and x["name"] == "lse_base_on_e"
                           and x["file"] == SM120 and x["line"] > 0 for x in v["tree"]), v


def test_export_mbox_applies_with_git_am(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "exported"
    rc, res = _cli(capsys, "export", "--branch", "vllm-0.33.0", "-o", str(out))
    assert rc == 0
    names = (out / "series").read_text().splitlines()
    assert [n for n in names if not n.startswith("#")] == res["patches"] and len(res["patches"]) == 6
    assert (out / "SHA256SUMS").exists()
    a = _clone("0.33.0", tmp_path / "a")
    git(a, "am", "-3", str(out / "series.mbox"))
    b = _clone("0.33.0", tmp_path / "b")
    assert run(["apply", "--branch", "vllm-0.33.0", "--repo", str(b)]) == 0
    capsys.readouterr()
    assert git(a, "rev-parse", "HEAD^{tree}") == git(b, "rev-parse", "sm120kit/dcp-vllm-0.33.0^{tree}")
    # refuses a non-empty directory
    assert run(["export", "--branch", "vllm-0.33.0", "-o", str(out)]) == 2


def test_main_job_embedded_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's main-job command, outside any checkout: ./vllm-0.34.0-sm120kit, verified."""
    monkeypatch.chdir(tmp_path)
    rc = run(["apply", "--branch", "vllm-0.34.0"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    dest = tmp_path / "vllm-0.34.0-sm120kit"
    assert "applied 6 patch(es)" in out.replace("\n", " ")
    rc, v = _cli(capsys, "verify", "--repo", str(dest))
    assert rc == 0 and v["status"] == "ok" and v["alias"] == "vllm-0.34.0"
    rc, res = _cli(capsys, "apply", "--branch", "vllm-0.34.0")
    assert rc == 0 and res["status"] == "already-applied"
