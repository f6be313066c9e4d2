"""Rule plumbing: the ``Finding`` a rule returns, the ``RuleContext`` it reads, evidence tiers.

A rule is a module in this package with ``RULE = Rule(id=..., category=..., needs=..., check=...)``;
``check(ctx)`` returns findings (usually zero or one). ``confidence`` is capped by the tier of the
strongest evidence the finding rests on, so the ranking follows the evidence order of
``shared/reference/hang-diagnostics.md`` §5: first dead rank > rank-level disagreement > stack
asymmetry > GPU state > configuration heuristics.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sm120kit.diagnose.catalogue import Catalogue
from sm120kit.diagnose.catalogue.stops import stop_rules
from sm120kit.diagnose.categories import CATEGORIES, FIELD_PHASES  # noqa: F401 (re-exported)
from sm120kit.diagnose.facts import BundleFacts, StackView  # noqa: F401 (re-exported)
from sm120kit.evidence.logs.analyze import Evidence, LogAnalysis, Proc
from sm120kit.evidence.logs.facts import LogFacts, log_facts
from sm120kit.models.kv import KvCapacity

_FIELD_OF: dict[str, str] = {
    "engine-init": "startup", "nccl-init": "startup", "model-load": "weight-load",
    "torch-compile": "compile", "kv-cache-profile": "startup", "kernel-warmup": "warmup",
    "autotune": "autotune", "cuda-graph-capture": "capture", "engine-ready": "startup",
    "api-server-ready": "serving", "serving": "serving",
}
# causal position of a finding: the mechanism that failed (cause), where the run diverged or
# stopped (position), or what it led to (effect: watchdog aborts, SIGABRT, EngineDeadError,
# cascading timeouts). Ranking puts causes first, effects last, confidence breaks ties.
Role = Literal["cause", "position", "effect"]
ROLE_BONUS: dict[str, float] = {"cause": 0.12, "position": 0.0, "effect": -0.25}


def field_phase(stage: str | None) -> str | None:
    """``kernel-warmup`` → ``warmup``; None for unknown/terminal phases."""
    return _FIELD_OF.get(stage) if stage else None
# evidence tiers → the highest confidence a finding resting on them may claim
TIER_CAP: dict[str, float] = {
    "dead-rank": 0.97,  # a traceback/death message of the first failing rank
    "disagreement": 0.88,  # watchdog/FR/RAS/NCCL counters disagree across ranks
    "stacks": 0.78,  # one rank's stack differs from the others
    "gpu": 0.65,  # NVML/RAS device state pattern
    "config": 0.5,  # versions/config heuristics
}

DOCS = "docs/diagnose.md"


@dataclass(frozen=True)
class InputSeen:
    """What the input showed, as the catalogue's conditions read it (conditions.Seen)."""

    hits: dict[str, list[Evidence]]
    phases: frozenset[str]
    stalled: bool
    topology: frozenset[str]

    def first(self, sid: str) -> Evidence | None:
        ev = self.hits.get(sid)
        return ev[0] if ev else None


