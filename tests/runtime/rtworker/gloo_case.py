"""The SM120 impl under a *real* vLLM DCP group: N processes, torch.distributed over gloo.

Each process runs vLLM's own ``init_distributed_environment`` + ``initialize_model_parallel``
(``tensor_model_parallel_size = decode_context_model_parallel_size = N``, backend gloo), builds
the impl (which reads its DCP rank/size from the real group, no stand-in), runs ``forward_mqa``
on its local cache with the same inputs as the single-process stand-in run, then all-gathers
every rank's ``(out, lse)`` through the real DCP ``GroupCoordinator``. The FlashInfer launcher and
Triton index helpers are still the reference stand-ins (no GPU).
"""

from __future__ import annotations

from typing import Any


def run(out_dir: Any, rank: int, world: int, port: int) -> dict[str, Any]:
    import torch
    from rtworker import impl_case
    from rtworker.standins import Recorder
    from vllm.config import set_current_vllm_config
    from vllm.distributed.parallel_state import (
        get_dcp_group,
        init_distributed_environment,
        initialize_model_parallel,
    )

    rec = Recorder()
    rec.install()
    sc = next(s for s in impl_case.SCENARIOS if s.dcp == world and s.interleave == 1)
    inp = impl_case.make_inputs(sc)
    cache = impl_case.local_cache(inp, sc, rank, inp["seed"])
    vc = impl_case.build_vllm_config(sc)
    with set_current_vllm_config(vc):
        init_distributed_environment(
            world_size=world,
            rank=rank,
            distributed_init_method=f"tcp://127.0.0.1:{port}",
            local_rank=rank,
            backend="gloo",
        )
        initialize_model_parallel(
            tensor_model_parallel_size=world,
            decode_context_model_parallel_size=world,
            backend="gloo",
        )
        group = get_dcp_group()
        impl = impl_case.build_impl(inp["topk"])
        md = impl_case.build_metadata(inp, cache, sc)
        with torch.inference_mode():
            out, lse = impl.forward_mqa(inp["q"].clone(), cache["kv_cache"], md, None)
        outs = group.all_gather(out.float().unsqueeze(0).contiguous(), dim=0)
        lses = group.all_gather(lse.unsqueeze(0).contiguous(), dim=0)
    path = out_dir / f"gloo_rank{rank}.pt"
    torch.save({"out": out, "lse": lse, "outs": outs, "lses": lses}, path)
    return {
        "scenario": sc.name,
        "group_world_size": group.world_size,
        "group_rank": group.rank_in_group,
        "impl_dcp": [impl.dcp_world_size, impl.dcp_rank],
        "need_lse": impl.need_to_return_lse_for_decode,
        "file": str(path),
    }
