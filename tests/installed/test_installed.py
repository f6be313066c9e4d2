"""``apply/status/revert --installed`` on vLLM 0.33.0 and 0.34.0 really pip-installed in a venv.

Everything is real: the venv, pip's install of the PyPI wheel (RECORD included), the series from
``patches/``, the CLI. The only injected fault is one failing write in
``test_failure_midway_restores_originals`` (a disk error cannot be produced on demand).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sm120kit.cli import run
from sm120kit.errors import UserError
from sm120kit.models.series import load_series
from sm120kit.patchset import installed
from tests.support.venvs import Env, hash_tree, pristine


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict | None, str]:
    capsys.readouterr()
    rc = run(list(argv))
    out, err = capsys.readouterr()
    doc = json.loads(out) if "--json" in argv and out.strip().startswith("{") else None
    return rc, doc, err


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.parametrize("version", ["0.33.0", "0.34.0"])
def test_apply_status_revert_roundtrip(envs: dict[str, Env], version: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    env = pristine(envs[version])
    py = str(env.python)
    before = hash_tree(env.site)
    # the interpreter cannot import vllm (no torch): locating it must not import it
    proc = subprocess.run([py, "-c", "import vllm"], capture_output=True, text=True)
    assert proc.returncode != 0 and "torch" in proc.stderr

    rc, doc, err = cli(capsys, "apply", "--installed", "--python", py, "--json")
    assert rc == 0, err
    assert doc and doc["status"] == "applied" and doc["alias"] == f"vllm-{version}"
    # the undo hint addresses the same interpreter
    assert f"`sm120kit revert --installed --python {py}`" in doc["message"]
    series = load_series()
    variant = series.variant(series.targets[f"vllm-{version}"].variant)
    assert doc["variant"] == variant.name
    for p in variant.patches:
        for m in p.applied_markers:
            assert m.text in (env.site / m.file).read_text(), (p.file, m.text)

    state = json.loads((env.pkg / ".sm120kit" / "state.json").read_text())
    assert state["state"] == "applied" and state["format"] == 1
    assert state["series"] == series.id and state["variant"] == variant.name
    assert state["vllm_version"] == version
    assert Path(state["python"]).name.startswith("python")
    assert state["checks"] == {"record": True, "release_tree": True}
    assert [f["path"] for f in state["files"]] == variant.touched_files()
    for f in state["files"]:
        assert sha(env.site / f["path"]) == f["new_sha256"] != f["original_sha256"]
        assert sha(env.pkg / ".sm120kit" / f["backup"]) == f["original_sha256"]
        assert f["original_sha256"] == before[f["path"]]

    rc, doc, _ = cli(capsys, "status", "--installed", "--python", py, "--json")
    assert rc == 0 and doc and doc["status"] == "applied"
    assert {f["state"] for f in doc["files"]} == {"applied"}

    patched = hash_tree(env.site)
    rc, doc, _ = cli(capsys, "apply", "--installed", "--python", py, "--json")
    assert rc == 0 and doc and doc["status"] == "already-applied"
    assert hash_tree(env.site) == patched

    rc, doc, err = cli(capsys, "revert", "--installed", "--python", py, "--json")
    assert rc == 0, err
    assert doc and doc["status"] == "reverted"
    assert hash_tree(env.site) == before  # every file byte-identical, state dir gone

    # as `status` on a checkout: a series that is not in exits 1
    rc, doc, _ = cli(capsys, "status", "--installed", "--python", py, "--json")
    assert rc == 1 and doc and doc["status"] == "not-applied"


def test_edit_after_apply_blocks_revert_unless_force(envs: dict[str, Env],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    env = pristine(envs["0.34.0"])
    py = str(env.python)
    before = hash_tree(env.site)
    assert cli(capsys, "apply", "--installed", "--python", py)[0] == 0
    target = env.site / "vllm/v1/worker/gpu/warmup.py"
    with open(target, "a") as fh:
        fh.write("# a local edit after sm120kit\n")
    edited = hash_tree(env.site)

    rc, doc, _ = cli(capsys, "status", "--installed", "--python", py, "--json")
    assert rc == 1 and doc and doc["status"] == "modified"
    assert [f["path"] for f in doc["files"] if f["state"] == "modified"] == [
        "vllm/v1/worker/gpu/warmup.py"]

    rc, _, err = cli(capsys, "revert", "--installed", "--python", py)
    assert rc == 2
    assert str(target) in err and "changed after sm120kit applied" in err and "--force" in err
    assert hash_tree(env.site) == edited  # nothing restored

    rc, doc, err = cli(capsys, "revert", "--installed", "--python", py, "--force", "--json")
    assert rc == 0, err
    assert doc and {f["path"]: f["before"] for f in doc["files"]}[
        "vllm/v1/worker/gpu/warmup.py"] == "modified"
    assert hash_tree(env.site) == before


def test_preimage_mismatch_refused_nothing_changed(envs: dict[str, Env],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    env = pristine(envs["0.33.0"])
    rel = "vllm/v1/attention/backends/mla/flashinfer_mla_sparse_sm120.py"
    p = env.site / rel
    p.write_text(p.read_text().replace("class FlashInferMLASparseSM120Impl",
                                       "class FlashInferMLASparseSM120Impl  # edited", 1))
    edited_sha = sha(p)
    before = hash_tree(env.site)
    rc, _, err = cli(capsys, "apply", "--installed", "--python", str(env.python))
    assert rc == 2
    assert str(p) in err and "modified after install" in err and edited_sha in err
    dist = next(env.site.glob("vllm-0.33.0.dist-info"))
    record = installed.parse_record((dist / "RECORD").read_text())
    assert record[rel] in err  # the expected hash, from RECORD
    assert hash_tree(env.site) == before
    assert not (env.pkg / ".sm120kit").exists()
    pristine(env)


def test_custom_build_differs_from_release(envs: dict[str, Env],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """RECORD vouches for an edited file (a custom build): the PyPI release hash refuses it."""
    env = pristine(envs["0.34.0"])
    rel = "vllm/v1/worker/gpu/warmup.py"
    p = env.site / rel
    dist = next(env.site.glob("vllm-0.34.0.dist-info"))
    record_path = dist / "RECORD"
    record_text = record_path.read_text()
    p.write_text(p.read_text() + "# custom build\n")
    import base64

    digest = base64.urlsafe_b64encode(hashlib.sha256(p.read_bytes()).digest()).rstrip(b"=").decode()
    lines = [
        f"{rel},sha256={digest},{p.stat().st_size}" if ln.startswith(rel + ",") else ln
        for ln in record_text.splitlines()
    ]
    record_path.write_text("\n".join(lines) + "\n")
    try:
        before = hash_tree(env.site)
        rc, _, err = cli(capsys, "apply", "--installed", "--python", str(env.python))
        assert rc == 2
        assert "differs from PyPI vllm 0.34.0" in err and str(p) in err
        assert hash_tree(env.site) == before
    finally:
        record_path.write_text(record_text)
        pristine(env)


def _ro_runner() -> list[str] | None:
    """A command prefix that runs the CLI with site-packages mounted read-only, or None."""
    if os.geteuid() != 0:
        return []  # chmod is enough for a normal user
    if shutil.which("unshare") is None:
        return None
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    return ["unshare", "-m"] if probe.returncode == 0 else None


def test_read_only_site_packages(envs: dict[str, Env], tmp_path: Path) -> None:
    env = pristine(envs["0.34.0"])
    prefix = _ro_runner()
    if prefix is None:
        pytest.skip("running as root without mount namespaces: cannot make a read-only dir")
    before = hash_tree(env.site)
    cmd = [sys.executable, "-m", "sm120kit", "apply", "--installed", "--python", str(env.python)]
    if prefix:
        # a real read-only bind mount of site-packages, in a private mount namespace
        script = 'mount --bind -o ro "$1" "$1" && shift && exec "$@"'
        full = [*prefix, "sh", "-c", script, "sh", str(env.site), *cmd]
    else:
        for d in {(env.site / f).parent for f in env.touched()} | {env.pkg}:
            d.chmod(0o555)
        full = cmd
    try:
        proc = subprocess.run(full, capture_output=True, text=True, timeout=300)
    finally:
        if not prefix:
            for d in {(env.site / f).parent for f in env.touched()} | {env.pkg}:
                d.chmod(0o755)
    assert proc.returncode == 2, proc.stderr
    assert "error: cannot write to " + str(env.site) in proc.stderr
    assert "Traceback" not in proc.stderr
    assert hash_tree(env.site) == before


def test_failure_midway_restores_originals(envs: dict[str, Env],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Fault injection: the write of the second package file fails like a full disk would."""
    env = pristine(envs["0.33.0"])
    before = hash_tree(env.site)
    real = installed._atomic_write
    writes: list[Path] = []

    def flaky(path: Path, data: bytes, mode: int | None = None, mtime_ns: int | None = None) -> None:
        if path.is_relative_to(env.site) and ".sm120kit" not in path.parts:
            writes.append(path)
            if len(writes) == 2:
                raise OSError(28, "No space left on device", str(path))
        real(path, data, mode, mtime_ns)

    monkeypatch.setattr(installed, "_atomic_write", flaky)
    with pytest.raises(UserError) as exc:
        installed.apply_installed(python=str(env.python))
    assert "every original was restored" in exc.value.message
    assert "No space left on device" in exc.value.message
    assert len(writes) >= 2
    monkeypatch.setattr(installed, "_atomic_write", real)
    assert hash_tree(env.site) == before
    assert not (env.pkg / ".sm120kit").exists()


