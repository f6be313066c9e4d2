"""DCP token ownership and warmup-prompt planning (pure Python, no torch).

Notation (vLLM ``ParallelConfig``): ``n`` = ``decode_context_parallel_size`` (the ``dcp``
parameter of the functions below, as everywhere in sm120kit), ``i`` =
``cp_kv_cache_interleave_size`` (default 1, ``i | block_size``), ``B`` = per-rank KV block size.

Ownership, as vLLM's sparse index conversion kernel, V2 slot mapping and
``get_dcp_local_seq_lens`` compute it::

    owner(t)        = (t // i) % n
    local_index(t)  = (t // (n * i)) * i + t % i
    local_len(S, r) = (S // (i*n)) * i + clip(S - (S // (i*n)) * i * n - r * i, 0, i)

The fixed warmup (the patch series' warmup hunk) replaces upstream's 2-token decode prompt with
one full "virtual block" of ``n * B`` tokens when ``n > 1``, so every DCP rank holds exactly ``B``
local KV tokens (one full page) during the autotuned mixed step. :func:`warmup_decode_prompt_len`
is that formula, the one place it is written down.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sm120kit.models.constants import DEFAULT_BLOCK_SIZE
from sm120kit.models.serve_args import ServeArgs

#: upstream ``run_mixed_prefill_decode_warmup``'s ``decode_prompt_len`` (every release 0.24-0.34)
UPSTREAM_DECODE_PROMPT_LEN = 2


def _check(dcp: int, i: int) -> None:
    if dcp < 1:
        raise ValueError(f"dcp size must be >= 1, got {dcp}")
    if i < 1:
        raise ValueError(f"interleave must be >= 1, got {i}")


def owner(t: int, dcp: int, i: int = 1) -> int:
    """DCP rank that stores global token ``t``."""
    _check(dcp, i)
    if t < 0:
        raise ValueError(f"token index must be >= 0, got {t}")
    return (t // i) % dcp


def local_index(t: int, dcp: int, i: int = 1) -> int:
    """Index of global token ``t`` inside its owner's local KV sequence."""
    _check(dcp, i)
    if t < 0:
        raise ValueError(f"token index must be >= 0, got {t}")
    return (t // (dcp * i)) * i + t % i


def global_index(local: int, rank: int, dcp: int, i: int = 1) -> int:
    """Inverse of (:func:`owner`, :func:`local_index`): the global token at ``local`` on ``rank``."""
    _check(dcp, i)
    return (local // i) * (dcp * i) + rank * i + local % i


def local_len(seq_len: int, rank: int, dcp: int, i: int = 1) -> int:
    """Number of the first ``seq_len`` tokens that DCP rank ``rank`` stores."""
    _check(dcp, i)
    if not 0 <= rank < dcp:
        raise ValueError(f"rank {rank} out of range for dcp size {dcp}")
    if seq_len < 0:
        raise ValueError(f"seq_len must be >= 0, got {seq_len}")
    rounds = seq_len // (i * dcp)
    rest = seq_len - rounds * i * dcp - rank * i
    return rounds * i + min(max(rest, 0), i)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def warmup_decode_prompt_len(
    dcp: int,
    block_size: int,
    *,
    max_model_len: int | None = None,
    max_num_batched_tokens: int | None = None,
    decode_query_len: int = 1,
    draft_slots: int = 0,
) -> int:
    """Decode prompt length of the fixed mixed prefill+decode warmup.

    * ``dcp == 1``: 2, upstream's value (DCP=1 behaviour stays bit-identical).
    * ``dcp > 1``: ``L = dcp * block_size`` (one full local block per rank), then clamped so the
      decode step fits, ``L <= max_model_len - decode_query_len - 1``, and so the prompt's prefill
      fits one step with the draft slots of its request (speculative decoding:
      ``max_num_new_slots_for_drafting``, which the synthetic step must leave free as the
      scheduler would), ``L <= max_num_batched_tokens - draft_slots``; never below 2.
    """
    if dcp < 1:
        raise ValueError(f"dcp size must be >= 1, got {dcp}")
    if block_size < 1:
        raise ValueError(f"block size must be >= 1, got {block_size}")
    if dcp == 1:
        return UPSTREAM_DECODE_PROMPT_LEN
    length = dcp * block_size
    if max_model_len is not None:
        length = min(length, max_model_len - decode_query_len - 1)
    if max_num_batched_tokens is not None:
        length = min(length, max_num_batched_tokens - draft_slots)
    return max(length, UPSTREAM_DECODE_PROMPT_LEN)


def min_prompt_len_for_every_rank(dcp: int, interleave: int = 1) -> int:
    """Smallest prompt length that gives every rank at least one local KV token: ``(n-1)*i + 1``."""
    _check(dcp, interleave)
    return (dcp - 1) * interleave + 1


@dataclass
class RankShare:
    """One DCP rank's share of the warmup decode request, for one prompt length."""

    rank: int
    prefill_tokens: int  # local KV tokens after the decode request's prefill step (S = L)
    decode_tokens: int  # local KV tokens at the mixed decode step (S = L + q)
    prefill_blocks: int
    decode_blocks: int
    full_blocks: int  # complete local blocks at the decode step
    zero_local_kv: bool  # no local KV at the decode step
    zero_local_kv_prefill: bool  # no local KV after the prefill step


@dataclass
class PromptPlan:
    prompt_len: int
    seq_len_at_decode: int
    ranks: list[RankShare]

    @property
    def zero_local_kv_ranks(self) -> list[int]:
        return [r.rank for r in self.ranks if r.zero_local_kv]

    @property
    def zero_local_kv_prefill_ranks(self) -> list[int]:
        return [r.rank for r in self.ranks if r.zero_local_kv_prefill]

    @property
    def symmetric(self) -> bool:
        """Every rank holds the same number of local KV tokens at the decode step."""
        return len({r.decode_tokens for r in self.ranks}) == 1

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["zero_local_kv_ranks"] = self.zero_local_kv_ranks
        d["zero_local_kv_prefill_ranks"] = self.zero_local_kv_prefill_ranks
        d["symmetric"] = self.symmetric
        return d


def plan_prompt(
    prompt_len: int, *, dcp: int, block_size: int, interleave: int = 1, decode_query_len: int = 1
) -> PromptPlan:
    """Per-rank local KV of a decode request with ``prompt_len`` tokens and ``q`` decode tokens."""
    seq = prompt_len + decode_query_len
    ranks = []
    for r in range(dcp):
        pre = local_len(prompt_len, r, dcp, interleave)
        dec = local_len(seq, r, dcp, interleave)
        ranks.append(
            RankShare(
                rank=r,
                prefill_tokens=pre,
                decode_tokens=dec,
                prefill_blocks=cdiv(pre, block_size),
                decode_blocks=cdiv(dec, block_size),
                full_blocks=dec // block_size,
                zero_local_kv=dec == 0,
                zero_local_kv_prefill=pre == 0,
            )
        )
    return PromptPlan(prompt_len=prompt_len, seq_len_at_decode=seq, ranks=ranks)


@dataclass
class WarmupPlan:
    """The fixed and the unpatched warmup decode shapes of one DCP configuration."""

    dcp: int
    block_size: int
    interleave: int
    decode_query_len: int  # 1 + MTP draft tokens
    max_num_seqs: int | None
    max_model_len: int | None
    max_num_batched_tokens: int | None
    fixed: PromptPlan
    unpatched: PromptPlan
    notes: list[str] = field(default_factory=list)

    @property
    def fixed_prompt_len(self) -> int:
        return self.fixed.prompt_len

    @property
    def unpatched_prompt_len(self) -> int:
        return self.unpatched.prompt_len

    @property
    def status(self) -> str:
        """``ok`` when the fixed plan leaves no rank without local KV, ``warn`` otherwise."""
        return "warn" if self.fixed.zero_local_kv_ranks else "ok"

    def to_dict(self) -> dict[str, Any]:
        return {
            "dcp": self.dcp,
            "block_size": self.block_size,
            "interleave": self.interleave,
            "decode_query_len": self.decode_query_len,
            "max_num_seqs": self.max_num_seqs,
            "max_model_len": self.max_model_len,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "fixed_prompt_len": self.fixed_prompt_len,
            "unpatched_prompt_len": self.unpatched_prompt_len,
            "status": self.status,
            "fixed": self.fixed.to_dict(),
            "unpatched": self.unpatched.to_dict(),
            "notes": list(self.notes),
        }


def plan_warmup(
    dcp: int,
    block_size: int = DEFAULT_BLOCK_SIZE,
    *,
    interleave: int = 1,
    mtp: int = 0,
    max_num_seqs: int | None = None,
    max_model_len: int | None = None,
    max_num_batched_tokens: int | None = None,
) -> WarmupPlan:
    """Plan the fixed (``N*B`` clamped) and unpatched (2-token) warmup decode prompts.

    Raises ``ValueError`` for configurations vLLM itself rejects (``block_size % interleave``).
    """
    _check(dcp, interleave)
    if block_size < 1:
        raise ValueError(f"block size must be >= 1, got {block_size}")
    if interleave > block_size or block_size % interleave:
        raise ValueError(
            f"interleave {interleave} must divide the block size {block_size} "
            "(vLLM validate_block_size)"
        )
    if mtp < 0:
        raise ValueError(f"mtp must be >= 0, got {mtp}")
    q = 1 + mtp
    fixed_len = warmup_decode_prompt_len(
        dcp,
        block_size,
        max_model_len=max_model_len,
        max_num_batched_tokens=max_num_batched_tokens,
        decode_query_len=q,
    )
    kw = {"dcp": dcp, "block_size": block_size, "interleave": interleave, "decode_query_len": q}
    fixed = plan_prompt(fixed_len, **kw)
    unpatched = plan_prompt(UPSTREAM_DECODE_PROMPT_LEN, **kw)
    notes: list[str] = []
    if dcp > 1 and fixed_len < dcp * block_size:
        notes.append(
            f"fixed prompt clamped from {dcp * block_size} to {fixed_len} by "
            "max-model-len/max-num-batched-tokens: not every rank holds a full block"
        )
    if fixed.zero_local_kv_ranks:
        notes.append(f"fixed plan leaves ranks {fixed.zero_local_kv_ranks} without local KV")
    if unpatched.zero_local_kv_ranks:
        notes.append(
            f"unpatched 2-token prompt leaves ranks {unpatched.zero_local_kv_ranks} "
            "without local KV at the decode step"
        )
    if max_num_seqs is not None and max_num_seqs < 2:
        notes.append("max-num-seqs < 2: vLLM skips the mixed prefill+decode warmup")
    if mtp and interleave > 1:
        notes.append(
            "MTP with interleave > 1 needs supports_mtp_with_cp_non_trivial_interleave_size"
        )
    return WarmupPlan(
        dcp=dcp,
        block_size=block_size,
        interleave=interleave,
        decode_query_len=q,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        max_num_batched_tokens=max_num_batched_tokens,
        fixed=fixed,
        unpatched=unpatched,
        notes=notes,
    )


def plan_for(serve: ServeArgs, vllm_version: str | None = None) -> WarmupPlan:
    """:func:`plan_warmup` for a launch line (after :meth:`ServeArgs.override` applied our
    command's options): DCP, effective block size, interleave, speculative tokens and the
    clamps, all read from the one ``vllm serve`` model."""
    return plan_warmup(
        serve.dcp,
        serve.effective_block_size,
        interleave=serve.interleave_for(vllm_version),
        mtp=max(0, serve.num_speculative_tokens),
        max_num_seqs=serve.max_num_seqs,
        max_model_len=serve.max_model_len,
        max_num_batched_tokens=serve.max_num_batched_tokens,
    )
