"""The patched SM120 launcher call against the FlashInfer release each vLLM release pins.

vLLM's ``flashinfer_trtllm_batch_decode_with_kv_cache_mla`` is a ``*args, **kwargs`` pass-through,
so the keywords the patch sends are only checked by FlashInfer itself. For 0.30-0.33 the pinned
``flashinfer-python`` wheel (from PyPI, cached) is read: every keyword must be a parameter of its
``trtllm_batch_decode_with_kv_cache_mla``, and its SM120 sparse route must hand ``seq_lens``,
``lse`` and ``return_lse`` on. (vLLM 0.34 pins flashinfer-python 0.7.3, which is not on PyPI.)
"""

from __future__ import annotations

import ast
import re

import pytest

from sm120kit.models.series import Series
from tests.support import releases

from .astutil import find_class, find_func, kw, one_call, src
from .conftest import SM, get_applied

pytestmark = pytest.mark.network

LAUNCHER = "flashinfer_trtllm_batch_decode_with_kv_cache_mla"
FI_ENTRY = "trtllm_batch_decode_with_kv_cache_mla"
SM120_ROUTE = "_trtllm_batch_decode_sparse_mla_v32_sm120"


def _pinned_flashinfer(release: str) -> str:
    from sm120kit.patchset.release import release_tree

    tree = release_tree("vllm", release)
    meta = (tree / f"vllm-{release}.dist-info" / "METADATA").read_text(encoding="utf-8")
    m = re.search(r"^Requires-Dist: flashinfer-python==([^\s;]+)", meta, re.M)
    assert m, f"vLLM {release} pins no flashinfer-python"
    return m.group(1)


def test_034_pins_a_flashinfer_not_on_pypi() -> None:
    """Why 0.34 is not in the check below (its launcher call is the same as 0.33's)."""
    assert _pinned_flashinfer("0.34.0") == "0.7.3"


@pytest.mark.parametrize("release", ["0.30.0", "0.31.0", "0.32.0", "0.33.0"])
def test_launcher_keywords_accepted_by_pinned_flashinfer(
    release: str, series: Series, tmp_path_factory: pytest.TempPathFactory
) -> None:
    applied = get_applied(series, release, tmp_path_factory)
    pin = _pinned_flashinfer(release)
    fi = releases.tree("flashinfer-python", pin)
    core = ast.parse((fi / "flashinfer" / "mla" / "_core.py").read_text(encoding="utf-8"))
    entry = find_func(core, FI_ENTRY)
    params = {a.arg for a in entry.args.args + entry.args.kwonlyargs}

    impl = find_class(applied.patched_ast(SM), "FlashInferMLASparseSM120Impl")
    call = one_call(find_func(impl, "_run_mqa_kernel"), LAUNCHER)
    sent = {k.arg for k in call.keywords}
    assert sent <= params, f"flashinfer {pin} lacks {sorted(sent - params)}"
    assert "sparse_mla_top_k_lens" not in sent

    # The base-2 LSE the impl declares (lse_base_on_e = False): no base-e request is sent.
    assert "return_lse_base" not in sent

    # FlashInfer's SM120 sparse (v3.2/GLM) path, called from the entry point or (0.7.2+) from
    # the implementation function the entry point delegates to.
    scopes = [entry] + [find_func(core, c.func.id) for c in ast.walk(entry)
                        if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                        and c.func.id.startswith(f"_{FI_ENTRY}")]
    routes = [c for scope in scopes for c in ast.walk(scope)
              if isinstance(c, ast.Call) and src(c.func) == SM120_ROUTE]
    assert len(routes) == 1, f"flashinfer {pin}: SM120 sparse route not found"
    route = routes[0]
    for name in ("seq_lens", "lse", "return_lse", "kv_scale_format"):
        assert src(kw(route, name)) == name, (pin, name)
