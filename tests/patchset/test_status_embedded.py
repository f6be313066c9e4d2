"""``status`` on real checkouts, the embedded default in a tmp cwd, listing commands and the
contract with the installed-vLLM / porting engines."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sm120kit.cli import run
from tests.support.gitrepo import edit, git, state_fingerprint
from tests.support.miniseries import MiniSeries
from tests.support.paths import SM120

ALIAS = "vllm-0.34.0"


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    rc = run([*args, "--json"])
    out, _ = capsys.readouterr()
    return rc, json.loads(out)


def test_status_states_and_read_only(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # patch 1 applied by hand (git am), patch 3's context changed in the working tree (dirty)
    git(checkout, "am", "-q", str(mini_series.patches[0]))
    edit(checkout / SM120, "        if self._workspace_buffer is None:\n",
         "        if self._workspace_buffer is None:  # local edit\n")
    before = state_fingerprint(checkout)
    rc, st = _cli(capsys, "status", "--repo", str(checkout), "--branch", ALIAS)
    assert state_fingerprint(checkout) == before
    assert [p["state"] for p in st["patches"]] == ["applied", "not-applied", "conflict"]
    assert rc == 2 and st["summary"] == "conflict"
    detail = st["patches"][2]["detail"]
    assert SM120 in detail and "hunk #1" in detail, detail
    # human output names the same
    assert run(["status", "--repo", str(checkout), "--branch", ALIAS]) == 2
    out, _ = capsys.readouterr()
    assert "conflict" in out and "applied" in out


def test_status_upstream_is_judged_on_the_base(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An upstream marker that the patched code also contains does not make a patch 'upstream'."""
    data = mini_series.manifest()
    data["variants"]["v-test"]["patches"][0]["upstream_markers"] = [
        {"file": SM120, "text": "can_return_lse_for_decode = True"}]
    mini_series.write_manifest(data)
    assert run(["apply", "--branch", ALIAS, "--repo", str(checkout), "--checkout"]) == 0
    capsys.readouterr()
    edit(checkout / SM120, "# sm120kit-test: lse", "# edited")  # applied marker gone, upstream text stays
    rc, st = _cli(capsys, "status", "--repo", str(checkout), "--branch", ALIAS)
    assert st["patches"][0]["state"] != "upstream"
    assert st["patches"][0]["missing_markers"]


