"""Rule plumbing: the ``Finding`` a rule returns, the ``RuleContext`` it reads, evidence tiers.

A rule is a module in this package with ``RULE = Rule(id=..., category=..., needs=..., check=...)``;
``check(ctx)`` returns findings (usually zero or one). ``confidence`` is capped by the tier of the
strongest evidence the finding rests on, so the ranking follows the evidence order of
``shared/reference/hang-diagnostics.md`` §5: first dead rank > rank-level disagreement > stack
asymmetry > GPU state > configuration heuristics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sm120kit.evidence.logs.analyze import Evidence, LogAnalysis, Proc
from sm120kit.facts.kvcache import KvCapacity

CATEGORIES: tuple[str, ...] = (
    "rank-crashed", "collective-desync", "p2p-transport", "shared-memory", "library-version",
    "interposer", "dcp-warmup", "dcp-unsupported", "kernel-hang", "out-of-memory",
    "timeout-too-short", "config-invalid", "dcp-not-engaged", "unknown",
)
# evidence tiers → the highest confidence a finding resting on them may claim
TIER_CAP: dict[str, float] = {
    "dead-rank": 0.97,  # a traceback/death message of the first failing rank
    "disagreement": 0.88,  # watchdog/FR/RAS/NCCL counters disagree across ranks
    "stacks": 0.78,  # one rank's stack differs from the others
    "gpu": 0.65,  # NVML/RAS device state pattern
    "config": 0.5,  # versions/config heuristics
}

DOCS = "README.md#diagnose"


@dataclass
class StackView:
    """One process's main-thread position in a bundle (py-spy JSON or faulthandler)."""

    pid: int
    label: str | None = None
    rank: int | None = None
    role: str | None = None
    state: str | None = None  # blocked | spinning | progressing | unknown
    top: str | None = None
    collective: str | None = None
    sync: str | None = None
    frames: list[str] = field(default_factory=list)  # "func (file:line)", innermost first
    source: str = ""

    @property
    def waiting(self) -> bool:
        """In a collective or a host sync (where every rank sits when a peer is missing)."""
        return bool(self.collective or self.sync)


@dataclass
class BundleFacts:
    stacks: list[StackView] = field(default_factory=list)
    nvml: list[dict[str, Any]] = field(default_factory=list)  # snapshots
    ras: list[tuple[str, str]] = field(default_factory=list)  # (member, text)
    ras_json: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    flight: dict[str, Any] | None = None
    flight_text: list[tuple[str, str]] = field(default_factory=list)
    doctor: dict[str, Any] | None = None
    timeline: dict[str, Any] | None = None
    processes: dict[str, Any] = field(default_factory=dict)
    collectors: list[dict[str, Any]] = field(default_factory=list)
    env: dict[str, Any] = field(default_factory=dict)


@dataclass
class RuleContext:
    logs: LogAnalysis
    bundle: BundleFacts | None = None
    kv: KvCapacity | None = None  # KV numbers + effective DCP (sm120kit.evidence.kv)

    @property
    def config(self) -> dict[str, Any]:
        return self.logs.vs.config

    @property
    def versions(self) -> dict[str, Any]:
        return self.logs.vs.versions

    def dcp(self) -> int:
        v = self.config.get("dcp")
        return int(v) if isinstance(v, int) else 1

    def workers(self) -> list[Proc]:
        return self.logs.workers()

    def hits(self, sid: str) -> list[Evidence]:
        h = self.logs.signals.get(sid)
        return list(h.evidence) if h else []

    def values(self, sid: str) -> set[str]:
        h = self.logs.signals.get(sid)
        return set(h.values) if h else set()

    def count(self, sid: str) -> int:
        h = self.logs.signals.get(sid)
        return h.count if h else 0

    def stalled(self) -> bool:
        """Any sign that the run stopped making progress (waits, timeouts, deaths)."""
        lg = self.logs
        return bool(lg.shm_wait_open() or lg.watchdog or lg.rpc_timeouts or lg.deaths
                    or self.count("engine-ready-timeout") or self.count("gloo-timeout")
                    or (self.bundle is not None and self.bundle.stacks))


@dataclass
class Finding:
    rule: str
    category: str
    confidence: float
    summary: str
    evidence: list[Evidence] = field(default_factory=list)
    fix: str = ""
    link: str | None = None
    ranks: list[int] = field(default_factory=list)
    tier: str = "config"

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "category": self.category,
            "confidence": round(self.confidence, 2),
            "summary": self.summary,
            "evidence": [e.to_dict() for e in self.evidence[:8]],
            "fix": self.fix + (f" (see {self.link})" if self.link else ""),
            "ranks": self.ranks,
            "tier": self.tier,
        }


@dataclass(frozen=True)
class Rule:
    id: str
    category: str
    needs: str  # the evidence this rule reads, for the docs and `--explain`
    tier: str
    check: Callable[[RuleContext], list[Finding]]
    fix: str = ""
    link: str | None = None

    def finding(self, confidence: float, summary: str, evidence: list[Evidence], *,
                fix: str | None = None, ranks: list[int] | None = None,
                tier: str | None = None, category: str | None = None) -> Finding:
        t = tier or self.tier
        return Finding(
            rule=self.id, category=category or self.category,
            confidence=min(confidence, TIER_CAP[t]), summary=summary, evidence=evidence,
            fix=fix if fix is not None else self.fix, link=self.link, ranks=ranks or [], tier=t,
        )


def first_failing(ctx: RuleContext) -> Proc | None:
    """The process whose first error is earliest (time when known, then line order)."""
    cands = [p for p in ctx.logs.procs.values() if p.first_error is not None]
    if not cands:
        return None

    timed = [p for p in cands if p.first_error_t is not None]
    if timed and len(timed) == len(cands):
        return min(cands, key=lambda p: (p.first_error_t or 0.0, p.first_error_order))

    def key(p: Proc) -> tuple[float, int]:
        return (0.0, p.first_error_order)

    return min(cands, key=key)
