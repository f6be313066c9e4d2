"""The stand-ins for what cannot exist on a CPU-only machine, and nothing else.

* ``DCP/TP group``: ``AttentionImplBase.__new__`` reads only ``world_size`` and
  ``rank_in_group`` of ``parallel_state._DCP`` (through ``get_dcp_world_size_and_rank``) and
  ``SparseMLACommonImpl.__init__`` only ``world_size`` of ``_TP``. A real ``GroupCoordinator``
  needs one process per rank, each importing vLLM; the impl does no collective in
  ``forward_mqa`` (the common MLA layer does the query gather and LSE combine), so a stand-in
  carrying the values a real group of ``tensor_parallel_size = dcp = N`` reports for rank r
  (DCP groups are consecutive TP ranks: dcp_rank = tp_rank % N) is enough, and lets one process
  play every rank.
* ``has_flashinfer_sparse_mla_sm120``: FlashInfer's SM120 kernels need CUDA; the check is a
  symbol probe of an installed FlashInfer.
* the FlashInfer launcher ``vllm.utils.flashinfer.flashinfer_trtllm_batch_decode_with_kv_cache_mla``
  (the symbol the SM120 impl imports at call time) -> ``sm120kit.warmup.reference.
  trtllm_batch_decode_with_kv_cache_mla_ref`` (FlashInfer 0.7.2.post1's keyword signature,
  base-2 LSE), recording every call;
* the Triton index helpers ``triton_filter_and_convert_dcp_index`` /
  ``triton_convert_req_index_to_global_index`` as named in the SM120 module -> sm120kit's torch
  drop-ins. Each call is first bound against the signature of *this release's* real vLLM
  function, so a call the real helper would reject fails here too.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

SM120_MOD = "vllm.v1.attention.backends.mla.flashinfer_mla_sparse_sm120"


class GroupStandIn:
    """``world_size`` / ``rank_in_group`` of a vLLM ``GroupCoordinator``."""

    def __init__(self, world_size: int, rank_in_group: int) -> None:
        self.world_size = world_size
        self.rank_in_group = rank_in_group


def set_dcp_rank(dcp: int, rank: int) -> None:
    import vllm.distributed.parallel_state as ps

    ps._DCP = GroupStandIn(dcp, rank)  # type: ignore[assignment]
    ps._TP = GroupStandIn(dcp, rank)  # type: ignore[assignment]


def clear_groups() -> None:
    import vllm.distributed.parallel_state as ps

    ps._DCP = None
    ps._TP = None


def _summ(v: Any) -> Any:
    import torch

    if isinstance(v, torch.Tensor):
        return {"shape": list(v.shape), "dtype": str(v.dtype), "device": str(v.device)}
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    return repr(v)


class Recorder:
    """Swaps the GPU-bound callables and records how the impl calls them."""

    def __init__(self) -> None:
        #: emulate FlashInfer <= 0.7.0.post1, which leaves rows without keys undefined: write
        #: junk into them, so only the backend's own masking can produce out 0 / LSE -inf
        self.poison_empty_rows = False
        self.launches: list[dict[str, Any]] = []
        self.conversions: list[dict[str, Any]] = []
        self.launch_tensors: list[dict[str, Any]] = []

    def install(self) -> None:
        import importlib

        import vllm.utils.flashinfer as vfi

        from sm120kit.warmup import reference as ref

        mod = importlib.import_module(SM120_MOD)
        vfi.has_flashinfer_sparse_mla_sm120 = lambda: True  # type: ignore[assignment]

        def launcher(*args: Any, **kwargs: Any) -> Any:
            if args:
                raise AssertionError(f"SM120 impl passed {len(args)} positional args to FlashInfer")
            self.launches.append({k: _summ(v) for k, v in kwargs.items()})
            self.launch_tensors.append(
                {
                    "seq_lens": None
                    if kwargs.get("seq_lens") is None
                    else kwargs["seq_lens"].clone(),
                    "block_tables": kwargs["block_tables"].clone(),
                    "workspace_ptr": kwargs["workspace_buffer"].data_ptr(),
                    "workspace_device": str(kwargs["workspace_buffer"].device),
                }
            )
            result = ref.trtllm_batch_decode_with_kv_cache_mla_ref(**kwargs)
            seq_lens = kwargs.get("seq_lens")
            if self.poison_empty_rows and seq_lens is not None:
                empty = (seq_lens == 0).view(-1)
                out, lse = result if isinstance(result, tuple) else (result, None)
                out.view(empty.numel(), -1)[empty] = 7.0
                if lse is not None:
                    lse.view(empty.numel(), -1)[empty] = 3.0
            return result

        vfi.flashinfer_trtllm_batch_decode_with_kv_cache_mla = launcher  # type: ignore[assignment]

        def bound(name: str, real: Callable[..., Any], impl: Callable[..., Any]) -> Callable[..., Any]:
            sig = inspect.signature(real)

            def call(*args: Any, **kwargs: Any) -> Any:
                sig.bind(*args, **kwargs)  # TypeError if the real helper would reject the call
                self.conversions.append(
                    {"fn": name, "kwargs": {k: _summ(v) for k, v in kwargs.items()}}
                )
                return impl(*args, **kwargs)

            return call

        if hasattr(mod, "triton_filter_and_convert_dcp_index"):
            mod.triton_filter_and_convert_dcp_index = bound(
                "triton_filter_and_convert_dcp_index",
                mod.triton_filter_and_convert_dcp_index,
                ref.triton_filter_and_convert_dcp_index_ref,
            )
        mod.triton_convert_req_index_to_global_index = bound(
            "triton_convert_req_index_to_global_index",
            mod.triton_convert_req_index_to_global_index,
            ref.triton_convert_req_index_to_global_index_ref,
        )

    def reset(self) -> None:
        self.launches.clear()
        self.conversions.clear()
        self.launch_tensors.clear()
