"""The KV interleave settled *after* the SM120 impl is built, as vLLM's engine does it.

vLLM builds the attention impl in ``load_model``; the KV interleave
(``parallel_config.cp_kv_cache_interleave_size``) is settled afterwards by
``VllmConfig.adjust_dcp_kv_cache_interleave_size`` (0.29-0.32: each worker, from
``ensure_kv_transfer_initialized`` in ``initialize_from_config``; 0.33+: the engine core before
profiling, then ``set_kv_cache_layout``). With a KV connector and DCP it becomes the local block
size (NIXL P/D), and the deprecated ``--dcp-kv-cache-interleave-size`` overrides it. The
attention metadata builder is created after that (``initialize_kv_cache``) and copies the final
value into every ``FlashInferMLASparseMetadata``; the KV writer lays out tokens with it.

Here: build the patched impl under a config whose interleave is still 1, call the release's own
``adjust_dcp_kv_cache_interleave_size`` with real ``KVCacheGroupSpec``/``KVCacheConfig`` objects,
lay the KV out with the final interleave and run ``forward_mqa`` with metadata carrying it. The
test compares the conversion and the valid counts with the final value.

The MTP case: a speculative config with interleave 64 must pass the release's own
``check_attention_cp_compatibility``, and a batch of 1 + k tokens per request is converted per
token. Stand-ins (beyond ``standins``): the model layer that ``check_attention_cp_compatibility``
finds in the forward context (it only reads ``.impl``), and ``speculative_config`` (a real one
needs the draft model's HF config; the check reads only ``is not None``).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from rtworker import impl_case
from rtworker.standins import Recorder, clear_groups, set_dcp_rank


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    dcp: int
    connector: str
    dcp_flag: int = 1  # the deprecated --dcp-kv-cache-interleave-size
    block: int = 64
    req_of_token: tuple[int, ...] = (0, 1, 2, 0, 1, 2)


CASES = [
    Case("nixl_pd_dcp4", 4, "NixlConnector"),
    Case("deprecated_flag_dcp2", 2, "LMCacheConnectorV1", dcp_flag=16),
]


def _config(case: Case) -> Any:
    from vllm.config import CacheConfig, DeviceConfig, KVTransferConfig, ParallelConfig, VllmConfig

    pc = ParallelConfig(tensor_parallel_size=case.dcp, decode_context_parallel_size=case.dcp,
                        cp_kv_cache_interleave_size=1,
                        dcp_kv_cache_interleave_size=case.dcp_flag)
    return VllmConfig(
        parallel_config=pc,
        cache_config=CacheConfig(block_size=case.block, cache_dtype="fp8_ds_mla"),
        device_config=DeviceConfig(device="cpu"),
        kv_transfer_config=KVTransferConfig(kv_connector=case.connector, kv_role="kv_both"),
    )


def _adjust(vc: Any, block: int) -> None:
    """Call the release's ``adjust_dcp_kv_cache_interleave_size`` with what the engine passes."""
    import torch
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, MLAAttentionSpec

    spec_params = inspect.signature(MLAAttentionSpec).parameters
    kw: dict[str, Any] = {"block_size": block, "num_kv_heads": 1, "head_size": 656,
                          "dtype": torch.uint8}
    if "cache_dtype_str" in spec_params:
        kw["cache_dtype_str"] = "fp8_ds_mla"
    groups = [KVCacheGroupSpec(["model.layers.0.self_attn.attn"], MLAAttentionSpec(**kw))]
    param = next(iter(inspect.signature(vc.adjust_dcp_kv_cache_interleave_size).parameters))
    if param == "kv_cache_config":  # 0.29-0.32: the worker's KVCacheConfig
        arg: Any = KVCacheConfig(num_blocks=16, kv_cache_tensors=[], kv_cache_groups=groups)
    else:  # 0.33+: the engine core's global groups
        arg = groups
    vc.adjust_dcp_kv_cache_interleave_size(arg)


def run_case(case: Case, rec: Recorder, out_dir: Any, *, mtp: bool = False) -> dict[str, Any]:
    import torch
    from vllm.config import set_current_vllm_config

    vc = _config(case)
    before = vc.parallel_config.cp_kv_cache_interleave_size
    impls = []
    with set_current_vllm_config(vc):  # load_model: every rank builds its impl
        for rank in range(case.dcp):
            set_dcp_rank(case.dcp, rank)
            try:
                impls.append(impl_case.build_impl(torch.full((6, impl_case.TOPK), -1, dtype=torch.int32)))
            finally:
                clear_groups()
    _adjust(vc, case.block)
    final = vc.parallel_config.cp_kv_cache_interleave_size
    sc = impl_case.Scenario(case.name, case.dcp, interleave=final, block=case.block,
                            req_of_token=case.req_of_token)
    inp = impl_case.make_inputs(sc)
    ranks: list[dict[str, Any]] = []
    saved: dict[str, Any] = {"inputs": inp, "ranks": []}
    for rank, impl in enumerate(impls):
        impl.topk_indices_buffer.copy_(inp["topk"])
        cache = impl_case.local_cache(inp, sc, rank, inp["seed"])
        meta = impl_case.build_metadata(inp, cache, sc)
        rec.reset()
        with set_current_vllm_config(vc), torch.inference_mode():
            out, lse = impl.forward_mqa(inp["q"].clone(), cache["kv_cache"], meta, None)
        saved["ranks"].append({"out": out.clone(), "lse": None if lse is None else lse.clone(),
                               "launch": [dict(x) for x in rec.launch_tensors]})
        ranks.append({"rank": rank, "conversions": list(rec.conversions)})
    path = out_dir / f"interleave_{case.name}.pt"
    torch.save(saved, path)
    res: dict[str, Any] = {"case": dataclasses.asdict(case), "interleave_at_build": before,
                           "interleave_final": final, "file": str(path), "ranks": ranks}
    if mtp:
        res["mtp_check"] = _mtp_check(vc, impls[0])
    return res


def _mtp_check(vc: Any, impl: Any) -> str:
    """The release's own start-up check with a speculative config and this interleave."""
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    from vllm.v1.worker import cp_utils

    class LayerStandIn(AttentionLayerBase):  # the model layer: the check reads only .impl
        def __init__(self, impl: Any) -> None:
            self.impl = impl

        def get_attn_backend(self) -> Any:
            return None

        def get_kv_cache_spec(self, vllm_config: Any) -> Any:
            return None

    object.__setattr__(vc, "speculative_config", object())  # the check reads `is not None`
    vc.compilation_config.static_forward_context["model.layers.0.self_attn.attn"] = (
        LayerStandIn(impl))
    try:
        cp_utils.check_attention_cp_compatibility(vc)
    except AssertionError as exc:
        return f"AssertionError: {exc}"
    return "ok"


def run_all(out_dir: Any) -> dict[str, Any]:
    rec = Recorder()
    rec.install()
    res = {c.name: run_case(c, rec, out_dir) for c in CASES}
    mtp = Case("nixl_pd_dcp4_mtp1", 4, "NixlConnector", req_of_token=(0, 0, 1, 1, 2, 2))
    res[mtp.name] = run_case(mtp, rec, out_dir, mtp=True)
    return res
