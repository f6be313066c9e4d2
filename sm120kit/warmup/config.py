"""Run configuration of ``sm120kit warmup run`` (pure Python: the CLI and the parent process
never import torch for a reference run on CPU)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

from sm120kit.errors import UserError
from sm120kit.models import dcp as P
from sm120kit.models.constants import DEFAULT_BLOCK_SIZE
from sm120kit.models.serve_args import ServeArgs
from sm120kit.models.timeouts import DEFAULT_STALL_TIMEOUT_S

PHASES: tuple[str, ...] = ("init", "kv-build", "convert", "attend", "merge")
#: the collective each phase runs (what ``--inject-stall RANK:PHASE`` stops a rank in front of)
PHASE_COLLECTIVE: dict[str, str] = {
    "init": "barrier",
    "kv-build": "all_gather(local_kv_tokens)",
    "convert": "all_gather(valid_counts)",
    "attend": "all_gather(q heads)",
    "merge": "all_gather(lse)",
}
BACKENDS = ("reference", "flashinfer")
MERGES = ("ag_rs", "a2a", "both")
#: pass threshold of the fp32 reference backend (max abs error vs single-rank attention)
REFERENCE_THRESHOLD = 1e-4
#: default threshold of the flashinfer backend: BF16 query and BF16 output (2^-8 relative)
FLASHINFER_THRESHOLD = 3e-2


@dataclass
class RunConfig:
    dcp: int
    backend: str = "reference"
    device: str = "cpu"
    plan: str = "fixed"  # fixed | unpatched
    heads_per_rank: int = 8
    topk: int = 2048
    kv_lora_rank: int = 512
    rope_dim: int = 64
    interleave: int = 1
    block_size: int = DEFAULT_BLOCK_SIZE
    batch: int = 1
    mtp: int = 0
    seq_len: int | None = None  # KV tokens per request at the decode step; None = from the plan
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    lse_base: str = "2"
    merge: str = "both"
    scale_format: str = "arbitrary_fp32"
    stall_timeout: float = DEFAULT_STALL_TIMEOUT_S
    inject_stall: tuple[int, str] | None = None
    bundle_dir: str | None = None
    bundle_deadline: float = 30.0
    autotune_cache: str | None = None
    threshold: float | None = None
    seed: int = 0
    softmax_scale: float | None = None
    dist_backend: str = "auto"  # auto (nccl on cuda, gloo on cpu) | nccl | gloo

    # ------------------------------------------------------------------ derived
    @property
    def decode_query_len(self) -> int:
        return 1 + self.mtp

    @property
    def prompt_len(self) -> int:
        if self.seq_len is not None:
            return self.seq_len - self.decode_query_len
        if self.plan == "unpatched":
            return P.UPSTREAM_DECODE_PROMPT_LEN
        return P.warmup_decode_prompt_len(
            self.dcp,
            self.block_size,
            max_model_len=self.max_model_len,
            max_num_batched_tokens=self.max_num_batched_tokens,
            decode_query_len=self.decode_query_len,
        )

    @property
    def kv_len(self) -> int:
        """KV tokens per request at the decode step (the decode tokens' KV is written first)."""
        return self.prompt_len + self.decode_query_len

    @property
    def num_tokens(self) -> int:
        return self.batch * self.decode_query_len

    @property
    def total_heads(self) -> int:
        return self.heads_per_rank * self.dcp

    @property
    def scale(self) -> float:
        if self.softmax_scale is not None:
            return self.softmax_scale
        # DeepSeek-V3.2 / GLM-5 geometry: qk_nope 128 + rope 64 (or 192 without rope)
        return 1.0 / math.sqrt(128 + (self.rope_dim or 64))

    @property
    def pass_threshold(self) -> float:
        if self.threshold is not None:
            return self.threshold
        return FLASHINFER_THRESHOLD if self.backend == "flashinfer" else REFERENCE_THRESHOLD

    @property
    def resolved_dist_backend(self) -> str:
        """gloo on CPU; on CUDA nccl unless gloo was asked for (several ranks on one GPU)."""
        if self.device != "cuda":
            return "gloo"
        return "nccl" if self.dist_backend == "auto" else self.dist_backend

    @property
    def merges(self) -> list[str]:
        return ["ag_rs", "a2a"] if self.merge == "both" else [self.merge]

    def warmup_plan(self) -> P.WarmupPlan:
        return P.plan_warmup(
            self.dcp,
            self.block_size,
            interleave=self.interleave,
            mtp=self.mtp,
            max_model_len=self.max_model_len,
            max_num_batched_tokens=self.max_num_batched_tokens,
        )

    def validate(self) -> None:
        """Reject what vLLM or the kernels would reject, as one-line UserErrors."""
        self._validate_choices()
        self._validate_model()
        self._validate_workload()

    def _validate_choices(self) -> None:
        """The DCP size and the named choices (backend, device, plan, merge, LSE base)."""
        if self.dcp < 1 or self.dcp > 64:
            raise UserError(f"--dcp {self.dcp} out of range", hint="use 1..64 ranks")
        if self.backend not in BACKENDS:
            raise UserError(f"unknown backend {self.backend!r}", hint=f"one of {BACKENDS}")
        if self.device not in ("cpu", "cuda"):
            raise UserError(f"unknown device {self.device!r}", hint="cpu or cuda")
        if self.dist_backend not in ("auto", "nccl", "gloo"):
            raise UserError(f"unknown dist backend {self.dist_backend!r}", hint="auto, nccl or gloo")
        if self.dist_backend == "nccl" and self.device != "cuda":
            raise UserError("--dist-backend nccl needs --device cuda")
        if self.plan not in ("fixed", "unpatched"):
            raise UserError(f"unknown plan {self.plan!r}", hint="fixed or unpatched")
        if self.merge not in MERGES:
            raise UserError(f"unknown merge {self.merge!r}", hint=f"one of {MERGES}")
        if self.lse_base not in ("2", "e"):
            raise UserError(f"--lse-base {self.lse_base!r}", hint="2 or e")
        if self.autotune_cache and self.backend != "flashinfer":
            raise UserError(
                "--autotune-cache tunes the FlashInfer kernel", hint="add --backend flashinfer"
            )

    def _validate_model(self) -> None:
        """Heads, latent and rope sizes, scale format and the KV page the kernel reads."""
        if self.heads_per_rank < 1:
            raise UserError("--heads-per-rank must be >= 1")
        if self.total_heads > 128:
            raise UserError(
                f"{self.total_heads} query heads after the DCP gather; the SM120 kernel takes <= 128",
                hint="lower --heads-per-rank or --dcp",
            )
        if self.kv_lora_rank < 128 or self.kv_lora_rank % 128:
            raise UserError("--kv-lora-rank must be a multiple of 128", hint="GLM-5/DSv3.2: 512")
        if self.rope_dim < 0:
            raise UserError("--rope-dim must be >= 0")
        if self.rope_dim == 0 and self.scale_format != "arbitrary_fp32":
            raise UserError(
                "NoPE rows (--rope-dim 0) use arbitrary_fp32 scales",
                hint="drop --scale-format or use arbitrary_fp32",
            )
        if self.block_size < 64 or self.block_size % 64:
            raise UserError(
                f"--block-size {self.block_size}: the SM120 kernel reads 64-row pages",
                hint="use a multiple of 64 (vLLM's SM120 default is 64)",
            )
        if self.interleave < 1 or self.block_size % self.interleave:
            raise UserError(
                f"--interleave {self.interleave} must divide --block-size {self.block_size}",
                hint="vLLM requires block_size % cp_kv_cache_interleave_size == 0",
            )

    def _validate_workload(self) -> None:
        """Top-k, batch, MTP, sequence length, the stall deadline and the injected stall."""
        if self.topk < 128 or self.topk % 128:
            raise UserError(
                f"--topk {self.topk} must be a multiple of 128",
                hint="vLLM's conversion kernel tiles 128 columns; GLM-5/DSv3.2 use 2048",
            )
        if self.batch < 1 or self.mtp < 0:
            raise UserError("--batch must be >= 1 and --mtp >= 0")
        if self.seq_len is not None and self.seq_len < self.decode_query_len:
            raise UserError(
                f"--seq-len {self.seq_len} is shorter than the {self.decode_query_len} decode tokens"
            )
        if self.stall_timeout <= 0:
            raise UserError("--stall-timeout must be > 0")
        if self.inject_stall is not None:
            r, ph = self.inject_stall
            if not 0 <= r < self.dcp:
                raise UserError(f"--inject-stall rank {r} not in 0..{self.dcp - 1}")
            if ph not in PHASES:
                raise UserError(f"--inject-stall phase {ph!r}", hint=f"one of {', '.join(PHASES)}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["inject_stall"] = (
            None
            if self.inject_stall is None
            else {"rank": self.inject_stall[0], "phase": self.inject_stall[1]}
        )
        d.update(
            prompt_len=self.prompt_len,
            kv_len=self.kv_len,
            num_tokens=self.num_tokens,
            total_heads=self.total_heads,
            softmax_scale=self.scale,
            pass_threshold=self.pass_threshold,
        )
        return d

    def to_json(self) -> str:
        d = asdict(self)
        return json.dumps(d)

    @classmethod
    def from_serve(cls, serve: ServeArgs, **run: Any) -> RunConfig:
        """The run's decode shape read from the one ``vllm serve`` model (``serve`` already has
        our command's ``--dcp``/``--interleave``/... applied by ``ServeArgs.override``); ``run``
        holds the options only a warmup run has (backend, device, heads, ...)."""
        return cls(
            dcp=serve.dcp,
            interleave=serve.interleave,
            block_size=serve.effective_block_size,
            mtp=max(0, serve.num_speculative_tokens),
            max_model_len=serve.max_model_len,
            max_num_batched_tokens=serve.max_num_batched_tokens,
            **run,
        )

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        d = json.loads(text)
        if d.get("inject_stall") is not None:
            d["inject_stall"] = tuple(d["inject_stall"])
        return cls(**d)


def parse_inject_stall(spec: str | None) -> tuple[int, str] | None:
    """``RANK`` or ``RANK:PHASE`` (default phase: merge)."""
    if not spec:
        return None
    rank_s, _, phase = spec.partition(":")
    try:
        rank = int(rank_s)
    except ValueError:
        raise UserError(
            f"--inject-stall {spec!r}: rank is not an integer", hint="e.g. --inject-stall 1:merge"
        ) from None
    phase = phase or "merge"
    if phase not in PHASES:
        raise UserError(f"--inject-stall phase {phase!r}", hint=f"one of {', '.join(PHASES)}")
    return rank, phase