def test_status_needs_a_checkout(
    mini_series: MiniSeries, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    rc = run(["status"])
    _, err = capsys.readouterr()
    assert rc == 2 and "needs a vLLM git checkout" in err and "--repo" in err


def test_status_alias_must_be_inferable(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (checkout / "vllm/_version.py").write_text("__version__ = version = '0.0.1'\n")
    git(checkout, "commit", "-qam", "unknown version")
    git(checkout, "tag", "-d", "v0.34.0")
    rc = run(["status", "--repo", str(checkout)])
    _, err = capsys.readouterr()
    assert rc == 2 and "cannot tell which vLLM release" in err and "--branch" in err


def test_embedded_default_into_tmp_cwd(
    mini_series: MiniSeries, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    rc = run(["apply", "--branch", ALIAS])
    out, err = capsys.readouterr()
    assert rc == 0, err
    dest = cwd / "vllm-0.34.0-sm120kit"
    assert str(dest) in out.replace("\n", "")
    assert "sm120kit-test: workspace note" in (dest / SM120).read_text()
    assert git(dest, "symbolic-ref", "--short", "HEAD").strip() == f"sm120kit/dcp-{ALIAS}"
    assert git(dest, "status", "--porcelain") == ""
    assert sorted(os.listdir(cwd)) == ["vllm-0.34.0-sm120kit"]  # no temp leftovers
    rec = json.loads((dest / ".git" / "sm120kit-result.json").read_text())
    assert rec["alias"] == ALIAS and rec["release"] == "0.34.0"
    # the result does not depend on the cache (objects are its own)
    assert not (dest / ".git" / "objects" / "info" / "alternates").exists()
    # again: already applied, nothing changes
    before = state_fingerprint(dest)
    rc, doc = _cli(capsys, "apply", "--branch", ALIAS)
    assert rc == 0 and doc["status"] == "already-applied" and doc["kind"] == "embedded"
    assert state_fingerprint(dest) == before
    # next to the result, `status --branch ALIAS` finds ./vllm-0.34.0-sm120kit
    rc, st = _cli(capsys, "status", "--branch", ALIAS)
    assert rc == 0 and st["repo"] == str(dest)
    # inside the result, it is a vLLM checkout: status works by discovery
    monkeypatch.chdir(dest / "vllm")
    rc, st = _cli(capsys, "status")
    assert rc == 0 and st["summary"] == "applied"


def test_embedded_refuses_a_foreign_output(
    mini_series: MiniSeries, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tmp_path = tmp_path / "w"  # (tmp_path itself holds the test series)
    tmp_path.mkdir()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "vllm-0.34.0-sm120kit").mkdir()
    (tmp_path / "vllm-0.34.0-sm120kit" / "mine.txt").write_text("keep\n")
    rc = run(["apply", "--branch", ALIAS])
    _, err = capsys.readouterr()
    assert rc == 2 and "is not an sm120kit result" in err and "--output" in err
    assert os.listdir(tmp_path / "vllm-0.34.0-sm120kit") == ["mine.txt"]
    # --output elsewhere works; a dry run creates nothing and exits 1
    rc, doc = _cli(capsys, "apply", "--branch", ALIAS, "--output", str(tmp_path / "x"), "--dry-run")
    assert rc == 1 and doc["status"] == "would-apply" and not (tmp_path / "x").exists()
    assert sorted(os.listdir(tmp_path)) == ["vllm-0.34.0-sm120kit"]


def test_embedded_failure_leaves_nothing(
    mini_series: MiniSeries, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    p = mini_series.patches[1]
    p.write_text(p.read_text().replace("            seq_lens=None,\n", "            seq_lens=Nope,\n"))
    import hashlib

    data = mini_series.manifest()
    data["variants"]["v-test"]["patches"][1]["sha256"] = hashlib.sha256(p.read_bytes()).hexdigest()
    mini_series.write_manifest(data)
    tmp_path = tmp_path / "w"
    tmp_path.mkdir()
    monkeypatch.chdir(tmp_path)
    rc, doc = _cli(capsys, "apply", "--branch", ALIAS)
    assert rc == 2 and doc["status"] == "failed"
    assert doc["failure"]["patch"] == p.name and doc["failure"]["hunks"][0]["file"] == SM120
    assert os.listdir(tmp_path) == []


def test_targets_and_series_listing(mini_series: MiniSeries, capsys: pytest.CaptureFixture[str]) -> None:
    rc, t = _cli(capsys, "targets")
    assert rc == 0
    rows = {r["alias"]: r for r in t["targets"]}
    assert rows[ALIAS]["status"] == "verified" and rows[ALIAS]["patches"] == 3
    assert rows["vllm-9.9.9"]["status"] == "unsupported" and rows["vllm-9.9.9"]["reason"]
    rc, s = _cli(capsys, "series", "--branch", ALIAS)
    assert rc == 0
    (v,) = s["variants"]
    assert [p["subject"] for p in v["patches"]][0] == "sm120: report the decode LSE capability"
    assert v["patches"][1]["files"] == sorted([SM120, "vllm/v1/attention/backends/mla/sparse_utils.py"])
    assert run(["targets"]) == 0 and run(["series"]) == 0
    out, _ = capsys.readouterr()
    assert "unsupported" in out and "workspace" in out and "v-test" in out


def test_json_error_envelope(mini_series: MiniSeries, capsys: pytest.CaptureFixture[str]) -> None:
    rc = run(["series", "--branch", "nope", "--json"])
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert rc == 2 and doc["status"] == "error" and "unknown branch alias" in doc["error"]
    assert doc["tool"] == "sm120kit" and "unknown branch alias" in err


def test_installed_is_delegated(
    mini_series: MiniSeries, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """--installed goes to sm120kit.patchset.installed (or says it is not in this build)."""
    import importlib.util

    have = importlib.util.find_spec("sm120kit.patchset.installed") is not None
    rc = run(["status", "--installed", "--python", str(tmp_path / "no-python"),
              "--state-dir", str(tmp_path / "state")])
    _, err = capsys.readouterr()
    if have:
        assert rc == 2 and "not available in this build" not in err
    else:
        assert rc == 2 and "--installed is not available in this build" in err


def test_pip_output_is_sent_to_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    """pip's download progress (a child writing to fd 1) must not reach stdout (--json)."""
    import subprocess
    import sys

    from sm120kit.patchset.embedded import stdout_to_stderr

    with stdout_to_stderr():
        subprocess.run([sys.executable, "-c", "print('progress 50%')"], check=True)
    print("after")
    out, err = capfd.readouterr()
    assert "progress 50%" in err and "progress 50%" not in out
    assert "after" in out


def test_verify_on_mini_series_and_missing_base(
    mini_series: MiniSeries, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["apply", "--branch", ALIAS, "--repo", str(checkout), "--checkout"]) == 0
    capsys.readouterr()
    rc, v = _cli(capsys, "verify", "--repo", str(checkout))  # alias from the result branch name
    assert rc == 0 and v["alias"] == ALIAS and v["status"] == "ok"
    assert [f["status"] for f in v["files"]] == ["ok", "ok"]
    git(checkout, "tag", "-d", "v0.34.0")
    rc = run(["verify", "--repo", str(checkout)])
    _, err = capsys.readouterr()
    assert rc == 2 and "base ref v0.34.0 is not in" in err and "git fetch origin tag v0.34.0" in err
    rc, v = _cli(capsys, "verify", "--repo", str(checkout), "--base", "HEAD~3")
    assert rc == 0 and v["base"] == "HEAD~3"


def test_apply_installed_is_delegated(mini_series: MiniSeries, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    rc = run(["apply", "--installed", "--branch", ALIAS, "--python", str(tmp_path / "nope"),
              "--state-dir", str(tmp_path / "s"), "--dry-run"])
    _, err = capsys.readouterr()
    assert rc == 2
    if importlib.util.find_spec("sm120kit.patchset.installed") is None:
        assert "--installed is not available in this build" in err
    else:
        assert "not available in this build" not in err and err.startswith("error:")
