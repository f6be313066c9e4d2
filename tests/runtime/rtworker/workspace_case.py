"""The FlashInfer sparse-MLA workspace cache (``flashinfer_mla_sparse._get_workspace_buffer``).

"Distinct devices" on a CPU-only machine: ``torch.device("cpu")`` and ``torch.device("meta")``
(a real torch device type whose tensors have no storage). The patched cache keys buffers by the
normalized ``torch.device``, so these are two keys exactly as ``cuda:0`` and ``cuda:1`` would be;
the one CUDA-only step, ``"cuda"`` -> ``cuda:<current device>``, cannot run here. The impl's
"take the workspace at init" branch runs only when CUDA is available; to exercise it,
``torch.cuda.is_available``/``current_device`` are stand-ins (CUDA device 1) and the SM120
module's ``_get_workspace_buffer`` name records the request instead of allocating on a GPU.
"""

from __future__ import annotations

from typing import Any


def _buf(t: Any) -> dict[str, Any]:
    return {"id": id(t), "device": str(t.device), "numel": int(t.numel()), "dtype": str(t.dtype)}


def _reset(fms: Any) -> None:
    """Back to the state of a freshly imported module (no workspace allocated yet)."""
    if hasattr(fms, "_fi_sparse_workspaces"):
        fms._fi_sparse_workspaces.clear()
    if hasattr(fms, "_fi_sparse_workspace"):
        fms._fi_sparse_workspace = None


def run_cache() -> dict[str, Any]:
    import torch
    from vllm.v1.attention.backends.mla import flashinfer_mla_sparse as fms

    get = fms._get_workspace_buffer
    res: dict[str, Any] = {}
    _reset(fms)
    cpu1 = get(torch.device("cpu"))
    cpu2 = get(torch.device("cpu"))
    cpu_str = get("cpu")
    meta1 = get(torch.device("meta"))
    meta2 = get(torch.device("meta"))
    res["cpu_first"] = _buf(cpu1)
    res["cpu_again_same"] = cpu1 is cpu2
    res["cpu_str_same"] = cpu_str is cpu1
    res["meta_first"] = _buf(meta1)
    res["meta_again_same"] = meta1 is meta2
    res["meta_is_cpu"] = meta1 is cpu1
    grown = get(torch.device("meta"), min_bytes=int(meta1.numel()) * 2)
    res["meta_grown"] = _buf(grown)
    res["meta_grown_is_new"] = grown is not meta1
    cpu_after = get(torch.device("cpu"))
    res["cpu_after_meta_grow_same"] = cpu_after is cpu1
    res["meta_after_grow_same"] = get(torch.device("meta")) is grown
    store = getattr(fms, "_fi_sparse_workspaces", None)
    res["store_keys"] = None if store is None else sorted(str(k) for k in store)
    res["has_global"] = hasattr(fms, "_fi_sparse_workspace")
    _reset(fms)
    return res


def run_init_fetch() -> dict[str, Any]:
    """Does the impl request a workspace for the current CUDA device in ``__init__``?"""
    import importlib

    import torch
    from rtworker import impl_case
    from rtworker.standins import clear_groups, set_dcp_rank
    from vllm.config import set_current_vllm_config

    mod = importlib.import_module("vllm.v1.attention.backends.mla.flashinfer_mla_sparse_sm120")
    requests: list[str] = []
    real_get = mod._get_workspace_buffer
    real_avail, real_cur = torch.cuda.is_available, torch.cuda.current_device

    def fake_get(device: Any, min_bytes: Any = None) -> Any:
        requests.append(str(device))
        return torch.zeros(8, dtype=torch.int8)

    sc = impl_case.Scenario("ws", 2)
    inp_topk = torch.full((4, impl_case.TOPK), -1, dtype=torch.int32)
    mod._get_workspace_buffer = fake_get
    torch.cuda.is_available = lambda: True  # type: ignore[assignment]
    torch.cuda.current_device = lambda: 1  # type: ignore[assignment]
    try:
        with set_current_vllm_config(impl_case.build_vllm_config(sc)):
            set_dcp_rank(2, 0)
            impl = impl_case.build_impl(inp_topk)
    finally:
        clear_groups()
        mod._get_workspace_buffer = real_get
        torch.cuda.is_available, torch.cuda.current_device = real_avail, real_cur
    return {
        "requested_at_init": requests,
        "workspace_set_at_init": impl._workspace_buffer is not None,
    }


def run_forward_refetch(out_dir: Any) -> dict[str, Any]:
    """An impl holding another device's workspace must fetch q's device's buffer in forward."""
    import torch
    from rtworker import impl_case
    from rtworker.standins import Recorder, clear_groups, set_dcp_rank
    from vllm.config import set_current_vllm_config
    from vllm.v1.attention.backends.mla import flashinfer_mla_sparse as fms

    rec = Recorder()
    rec.install()
    sc = impl_case.Scenario("ws_refetch", 1)  # DCP = 1: isolates the workspace behaviour
    inp = impl_case.make_inputs(sc)
    cache = impl_case.local_cache(inp, sc, 0, inp["seed"])
    cpu_ws = fms._get_workspace_buffer(torch.device("cpu"))
    # a buffer on another device, as an impl constructed there would hold
    meta_ws = torch.zeros(cpu_ws.numel(), dtype=cpu_ws.dtype, device="meta")
    with set_current_vllm_config(impl_case.build_vllm_config(sc)):
        set_dcp_rank(1, 0)
        try:
            impl = impl_case.build_impl(inp["topk"])
            impl._workspace_buffer = meta_ws  # as if built on another device
            md = impl_case.build_metadata(inp, cache, sc)
            err = None
            try:
                with torch.inference_mode():
                    impl.forward_mqa(inp["q"].clone(), cache["kv_cache"], md, None)
            except Exception as exc:
                err = f"{type(exc).__name__}: {exc}"
        finally:
            clear_groups()
    launched = rec.launch_tensors[0] if rec.launch_tensors else {}
    return {
        "error": err,
        "launch_workspace_device": launched.get("workspace_device"),
        "launch_workspace_is_cpu_cache": launched.get("workspace_ptr") == cpu_ws.data_ptr(),
        "impl_workspace_after": None
        if impl._workspace_buffer is None
        else str(impl._workspace_buffer.device),
    }

