"""The DCP collectives of the decode step with real ``torch.distributed`` calls (gloo or NCCL).

* :func:`query_gather`: vLLM ``MLADCPManager.query_gather`` = ``all_gather(q, dim=1)``;
* :func:`merge_ag_rs`: vLLM ``cp_lse_ag_out_rs``: all-gather the LSE, correct the local partial
  output, reduce-scatter along heads (``GroupCoordinator.reduce_scatter(dim=1)``);
* :func:`merge_a2a`: vLLM ``dcp_a2a_lse_reduce``: pack each head chunk's output and LSE into one
  send buffer ``[N, T, H, D + 1]`` (fp32: the LSE takes one slot), one ``all_to_all_single``,
  then the exact LSE-weighted combine.

``before`` is called with the collective's name right before each call: the runner reports
progress there and ``--inject-stall`` stops a rank there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sm120kit.warmup import reference as R

if TYPE_CHECKING:
    import torch

Hook = Callable[[str], None]


def _noop(name: str) -> None:
    return None


def _host_staged() -> bool:
    """gloo ranks computing on a GPU: collectives run on host copies (gloo has no CUDA
    reduce-scatter / all-to-all). This is how several DCP ranks share one GPU, where NCCL refuses
    two ranks on one device."""
    import torch.distributed as dist

    return dist.is_initialized() and dist.get_backend() == "gloo"


def _run(fn: Callable[..., object], out: torch.Tensor, inp: torch.Tensor, **kw: object) -> None:
    """``fn(out, inp, **kw)``, through host buffers when :func:`_host_staged` and on CUDA."""
    if out.device.type == "cpu" or not _host_staged():
        fn(out, inp, **kw)
        return
    host_out = out.new_empty(out.shape, device="cpu")
    fn(host_out, inp.cpu(), **kw)
    out.copy_(host_out)


def all_reduce_sum(x: torch.Tensor) -> None:
    """In-place SUM all-reduce (host-staged for gloo on CUDA)."""
    import torch.distributed as dist

    if x.device.type == "cpu" or not _host_staged():
        dist.all_reduce(x)
        return
    h = x.cpu()
    dist.all_reduce(h)
    x.copy_(h)


def all_gather_cat(x: torch.Tensor, dcp: int, *, before: Hook = _noop, name: str) -> torch.Tensor:
    """``[N, *x.shape]`` from every rank's ``x`` (``all_gather_into_tensor``)."""
    import torch
    import torch.distributed as dist

    flat = torch.empty(dcp * x.numel(), dtype=x.dtype, device=x.device)
    # torch >= 2.12 names it all_gather_single (all_gather_into_tensor is its deprecated alias)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    before(name)
    _run(gather, flat, x.contiguous().view(-1))
    return flat.view(dcp, *x.shape)


def query_gather(q_local: torch.Tensor, dcp: int, *, before: Hook = _noop) -> torch.Tensor:
    """``[T, H, D]`` per rank -> ``[T, H * N, D]`` on every rank, rank-major heads."""
    g = all_gather_cat(q_local, dcp, before=before, name="all_gather(q heads)")  # [N, T, H, D]
    return g.permute(1, 0, 2, 3).reshape(q_local.shape[0], -1, q_local.shape[2])


def merge_ag_rs(
    out: torch.Tensor,
    lse: torch.Tensor,
    rank: int,
    dcp: int,
    base: str,
    *,
    before: Hook = _noop,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Partial ``out [T, H*N, D]``, ``lse [T, H*N]`` -> this rank's merged ``[T, H, D]``, ``[T, H]``."""
    import torch
    import torch.distributed as dist

    lses = all_gather_cat(lse.float(), dcp, before=before, name="all_gather(lse)")
    corrected, glse = R.correct_attn_out(out, lses, rank, base)
    # reduce_scatter along dim 1, as GroupCoordinator does it: move heads to the front
    moved = corrected.movedim(1, 0).contiguous()  # [H*N, T, D]
    hp = moved.shape[0] // dcp
    res = torch.empty((hp, *moved.shape[1:]), dtype=moved.dtype, device=moved.device)
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    before("reduce_scatter(out)")
    _run(scatter, res, moved, op=dist.ReduceOp.SUM)
    return res.movedim(0, 1).contiguous(), glse[:, rank * hp : (rank + 1) * hp]


def merge_a2a(
    out: torch.Tensor,
    lse: torch.Tensor,
    rank: int,
    dcp: int,
    base: str,
    *,
    before: Hook = _noop,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Same inputs and result as :func:`merge_ag_rs`, through one all-to-all."""
    import torch
    import torch.distributed as dist

    t, ht, d = out.shape
    hp = ht // dcp
    send = torch.empty((dcp, t, hp, d + 1), dtype=torch.float32, device=out.device)
    send[..., :d] = out.float().reshape(t, dcp, hp, d).permute(1, 0, 2, 3)
    send[..., d] = lse.float().reshape(t, dcp, hp).permute(1, 0, 2)
    recv = torch.empty_like(send)
    before("all_to_all(out+lse)")
    _run(dist.all_to_all_single, recv.view(-1), send.view(-1))
    return R.weighted_combine(recv[..., :d], recv[..., d], base)


MERGE_FUNCS = {"ag_rs": merge_ag_rs, "a2a": merge_a2a}
