"""Issue 23 item 6 on real processes: collect's own stop signals are never evidence, the bundle
directory equals its tarball, an exit is an exit, and a truncated stall bundle is exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import only_bundle, read_tarball, run_collect

FAKE = Path(__file__).resolve().parent / "fake_vllm_serve.py"


def _env(tmp: Path) -> dict[str, str]:
    return dict(os.environ, HOME=str(tmp / "home"))


def _diagnose(target: Path, env: dict[str, str]) -> tuple[int, dict]:
    r = subprocess.run([sys.executable, "-m", "sm120kit", "diagnose", "--json", str(target)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.stdout, r.stderr[-2000:]
    return r.returncode, json.loads(r.stdout)


@pytest.fixture(scope="module")
def spin_bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict]:
    """A real child that spins until collect stops it with SIGINT (Python answers with a
    KeyboardInterrupt traceback on stderr)."""
    tmp = tmp_path_factory.mktemp("own")
    out = tmp / "out"
    r = run_collect(["-o", str(out), "--stall-timeout", "3", "--deadline", "15", "--no-doctor",
                     "--keep-dir", "--json", "--", sys.executable, str(FAKE), "spin"],
                    env=_env(tmp))
    res = json.loads(r.stdout)
    assert res["outcome"] == "stalled", res["reason"]
    assert any(st.get("signal") == "SIGINT" for st in res["stop_steps"]), res["stop_steps"]
    return out, r.stderr, res


def test_own_sigint_is_not_evidence(spin_bundle: tuple[Path, str, dict]) -> None:
    out, err, _res = spin_bundle
    files = read_tarball(only_bundle(out))
    hits = [k for k, v in files.items() if b"KeyboardInterrupt" in v]
    assert hits == [], hits
    # nothing is announced from the child's answer to our own signal
    assert "phase error" not in err and "phase shutdown" not in err, err[-2000:]


def test_bundle_directory_equals_its_tarball(spin_bundle: tuple[Path, str, dict]) -> None:
    out, _err, _res = spin_bundle
    tb = only_bundle(out)
    packed = read_tarball(tb)
    d = out / tb.name.removesuffix(".tar.gz")
    assert d.is_dir()
    on_disk = {str(p.relative_to(d)): p.read_bytes() for p in d.rglob("*") if p.is_file()}
    assert sorted(on_disk) == sorted(packed)
    assert [k for k in packed if packed[k] != on_disk[k]] == []


def test_diagnose_the_directory_does_not_blame_our_sigint(
        spin_bundle: tuple[Path, str, dict], tmp_path: Path) -> None:
    out, _err, _res = spin_bundle
    tb = only_bundle(out)
    rc, res = _diagnose(out / tb.name.removesuffix(".tar.gz"), _env(tmp_path))
    text = json.dumps(res)
    assert "KeyboardInterrupt" not in text and "failed first" not in res["verdict"], res["verdict"]
    # a stall verdict (which category is the catalogue's business), never an all-clear
    assert rc == 1 and res.get("state") in ("stalled", "failed"), res["verdict"]


def test_truncated_stall_bundle_is_exit_2(spin_bundle: tuple[Path, str, dict],
                                          tmp_path: Path) -> None:
    out, _err, _res = spin_bundle
    data = only_bundle(out).read_bytes()
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(data[: len(data) // 3])
    rc, res = _diagnose(cut, _env(tmp_path))
    assert rc == 2 and res.get("exit_code", 2) == 2, res
    assert "truncated" in res["error"] and "no failure recorded" not in json.dumps(res)


def test_an_exit_is_an_exit(tmp_path: Path) -> None:
    """A child that exits with code 3: exit 3, a post-mortem bundle that says it exited, no
    stall, no py-spy advice."""
    out = tmp_path / "out"
    r = run_collect(["-o", str(out), "--no-doctor", "--json", "--", sys.executable, "-c",
                     "import sys; print('loading config'); sys.exit(3)"], env=_env(tmp_path))
    assert r.returncode == 3, r.stderr[-2000:]
    res = json.loads(r.stdout)
    assert res["outcome"] == "crashed" and res["child_exit_code"] == 3
    rc, dg = _diagnose(only_bundle(out), _env(tmp_path))
    top = dg["findings"][0]
    assert "exited with code 3" in top["summary"] and "stalled:" not in dg["verdict"], dg
    assert "py-spy" not in top["fix"] and "stalled" != dg.get("state"), top
