"""The ``flashinfer`` backend: the real SM120 sparse-MLA decode kernel (torch + flashinfer).

It calls ``flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla`` the way vLLM's DCP-patched
``FLASHINFER_MLA_SPARSE_SM120`` backend does: BF16 query ``[T, 1, H*N, 576]``, the rank's
fp8_ds_mla cache as ``[pages, 1, 64, 656]`` uint8, ``block_tables`` = the converted physical
top-k ``[T, 1, K]``, ``seq_lens`` = the valid counts, ``sparse_mla_top_k = max_seq_len = K``,
``bmm1_scale`` = softmax scale, ``bmm2_scale = 1``, caller-owned ``out``/``lse``,
``return_lse=True`` (base 2 unless FlashInfer offers ``return_lse_base``), then vLLM's
empty-row masking (``valid_count == 0`` -> out 0, LSE -inf).

:func:`check_flashinfer_backend` refuses, with the reason, unless torch sees SM120 GPUs for every
rank and FlashInfer's function has the keywords this call needs (checked with ``inspect``).
"""

from __future__ import annotations

import inspect
import math
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sm120kit.errors import UserError

if TYPE_CHECKING:
    import torch

REQUIRED_KWARGS = frozenset(
    {
        "query",
        "kv_cache",
        "workspace_buffer",
        "qk_nope_head_dim",
        "kv_lora_rank",
        "qk_rope_head_dim",
        "block_tables",
        "seq_lens",
        "max_seq_len",
        "sparse_mla_top_k",
        "out",
        "bmm1_scale",
        "bmm2_scale",
        "lse",
        "return_lse",
        "kv_scale_format",
    }
)
#: vLLM's default VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE
WORKSPACE_BYTES = 394 * 1024 * 1024


@dataclass
class FlashInferInfo:
    version: str
    has_return_lse_base: bool
    devices: list[str]


def check_signature(fn: Any) -> tuple[set[str], bool]:
    """(missing required keywords, has ``return_lse_base``) of a FlashInfer decode function."""
    params = set(inspect.signature(fn).parameters)
    return set(REQUIRED_KWARGS - params), "return_lse_base" in params


def check_flashinfer_backend(device: str, dcp: int) -> FlashInferInfo:
    """Raise :class:`UserError` unless the flashinfer backend can run ``dcp`` ranks here."""
    hint = "use --backend reference (pure torch) on this machine"
    if device != "cuda":
        raise UserError("--backend flashinfer runs on SM120 GPUs: add --device cuda", hint=hint)
    try:
        import torch
    except ImportError:
        raise UserError("--backend flashinfer needs torch", hint=hint) from None
    if not torch.cuda.is_available():
        raise UserError("--backend flashinfer: torch sees no CUDA GPU", hint=hint)
    count = torch.cuda.device_count()
    if count < dcp:
        raise UserError(
            f"--backend flashinfer: {dcp} DCP ranks need {dcp} GPUs, torch sees {count}",
            hint="lower --dcp or expose more GPUs (CUDA_VISIBLE_DEVICES)",
        )
    names = []
    for i in range(dcp):
        major, minor = torch.cuda.get_device_capability(i)
        if major != 12:
            raise UserError(
                f"--backend flashinfer: GPU {i} ({torch.cuda.get_device_name(i)}) is "
                f"SM{major}{minor}, not SM120",
                hint=hint,
            )
        names.append(torch.cuda.get_device_name(i))
    try:
        import flashinfer
        from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla
    except ImportError as exc:
        raise UserError(
            f"--backend flashinfer: cannot import flashinfer.decode ({exc})",
            hint="pip install flashinfer-python (0.7.2.post1 is what vLLM 0.33 pins)",
        ) from None
    missing, has_base = check_signature(trtllm_batch_decode_with_kv_cache_mla)
    version = str(getattr(flashinfer, "__version__", "?"))
    if missing:
        raise UserError(
            f"FlashInfer {version}: trtllm_batch_decode_with_kv_cache_mla lacks "
            f"{', '.join(sorted(missing))}",
            hint="the SM120 sparse path with seq_lens/LSE needs flashinfer-python >= 0.6.14",
        )
    return FlashInferInfo(version=version, has_return_lse_base=has_base, devices=names)


def autotune_context(path: str | None, leader: bool) -> AbstractContextManager[Any]:
    """FlashInfer autotune writing ``path`` on the leader (vLLM's legacy DCP path: leader-only)."""
    if not path or not leader:
        return nullcontext()
    from flashinfer.autotuner import autotune

    ctx: AbstractContextManager[Any] = autotune(True, cache=path)
    return ctx


class FlashInferDecode:
    """One rank's decode call; the workspace is allocated once on the rank's device."""

    def __init__(self, device: torch.device, *, kv_lora_rank: int, rope_dim: int) -> None:
        import torch
        from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla

        self.fn = trtllm_batch_decode_with_kv_cache_mla
        _, self.has_base = check_signature(self.fn)
        self.device = device
        self.kv_lora_rank = kv_lora_rank
        self.rope_dim = rope_dim
        self.workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.int8, device=device)

    def __call__(
        self,
        q: torch.Tensor,  # [T, H*N, R + rope]
        pages: torch.Tensor,  # uint8 [P, 64, W]
        phys: torch.Tensor,  # int32 [T, K]
        counts: torch.Tensor,  # int32 [T]
        *,
        scale: float,
        scale_format: str,
        lse_base: str,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        t, h, _ = q.shape
        k = phys.shape[1]
        out = torch.empty((t, 1, h, self.kv_lora_rank), dtype=torch.bfloat16, device=q.device)
        lse = torch.empty((t, h), dtype=torch.float32, device=q.device)
        kw: dict[str, Any] = dict(
            query=q.to(torch.bfloat16).unsqueeze(1),
            kv_cache=pages.unsqueeze(1),
            workspace_buffer=self.workspace,
            qk_nope_head_dim=128,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.rope_dim,
            block_tables=phys.unsqueeze(1),
            seq_lens=counts,
            max_seq_len=k,
            sparse_mla_top_k=k,
            out=out,
            bmm1_scale=float(scale),
            bmm2_scale=1.0,
            kv_scale_format=scale_format,
            lse=lse,
            return_lse=True,
        )
        if lse_base == "e" and self.has_base:
            kw["return_lse_base"] = "basee"
        res = self.fn(**kw)
        o, lse_out = res if isinstance(res, tuple) else (res, lse)
        o = o.reshape(t, h, self.kv_lora_rank).float()
        lse_out = lse_out.reshape(t, h).float()
        if lse_base == "e" and not self.has_base:
            lse_out = lse_out * math.log(2.0)
        empty = counts == 0  # vLLM masks rows without local KV itself
        o[empty] = 0.0
        lse_out[empty] = float("-inf")
        return o, lse_out
