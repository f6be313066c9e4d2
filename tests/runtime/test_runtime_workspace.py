"""The per-device FlashInfer workspace of the patched ``flashinfer_mla_sparse`` module, run for real.

"Distinct devices" here are ``torch.device("cpu")`` and ``torch.device("meta")`` (this machine
has no second CUDA device; the patched cache keys on the normalized ``torch.device``, so two
device types are two keys just as ``cuda:0``/``cuda:1`` are). See ``rtworker.workspace_case``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.runtime.rt_expect import RELEASES


@pytest.mark.parametrize("release", RELEASES)
def test_one_buffer_per_device(runtime_results: Any, release: str) -> None:
    ws = runtime_results.ok(release, "patched").result["workspace_cache"]
    assert ws["cpu_first"]["device"] == "cpu"
    assert ws["meta_first"]["device"] == "meta"
    assert ws["cpu_again_same"] and ws["cpu_str_same"], "same device must reuse its buffer"
    assert ws["meta_again_same"]
    assert not ws["meta_is_cpu"], "another device must get its own buffer"
    assert ws["meta_grown_is_new"]
    assert ws["meta_grown"]["numel"] == 2 * ws["meta_first"]["numel"]
    assert ws["cpu_after_meta_grow_same"], "regrowing one device's buffer must not touch another's"
    assert ws["meta_after_grow_same"]
    assert ws["store_keys"] == ["cpu", "meta"]
    assert ws["has_global"] is False


@pytest.mark.parametrize("release", RELEASES)
def test_upstream_workspace_is_process_global(runtime_results: Any, release: str) -> None:
    """The hazard the patch removes: upstream hands the first device's buffer to every device."""
    ws = runtime_results.ok(release, "upstream").result["workspace_cache"]
    assert ws["meta_is_cpu"] is True
    assert ws["has_global"] is True


@pytest.mark.parametrize("release", RELEASES)
def test_workspace_taken_at_init_and_refetched_per_device(runtime_results: Any, release: str) -> None:
    p = runtime_results.ok(release, "patched").result
    u = runtime_results.ok(release, "upstream").result
    # with CUDA (stand-in), the impl asks for its current device's workspace in __init__
    assert p["workspace_init"] == {"requested_at_init": ["cuda:1"], "workspace_set_at_init": True}
    assert u["workspace_init"] == {"requested_at_init": [], "workspace_set_at_init": False}
    # an impl holding another device's buffer fetches q's device's buffer before launching
    pr = p["workspace_refetch"]
    assert pr["error"] is None
    assert pr["launch_workspace_device"] == "cpu"
    assert pr["launch_workspace_is_cpu_cache"] is True
    assert pr["impl_workspace_after"] == "cpu"
    ur = u["workspace_refetch"]
    assert "workspace_buffer must be on query device" in (ur["error"] or "")
