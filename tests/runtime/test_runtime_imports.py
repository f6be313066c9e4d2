"""Import environment: each release's tree (patched and upstream) imports the five modules under
test on this CPU-only machine, in its own subprocess, beside CPU torch 2.13.0.

vLLM is never pip-installed here: the tree is the wheel's Python files (``release_tree``), so
``vllm._C`` (the compiled extension) is missing; vLLM only warns about that.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.runtime.rt_expect import RELEASES

MODULES = (
    "vllm.v1.attention.backends.mla.flashinfer_mla_sparse_sm120",
    "vllm.v1.attention.backends.mla.flashinfer_mla_sparse",
    "vllm.v1.attention.backends.mla.sparse_utils",
    "vllm.v1.worker.gpu.warmup",
    "vllm.v1.attention.ops.dcp",
)

# the third-party packages of tests/requirements.txt that vLLM's import chain needs
REQUIRED = ("numpy", "pydantic", "transformers", "msgspec", "zmq", "cbor2", "openai",
            "openai_harmony", "fastapi", "llguidance", "einops", "tvm_ffi")


def test_requirements_installed() -> None:
    missing = [m for m in REQUIRED if importlib.util.find_spec(m) is None]
    assert not missing, (
        f"runtime test requirements missing: {missing}; "
        "run `pip install -r tests/requirements.txt`"
    )
    import torch

    assert torch.__version__.split("+")[0] == "2.13.0", torch.__version__


@pytest.mark.slow  # builds and runs every release's patched tree (the session's runtime results): 20-80 s
@pytest.mark.parametrize("kind", ["patched", "upstream"])
@pytest.mark.parametrize("release", RELEASES)
def test_release_imports_on_cpu(runtime_results, release: str, kind: str) -> None:
    run = runtime_results.ok(release, kind)
    imp = run.result["imports"]
    tree = runtime_results.tree(release, kind)
    assert imp["vllm_version"] == release
    assert imp["torch"].split("+")[0] == "2.13.0"
    assert imp["cuda_available"] is False
    assert imp["vllm_C"] is False  # the compiled extension is absent; vLLM only warns (or logs)
    assert set(imp["modules"]) == set(MODULES)
    for name, info in imp["modules"].items():
        path = Path(info["file"]).resolve()
        assert path.is_relative_to(tree.resolve()), f"{name} imported from {path}, not {tree}"
    sm120 = Path(imp["modules"][MODULES[0]]["file"]).read_text()
    assert ("# sm120kit:" in sm120) == (kind == "patched")
