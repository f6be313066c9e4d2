"""vLLM checks on the real vLLM 0.33.0 wheel tree, unpatched and with the real series applied,
plus vLLM's FlashInfer pin against the real FlashInfer wheel trees."""

from __future__ import annotations

import json
from pathlib import Path

from sm120kit.doctor import run_doctor
from sm120kit.facts import vllm as fv
from sm120kit.patchset.release import release_tree
from tests.support.paths import ROOT


def _run(tmp_path: Path, paths: list[Path], **kw):  # type: ignore[no-untyped-def]
    env = {"HOME": str(tmp_path / "home"), "PATH": str(tmp_path)}
    return run_doctor(paths=[str(p) for p in paths], environ=env, root=str(tmp_path), **kw)


def test_unpatched_facts(vllm_tree: Path) -> None:
    vi = fv.inspect([str(vllm_tree)])
    assert vi.version == "0.33.0" and vi.has_sm120_backend and vi.has_dsv4_backend
    assert vi.flashinfer_pin == "==0.7.2.post1" and vi.torch_pin == "2.14.0"
    assert vi.impl_attrs.get("is_sparse") is True
    assert "can_return_lse_for_decode" not in vi.impl_attrs and not vi.passes_return_lse
    assert not vi.series_applied and not vi.supports_dcp


def test_unpatched_fails_only_when_dcp_planned(vllm_tree: Path, tmp_path: Path) -> None:
    rep = _run(tmp_path, [vllm_tree], only=["vllm"], dcp_planned=8)
    assert rep.get("vllm.sm120_backend").status == "ok"
    c = rep.get("vllm.dcp_support")
    assert c.status == "fail" and c.fix == "sm120kit apply --installed"
    assert "does not support DCP" in c.summary and "DCP=8" in c.summary
    rep = _run(tmp_path, [vllm_tree], only=["vllm.dcp_support"])
    assert rep.get("vllm.dcp_support").status == "ok"
    # DCP taken from the launch argv as well
    rep = _run(tmp_path, [vllm_tree], only=["vllm.dcp_support"],
               launch_argv=["vllm", "serve", "m", "-tp", "8", "-dcp", "4"])
    assert rep.get("vllm.dcp_support").status == "fail"


def test_patched_series_detected(vllm_patched: Path, tmp_path: Path) -> None:
    vi = fv.inspect([str(vllm_patched)])
    assert vi.series["applied_variant"] == "v0.32-0.33"
    rep = _run(tmp_path, [vllm_patched], only=["vllm.dcp_support"], dcp_planned=8)
    c = rep.get("vllm.dcp_support")
    assert c.status == "ok" and "v0.32-0.33" in c.summary


def test_upstream_lse_impl_recognised_without_manifest(vllm_patched: Path,
                                                        tmp_path: Path) -> None:
    """An impl that returns the LSE (class attribute + return_lse=) counts as DCP-capable even
    when our series' manifest is absent (an upstream or fork implementation)."""
    empty = tmp_path / "no-series"
    empty.mkdir()
    vi = fv.inspect([str(vllm_patched)], series_root=empty)
    assert vi.series["manifest"] is None and vi.upstream_lse
    rep = _run(tmp_path, [vllm_patched], only=["vllm.dcp_support"], dcp_planned=8,
               series_root=empty)
    c = rep.get("vllm.dcp_support")
    assert c.status == "ok" and "upstream or fork" in c.summary


def test_partially_applied_series(vllm_tree: Path, tmp_path: Path) -> None:
    import os
    import shutil
    import subprocess

    repo = ROOT
    dest = tmp_path / "partial"
    shutil.copytree(vllm_tree / "vllm-0.33.0.dist-info", dest / "vllm-0.33.0.dist-info")
    shutil.copytree(vllm_tree / "vllm" / "v1" / "attention" / "backends",
                    dest / "vllm" / "v1" / "attention" / "backends")
    (dest / "vllm" / "__init__.py").write_text((vllm_tree / "vllm" / "__init__.py").read_text())
    first = sorted((repo / "patches" / "v0.32-0.33").glob("0001-*.patch"))[0]
    subprocess.run(["git", "apply", str(first)], cwd=dest, check=True, capture_output=True,
                   env={**os.environ, "GIT_CEILING_DIRECTORIES": str(dest.parent)})
    rep = _run(tmp_path, [dest], only=["vllm.dcp_support"], dcp_planned=2)
    c = rep.get("vllm.dcp_support")
    assert c.status == "fail" and "partly applied" in c.summary


def test_no_sm120_backend_fails(tmp_path: Path, vllm_tree: Path) -> None:
    dest = tmp_path / "old"
    (dest / "vllm").mkdir(parents=True)
    (dest / "vllm" / "__init__.py").write_text("")
    di = dest / "vllm-0.23.0.dist-info"
    di.mkdir()
    (di / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.23.0\n")
    rep = _run(tmp_path, [dest], only=["vllm.sm120_backend"])
    assert rep.get("vllm.sm120_backend").status == "fail"


def test_flashinfer_pin(vllm_tree: Path, fi_trees: dict[str, Path], tmp_path: Path) -> None:
    rep = _run(tmp_path, [vllm_tree, fi_trees["0.7.2.post1"]], only=["packages"])
    assert rep.get("packages.flashinfer_pin").status == "ok"
    assert rep.get("packages.installed").status == "ok"
    v = rep.get("packages.installed").evidence["versions"]
    assert v["vllm"] == "0.33.0" and v["flashinfer-python"] == "0.7.2.post1"
    rep = _run(tmp_path, [vllm_tree, fi_trees["0.6.14"]], only=["packages.flashinfer_pin"])
    c = rep.get("packages.flashinfer_pin")
    assert c.status == "warn" and c.fix == "pip install 'flashinfer-python==0.7.2.post1'"


def test_flashinfer_pin_not_on_pypi_and_local_builds(fi_trees: dict[str, Path],
                                                      tmp_path: Path) -> None:
    v34 = release_tree("vllm", "0.34.0")
    rep = _run(tmp_path, [v34, fi_trees["0.7.2.post1"]], only=["packages.flashinfer_pin"])
    c = rep.get("packages.flashinfer_pin")
    assert c.status == "warn" and "not on PyPI" in c.summary and "0.7.3" in c.summary
    # a fork build of FlashInfer (local version) against vLLM's pin: a warning, no pip fix
    fork = tmp_path / "fork"
    di = fork / "flashinfer_python-0.7.2.post1+eldritch.25dd814.dist-info"
    di.mkdir(parents=True)
    (di / "METADATA").write_text("Metadata-Version: 2.1\nName: flashinfer-python\n"
                                 "Version: 0.7.2.post1+eldritch.25dd814\n")
    rep = _run(tmp_path, [release_tree("vllm", "0.33.0"), fork], only=["packages.flashinfer_pin"])
    c = rep.get("packages.flashinfer_pin")
    assert c.status == "warn" and "local/fork" in c.summary and c.fix is None
    json.dumps(rep.to_dict())
