"""FlashInfer checks on the real unpacked PyPI wheels 0.6.13 / 0.6.14 / 0.7.2.post1.

The JIT-cache `.so` files and the `nvcc` used here are files laid out in tmp dirs (no CUDA
toolkit here); `nvcc` is a two-line shell script printing a real `nvcc --version` banner.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.doctor import run_doctor
from sm120kit.facts import flashinfer as fif


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    empty = tmp_path / "emptybin"
    empty.mkdir(exist_ok=True)
    env = {"HOME": str(tmp_path / "home"), "PATH": str(empty)}
    env.update(extra)
    return env


def _nvcc(tmp_path: Path, release: str) -> Path:
    d = tmp_path / f"cuda-{release}" / "bin"
    d.mkdir(parents=True)
    p = d / "nvcc"
    p.write_text("#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
                 f"echo 'Cuda compilation tools, release {release}, V{release}.1'\n")
    p.chmod(0o755)
    return d.parent


def test_api_by_signature_per_version(fi_trees: dict[str, Path]) -> None:
    old = fif.inspect([str(fi_trees["0.6.13"])])
    assert old.version == "0.6.13"
    assert old.decode_params is not None and "sparse_mla_top_k" in old.decode_params
    assert old.missing_params == ["kv_scale_format"]  # has lse/return_lse already
    assert old.sm120_module is None and not old.has_sm120_api
    new = fif.inspect([str(fi_trees["0.6.14"])])
    assert new.missing_params == [] and new.has_sm120_api
    assert new.sm120_module is not None and new.sm120_module.endswith("_sparse_mla_sm120.py")
    assert new.routing_present is True
    assert new.dispatch_kind == "set" and new.decode_max_tokens == 64
    assert new.dsv32_dispatch is not None and len(new.dsv32_dispatch) == 20
    assert (128, 2048) in new.dsv32_dispatch and (12, 2048) not in new.dsv32_dispatch
    assert new.dsv4_dispatch is not None and (8, 1024) in new.dsv4_dispatch
    assert all(k != 2048 for _, k in new.dsv4_dispatch)
    v7 = fif.inspect([str(fi_trees["0.7.2.post1"])])
    assert v7.has_sm120_api and v7.dispatch_kind == "envelope" and v7.max_heads == 128
    assert v7.sm120_module is not None and Path(v7.sm120_module).is_dir()


@pytest.mark.parametrize("version,status", [("0.6.13", "fail"), ("0.6.14", "ok"),
                                            ("0.7.2.post1", "ok")])
def test_sm120_api_check(fi_trees: dict[str, Path], tmp_path: Path, version: str,
                         status: str) -> None:
    rep = run_doctor(only=["flashinfer.sm120_api"], paths=[str(fi_trees[version])],
                     environ=_env(tmp_path), root=str(tmp_path))
    c = rep.get("flashinfer.sm120_api")
    assert c.status == status, c
    if status == "fail":
        assert "kv_scale_format" in c.summary and "0.6.14" in (c.fix or "")
        assert rep.exit_code == 2


def test_not_installed_is_skip_without_vllm_fail_with(tmp_path: Path, vllm_tree: Path) -> None:
    rep = run_doctor(only=["flashinfer.sm120_api"], paths=[str(tmp_path)],
                     environ=_env(tmp_path), root=str(tmp_path))
    assert rep.get("flashinfer.sm120_api").status == "skip"
    rep = run_doctor(only=["flashinfer.sm120_api"], paths=[str(vllm_tree)],
                     environ=_env(tmp_path), root=str(tmp_path))
    assert rep.get("flashinfer.sm120_api").status == "fail"


def test_kernels_jit_cache_found(fi_trees: dict[str, Path], tmp_path: Path) -> None:
    # CUDA 12.9 toolkit -> arch dir 120f (FlashInfer's rule for SM 12.0)
    cuda = _nvcc(tmp_path, "12.9")
    env = _env(tmp_path, CUDA_HOME=str(cuda))
    so = (Path(env["HOME"]) / ".cache" / "flashinfer" / "0.7.2.post1" / "120f" / "cached_ops"
          / "sparse_mla_sm120" / "sparse_mla_sm120.so")
    so.parent.mkdir(parents=True)
    so.write_bytes(b"\x7fELF")
    rep = run_doctor(only=["flashinfer.kernels"], paths=[str(fi_trees["0.7.2.post1"])],
                     environ=env, root=str(tmp_path), tiers=(0,))
    c = rep.get("flashinfer.kernels")
    assert c.status == "ok", c
    assert c.evidence["arch_dir"] == "120f" and str(so) in c.evidence["found"]


def test_kernels_arch_list_env_and_128_toolkit(fi_trees: dict[str, Path], tmp_path: Path) -> None:
    arch, how = fif.jit_arch_dir([(12, 0)], "12.8", {})
    assert arch == "120a"
    arch, how = fif.jit_arch_dir([(12, 0)], "12.8", {"FLASHINFER_CUDA_ARCH_LIST": "12.0f 9.0a"})
    # sorted (major, minor) tuples, as FlashInfer's _get_workspace_dir_name joins them
    assert arch == "90a_120f" and "FLASHINFER_CUDA_ARCH_LIST" in how


def test_kernels_jit_needed_nvcc_ok_warns(fi_trees: dict[str, Path], tmp_path: Path) -> None:
    env = _env(tmp_path, CUDA_HOME=str(_nvcc(tmp_path, "12.9")))
    rep = run_doctor(only=["flashinfer.kernels"], paths=[str(fi_trees["0.6.14"])],
                     environ=env, root=str(tmp_path))
    c = rep.get("flashinfer.kernels")
    assert c.status == "warn" and "JIT" in c.summary


def test_kernels_old_nvcc_fails(fi_trees: dict[str, Path], tmp_path: Path) -> None:
    # FlashInfer <= 0.7.0 needs CUDA 12.9 for SM 12.x; 0.7.1+ accepts 12.8
    env = _env(tmp_path, CUDA_HOME=str(_nvcc(tmp_path, "12.8")))
    rep = run_doctor(only=["flashinfer.kernels"], paths=[str(fi_trees["0.6.14"])],
                     environ=env, root=str(tmp_path))
    c = rep.get("flashinfer.kernels")
    assert c.status == "fail" and "12.9" in c.summary
    rep = run_doctor(only=["flashinfer.kernels"], paths=[str(fi_trees["0.7.2.post1"])],
                     environ=env, root=str(tmp_path))
    assert rep.get("flashinfer.kernels").status == "warn"


def test_kernels_no_nvcc_fails(fi_trees: dict[str, Path], tmp_path: Path) -> None:
    # root=tmp_path: the /usr/local/cuda fallback is looked up under the tmp root
    rep = run_doctor(only=["flashinfer.kernels"], paths=[str(fi_trees["0.7.2.post1"])],
                     environ=_env(tmp_path), root=str(tmp_path))
    c = rep.get("flashinfer.kernels")
    assert c.status == "fail" and "nvcc" in c.summary


def test_disable_jit(fi_trees: dict[str, Path], tmp_path: Path) -> None:
    env = _env(tmp_path, FLASHINFER_DISABLE_JIT="1", CUDA_HOME=str(_nvcc(tmp_path, "12.9")))
    rep = run_doctor(only=["flashinfer.disable_jit"], paths=[str(fi_trees["0.7.2.post1"])],
                     environ=env, root=str(tmp_path))
    assert rep.get("flashinfer.disable_jit").status == "fail"
    rep = run_doctor(only=["flashinfer.disable_jit"], paths=[str(fi_trees["0.7.2.post1"])],
                     environ=_env(tmp_path), root=str(tmp_path))
    assert rep.get("flashinfer.disable_jit").status == "ok"


def test_stale_jit_cache(fi_trees: dict[str, Path], tmp_path: Path) -> None:
    env = _env(tmp_path)
    base = Path(env["HOME"]) / ".cache" / "flashinfer"
    (base / "0.6.14" / "120f").mkdir(parents=True)
    (base / "0.7.2.post1" / "120f").mkdir(parents=True)
    (base / "cubins").mkdir()
    rep = run_doctor(only=["flashinfer.stale_jit_cache"], paths=[str(fi_trees["0.7.2.post1"])],
                     environ=env, root=str(tmp_path))
    c = rep.get("flashinfer.stale_jit_cache")
    assert c.status == "warn" and [s["version"] for s in c.evidence["stale"]] == ["0.6.14"]
    assert "rm -rf" in (c.fix or "")


def test_dispatch_set_vs_envelope(fi_trees: dict[str, Path], tmp_path: Path, model_dir,
                                  glm5_config: dict) -> None:  # type: ignore[no-untyped-def]
    # A synthetic 96-head variant of GLM-5's config: TP8 x DCP2 -> 24 heads per kernel call,
    # outside 0.6.14's exact dispatch set {8,16,32,64,128} but inside 0.7's envelope.
    cfg = dict(glm5_config, num_attention_heads=96)
    d = model_dir(cfg)
    argv = ["vllm", "serve", str(d), "-tp", "8", "-dcp", "2"]
    for version, status in (("0.6.14", "fail"), ("0.7.2.post1", "ok")):
        rep = run_doctor(only=["flashinfer.dispatch", "launch.heads"], launch_argv=argv,
                         paths=[str(fi_trees[version])], environ=_env(tmp_path),
                         root=str(tmp_path))
        assert rep.get("flashinfer.dispatch").status == status, (version, rep.to_dict())
        assert rep.get("launch.heads").status == status
    d = model_dir(glm5_config, "glm5")
    rep = run_doctor(only=["flashinfer.dispatch"], paths=[str(fi_trees["0.6.14"])],
                     launch_argv=["vllm", "serve", str(d), "-tp", "8", "-dcp", "8"],
                     environ=_env(tmp_path), root=str(tmp_path))
    c = rep.get("flashinfer.dispatch")
    assert c.status == "ok" and c.evidence["shape"] == [64, 2048]


def test_kernels_skip_on_non_sm120_gpu(fi_trees: dict[str, Path], tmp_path: Path) -> None:
    """NVML through the fake recorded seam (no GPU here): an H200 (9.0) host."""
    from sm120kit.facts.nvml_seam import RecordedSeam

    seam = RecordedSeam({"nvmlDeviceGetCount": 1, "nvmlDeviceGetName": "NVIDIA H200",
                         "nvmlDeviceGetCudaComputeCapability": [9, 0]})
    rep = run_doctor(only=["flashinfer.kernels", "gpu.sm120"], paths=[str(fi_trees["0.7.2.post1"])],
                     environ=_env(tmp_path), root=str(tmp_path), nvml_seam=seam)
    c = rep.get("flashinfer.kernels")
    assert c.status == "skip" and "9.0" in c.summary


def test_cubin_lagging_behind_needs_the_version_check_off(fi_trees: dict[str, Path],
                                                          tmp_path: Path) -> None:
    """flashinfer-python 0.6.14 over an older flashinfer-cubin (no 0.6.14 cubin release):
    FlashInfer's import guard (``flashinfer/jit/env.py``) refuses unless the variable is set.
    The cubin wheel is hundreds of MB of kernels; the check reads only its dist-info, so only
    that (the METADATA pip writes) is laid out here."""
    site = tmp_path / "site"
    dist = site / "flashinfer_cubin-0.6.13.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: flashinfer-cubin\n"
                                   "Version: 0.6.13\n")
    paths = [str(fi_trees["0.6.14"]), str(site)]
    rep = run_doctor(only=["flashinfer.sm120_api"], paths=paths, environ=_env(tmp_path),
                     root=str(tmp_path))
    c = rep.get("flashinfer.sm120_api")
    assert c.status == "fail" and "flashinfer-cubin 0.6.13" in c.summary, c
    assert "FLASHINFER_DISABLE_VERSION_CHECK=1" in (c.fix or "")
    env = _env(tmp_path, FLASHINFER_DISABLE_VERSION_CHECK="1")
    rep = run_doctor(only=["flashinfer.sm120_api"], paths=paths, environ=env, root=str(tmp_path))
    assert rep.get("flashinfer.sm120_api").status == "ok"


def test_old_flashinfer_fix_names_the_exact_install(fi_trees: dict[str, Path],
                                                    tmp_path: Path) -> None:
    rep = run_doctor(only=["flashinfer.sm120_api"], paths=[str(fi_trees["0.6.13"])],
                     environ=_env(tmp_path), root=str(tmp_path))
    fix = rep.get("flashinfer.sm120_api").fix or ""
    assert "pip install flashinfer-python==0.6.14" in fix
    assert "FLASHINFER_DISABLE_VERSION_CHECK=1" in fix


@pytest.mark.parametrize("version,has", [("0.6.14", False), ("0.7.2.post1", True)])
def test_return_lse_base_read_from_the_signature(fi_trees: dict[str, Path], tmp_path: Path,
                                                 version: str, has: bool) -> None:
    """The explicit LSE base keyword (passed by the v0.34 variant) exists from 0.7.2.post1."""
    rep = run_doctor(only=["flashinfer.sm120_api"], paths=[str(fi_trees[version])],
                     environ=_env(tmp_path), root=str(tmp_path))
    assert rep.get("flashinfer.sm120_api").evidence["return_lse_base"] is has
