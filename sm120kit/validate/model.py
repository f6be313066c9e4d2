"""Typed results of ``sm120kit validate``: verdicts, thresholds, per-check numbers.

All logprob figures are natural-log units (nats), as OpenAI-compatible servers return them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal

from sm120kit.errors import ExitCode


class Verdict(StrEnum):
    PASS = "pass"
    SUSPICIOUS = "suspicious"
    FAIL = "fail"

    @property
    def exit_code(self) -> int:
        return {Verdict.PASS: ExitCode.OK, Verdict.SUSPICIOUS: ExitCode.FINDINGS}.get(
            self, ExitCode.NUMERICAL_FAILURE
        )


_ORDER = {Verdict.PASS: 0, Verdict.SUSPICIOUS: 1, Verdict.FAIL: 2}


def worst(verdicts: list[Verdict]) -> Verdict:
    return max(verdicts, key=_ORDER.__getitem__, default=Verdict.PASS)


CheckKind = Literal["prompt", "needle"]


@dataclass(frozen=True)
class Thresholds:
    """Where BF16/FP8 noise ends and a systematic error begins (nats, chosen tokens only).

    DCP changes only the order of the attention reductions: the GEMMs are the same (DCP reuses the
    TP group, weights are not resharded), the KV is quantized the same way, and every rank's
    partial softmax is merged with exact LSE weights. A correct DCP server therefore differs from
    its DCP-1 twin by rounding alone: about one BF16 unit (2**-8 relative) in each attention
    output, which through the layers moves a chosen-token logprob by hundredths of a nat on
    average and a few tenths at most. A wrong LSE base re-weights every rank's share of every
    head in every layer, and a wrong rank mapping reads another token's KV: both move logprobs by
    tenths to whole nats on average and make greedy text leave the reference where the reference
    was sure (a large top-1/top-2 margin), which rounding cannot do. A greedy flip where the
    reference's top two tokens were within ``tie_margin`` is a near-tie and counted as noise.
    The mean is judged over ``mean_min_positions`` compared tokens or more, the max always.
    """

    pass_mean: float = 0.02
    pass_max: float = 0.25
    fail_mean: float = 0.05
    fail_max: float = 1.0
    tie_margin: float = 0.5
    sure_margin: float = 2.0
    mean_min_positions: int = 8  # a mean over fewer compared tokens is not judged

    def widened(self, floor: NoiseFloor | None) -> Thresholds:
        """These lines, raised (never lowered) to 3x the box's own measured noise floor."""
        if floor is None or floor.mean_abs is None or floor.max_abs is None:
            return self
        pm = max(self.pass_mean, 3 * floor.mean_abs)
        px = max(self.pass_max, 3 * floor.max_abs)
        return replace(self, pass_mean=pm, pass_max=px, fail_mean=max(self.fail_mean, 2.5 * pm),
                       fail_max=max(self.fail_max, 4 * px))

    def describe(self) -> str:
        return (
            f"pass: mean|Δ| ≤ {self.pass_mean:g} (over ≥ {self.mean_min_positions} tokens) and "
            f"max|Δ| ≤ {self.pass_max:g} nats, no greedy "
            f"divergence unless the reference's top-2 margin < {self.tie_margin:g}; fail: mean|Δ| > "
            f"{self.fail_mean:g} or max|Δ| > {self.fail_max:g}, a divergence where the reference was "
            f"sure (margin ≥ {self.sure_margin:g}), or a needle the reference finds and DCP misses; "
            "suspicious: in between"
        )


@dataclass
class NoiseFloor:
    """The reference's own rounding noise: the same prompts answered alone and in one batch.

    Batching changes the reduction order of the GEMMs and attention kernels much as DCP changes
    the order of the attention merge, so this is the size of difference a correct DCP server may
    show on this box and model; the verdict lines are raised to 3x it when it is larger than the
    defaults assume.
    """

    prompts: int
    compared: int
    mean_abs: float | None
    max_abs: float | None
    flips: int  # greedy divergences between the two answers of the same prompt
    widened: bool = False


@dataclass
class NeedlePlacement:
    """Where the needle's tokens sit and which DCP ranks hold their KV."""

    target_rank: int
    start: int  # first needle token (server token positions, BOS included)
    end: int  # one past the last needle token
    ranks: list[int]  # owners of [start, end), in order of first appearance

    @property
    def on_target(self) -> bool:
        return self.ranks[:1] == [self.target_rank]


@dataclass
class Check:
    """One prompt sent greedily to the DCP server (and the reference) and judged."""

    name: str
    kind: CheckKind
    context_tokens: int
    verdict: Verdict
    reasons: list[str] = field(default_factory=list)
    compared_positions: int = 0
    max_abs_diff: float | None = None
    mean_abs_diff: float | None = None
    max_diff_position: int | None = None
    first_divergence: int | None = None  # generated-token index where greedy tokens differ
    divergence_margin: float | None = None  # reference top-1 minus DCP's token, nats
    dcp_text: str = ""
    reference_text: str | None = None
    needle: NeedlePlacement | None = None
    needle_found: bool | None = None
    reference_needle_found: bool | None = None
    #: positions of the reference's continuation scored on both servers (teacher forcing, run
    #: when the greedy texts diverge); the max/mean|Δ| then cover them
    forced_positions: int | None = None


@dataclass
class KvCapacity:
    """KV-capacity figures of the DCP server (log lines or Prometheus metrics)."""

    source: str  # "log" | "metrics"
    gpu_kv_cache_tokens: int | None = None
    available_kv_gib: float | None = None
    max_concurrency: float | None = None
    max_concurrency_len: int | None = None
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class ServerFacts:
    url: str
    model: str
    max_model_len: int | None


@dataclass
class DcpLayout:
    """How the DCP server shards KV: token t lives on rank ``(t // interleave) % dcp``."""

    dcp: int
    interleave: int
    block_size: int
    source: str  # "options" | "launch line" | "default"

    def rank_of(self, token: int) -> int:
        return (token // self.interleave) % self.dcp


@dataclass
class ValidateResult:
    server: ServerFacts
    reference: ServerFacts | None
    layout: DcpLayout
    thresholds: Thresholds
    checks: list[Check]
    verdict: Verdict
    summary: str
    kv_capacity: KvCapacity | None = None
    noise_floor: NoiseFloor | None = None
    notes: list[str] = field(default_factory=list)
    launch: dict[str, Any] | None = None
    #: HTTP requests sent, per server and endpoint kind (the count said up front is "planned")
    requests: dict[str, int] = field(default_factory=dict)
    #: whether the reference is proven another server: {"status": same|distinct|unproven, "how"}
    identity: dict[str, str] | None = None

    @property
    def exit_code(self) -> int:
        return int(self.verdict.exit_code)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["verdict"] = self.verdict.value
        d["thresholds"]["rule"] = self.thresholds.describe()
        for c in d["checks"]:
            c["verdict"] = c["verdict"].value if isinstance(c["verdict"], Verdict) else c["verdict"]
        return d