def test_reinstall_detected_then_reapply(envs: dict[str, Env],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A reinstall is simulated by writing the wheel's own bytes over the touched files (what
    ``pip install --force-reinstall`` does to them; a real reinstall costs ~25 s here)."""
    import zipfile

    from sm120kit.patchset.release import fetch_wheel

    env = pristine(envs["0.34.0"])
    py = str(env.python)
    before = hash_tree(env.site)
    assert cli(capsys, "apply", "--installed", "--python", py)[0] == 0
    with zipfile.ZipFile(fetch_wheel("vllm", "0.34.0")) as zf:
        for rel in env.touched():
            tmp = env.site / (rel + ".pip-tmp")
            tmp.write_bytes(zf.read(rel))
            os.replace(tmp, env.site / rel)
    rc, doc, _ = cli(capsys, "status", "--installed", "--python", py, "--json")
    assert rc == 1 and doc and doc["status"] == "reinstalled"
    assert {f["state"] for f in doc["files"]} == {"original"}
    rc, doc, err = cli(capsys, "apply", "--installed", "--python", py, "--json")
    assert rc == 0 and doc and doc["status"] == "applied", err
    assert cli(capsys, "revert", "--installed", "--python", py)[0] == 0
    assert hash_tree(env.site) == before


def test_dry_run_and_state_dir(envs: dict[str, Env], tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    env = pristine(envs["0.33.0"])
    py = str(env.python)
    before = hash_tree(env.site)
    rc, doc, _ = cli(capsys, "apply", "--installed", "--python", py, "--dry-run", "--json")
    assert rc == 1 and doc and doc["status"] == "would-apply"
    assert hash_tree(env.site) == before
    sdir = tmp_path / "state"
    sdir.mkdir()
    owned = env.site / "vllm/v1/worker/gpu/warmup.py"
    if os.geteuid() == 0:  # root patching a file owned by someone else keeps the owner
        os.chown(owned, 4321, 4321)
    rc, doc, err = cli(capsys, "apply", "--installed", "--python", py, "--branch", "vllm-0.33.0",
                       "--state-dir", str(sdir), "--json")
    assert rc == 0, err
    assert (sdir / "state.json").is_file() and not (env.pkg / ".sm120kit").exists()
    if os.geteuid() == 0:
        assert (owned.stat().st_uid, owned.stat().st_gid) == (4321, 4321)
    rc, doc, _ = cli(capsys, "status", "--installed", "--python", py, "--state-dir", str(sdir),
                     "--json")
    assert rc == 0 and doc and doc["status"] == "applied"
    assert cli(capsys, "revert", "--installed", "--python", py, "--state-dir", str(sdir))[0] == 0
    if os.geteuid() == 0:
        assert (owned.stat().st_uid, owned.stat().st_gid) == (4321, 4321)
        os.chown(owned, 0, 0)
    assert hash_tree(env.site) == before


def test_relative_python_path(envs: dict[str, Env], monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    env = pristine(envs["0.33.0"])
    monkeypatch.chdir(env.root.parent)
    rel = f"{env.root.name}/bin/python"
    rc, doc, err = cli(capsys, "apply", "--installed", "--python", rel, "--dry-run", "--json")
    assert rc == 1 and doc and doc["status"] == "would-apply", err
    assert doc["installed"]["root"] == str(env.site)


def test_bad_inputs(envs: dict[str, Env], tmp_path: Path,
                    capsys: pytest.CaptureFixture[str]) -> None:
    env = pristine(envs["0.33.0"])
    rc, _, err = cli(capsys, "apply", "--installed", "--python", str(env.python),
                     "--branch", "vllm-0.34.0")
    assert rc == 2 and "installed vllm is 0.33.0 but vllm-0.34.0 targets 0.34.0" in err
    rc, _, err = cli(capsys, "apply", "--installed", "--python", str(env.python),
                     "--branch", "eldritch-20260627")
    assert rc == 2 and "fork alias" in err
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    rc, _, err = cli(capsys, "apply", "--installed", "--python", str(bare / "bin" / "python"))
    assert rc == 2 and "no vllm package importable" in err
    rc, _, err = cli(capsys, "revert", "--installed", "--python", str(env.python))
    assert rc == 2 and "nothing to revert" in err
    rc, _, err = cli(capsys, "apply", "--installed", "--python", str(tmp_path / "nope"))
    assert rc == 2 and "python interpreter not found" in err