@dataclass
class RuleContext:
    """What a rule reads: the log facts (built once from the analysis), the bundle's facts, the
    KV numbers and the catalogue. ``logs`` is the analysis itself, for the engine; rules read
    ``facts``."""

    logs: LogAnalysis
    bundle: BundleFacts | None = None
    kv: KvCapacity | None = None  # KV numbers + effective DCP (sm120kit.evidence.kv)
    catalogue: Catalogue | None = None  # the failure-signature entries (diagnose.catalogue)
    facts: LogFacts = field(init=False)

    def __post_init__(self) -> None:
        self.facts = log_facts(self.logs)

    @property
    def config(self) -> Mapping[str, Any]:
        return self.facts.config

    @property
    def versions(self) -> Mapping[str, Any]:
        return self.facts.versions

    def dcp(self) -> int:
        v = self.config.get("dcp")
        return int(v) if isinstance(v, int) else 1

    def workers(self) -> list[Proc]:
        return list(self.facts.workers)

    def hits(self, sid: str) -> list[Evidence]:
        return self.facts.hits(sid)

    def values(self, sid: str) -> set[str]:
        h = self.facts.signals.get(sid)
        return set(h.values) if h else set()

    def count(self, sid: str) -> int:
        h = self.facts.signals.get(sid)
        return h.count if h else 0

    def described_ev(self, i: int) -> Evidence:
        """The i-th symptom a person described (prose), as evidence."""
        src, line, text = self.facts.described.symptoms[i]
        return Evidence(src, line, text)

    def stalled(self, excerpt_end: bool = True) -> bool:
        """Any sign that the run stopped making progress (waits, timeouts, deaths); with
        ``excerpt_end=False`` a pasted excerpt that merely ends in a startup step does not count."""
        f = self.facts
        w = f.waits
        return bool(w.shm_open or w.watchdog or w.rpc_timeouts or w.deaths
                    or self.count("engine-ready-timeout") or self.count("gloo-timeout")
                    or f.described.symptoms or f.described.stacks
                    or (excerpt_end and self.stopped_at() is not None)
                    or f.progress.zero_progress is not None
                    or (self.bundle is not None and self.bundle.stacks))

    def stopped_at(self) -> str | None:
        """The short startup step a pasted excerpt stops in (``progress.stopped_excerpt``), or
        None: also when the run reached its goal, or when the excerpt's last step line is that
        step's result (stop map ``done``: it ends after the step, not in it)."""
        f = self.facts
        stop, step = f.progress.stopped_excerpt, f.progress.last_step
        if stop is None or self.completed() is not None:
            return None
        rule = stop_rules().get(stop)
        if rule is not None and step is not None and rule.finished(step.text):
            return None
        return stop

    def completed(self) -> Evidence | None:
        """The line saying the run reached its goal (catalogue signal ``run-completed``: a
        benchmark's summary, a launcher's workers all succeeded, a server ready), or None. A run
        that completed did not stop where its log ends."""
        return self.facts.completed()

    def seen(self) -> InputSeen:
        f = self.facts
        stages = {f.phases.stage} | {p.tracker.stage for p in f.workers}
        topo = set()
        if f.described.pcie_only() or self.count("pcie-only-said"):
            topo.add("pcie")
        if "NV" in f.described.links.values():
            topo.add("nvlink")
        return InputSeen({k: h.evidence for k, h in f.signals.items()},
                         frozenset(s for s in stages if s is not None), self.stalled(),
                         frozenset(topo))

    def says(self, sid: str, text: str) -> bool:
        """The catalogue's signal (or cue) ``sid`` matches ``text``, a line the rule holds."""
        cat = self.catalogue
        if cat is None:
            return False
        if sid in cat.cues:
            return cat.cues[sid].cue.find(text) is not None
        return cat.table.match(sid, text) is not None


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
    phase: str | None = None  # one of FIELD_PHASES when the evidence tells
    role: Role = "position"

    @property
    def rank_key(self) -> float:
        """Causal position first, then confidence (higher sorts first). A cause resting on weak
        evidence (stacks, GPU state, config heuristics) gets half the bonus: it does not jump
        ahead of a rank-level disagreement or a traceback."""
        bonus = ROLE_BONUS[self.role]
        if bonus > 0 and self.tier not in ("dead-rank", "disagreement"):
            bonus /= 2
        if self.category in ("rank-crashed", "unknown"):
            bonus -= 0.3
        return self.confidence + bonus

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
            "phase": self.phase,
            "role": self.role,
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
    role: Role = "position"

    def finding(self, confidence: float, summary: str, evidence: list[Evidence], *,
                fix: str | None = None, ranks: list[int] | None = None,
                tier: str | None = None, category: str | None = None, phase: str | None = None,
                role: Role | None = None) -> Finding:
        t = tier or self.tier
        return Finding(
            rule=self.id, category=category or self.category,
            confidence=min(confidence, TIER_CAP[t]), summary=summary, evidence=evidence,
            fix=fix if fix is not None else self.fix,
            link=self.link if fix is None else None, ranks=ranks or [], tier=t,
            phase=phase, role=role or self.role,
        )


def first_failing(ctx: RuleContext) -> Proc | None:
    """The process whose first error is earliest (time when known, then line order)."""
    cands = [p for p in ctx.facts.procs.values() if p.first_error is not None]
    if not cands:
        return None

    timed = [p for p in cands if p.first_error_t is not None]
    if timed and len(timed) == len(cands):
        return min(cands, key=lambda p: (p.first_error_t or 0.0, p.first_error_order))

    def key(p: Proc) -> tuple[float, int]:
        return (0.0, p.first_error_order)

    return min(cands, key=key)


