"""Result objects of ``sm120kit doctor``: one ``CheckResult`` per check, one ``DoctorReport``.

JSON schema (``schema: 1``, stable): ``{"schema", "exit_code", "counts", "tiers", "options",
"duration_s", "checks": [{"id", "area", "tier", "status", "summary", "evidence", "fix",
"duration_s"}]}``. ``evidence`` is an object of plain JSON values, ``fix`` a one-line string or
null. Statuses: ok | warn | fail | skip | error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sm120kit.errors import ExitCode
from sm120kit.report import STATUS_RANK, to_jsonable

SCHEMA = 1


@dataclass
class Outcome:
    """What a check function returns (the runner adds id, area, tier and timing)."""

    status: str
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)
    fix: str | None = None


def ok(summary: str, **evidence: Any) -> Outcome:
    return Outcome("ok", summary, evidence)


def warn(summary: str, fix: str | None = None, **evidence: Any) -> Outcome:
    return Outcome("warn", summary, evidence, fix)


def fail(summary: str, fix: str | None = None, **evidence: Any) -> Outcome:
    return Outcome("fail", summary, evidence, fix)


def skip(summary: str, **evidence: Any) -> Outcome:
    return Outcome("skip", summary, evidence)


def worst(*outcomes: Outcome) -> str:
    return min((o.status for o in outcomes), key=lambda s: STATUS_RANK.get(s, 9), default="ok")


@dataclass
class CheckResult:
    id: str
    area: str
    tier: int
    status: str
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)
    fix: str | None = None
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "area": self.area, "tier": self.tier, "status": self.status,
                "summary": self.summary, "evidence": to_jsonable(self.evidence), "fix": self.fix,
                "duration_s": round(self.duration_s, 4)}


@dataclass
class DoctorReport:
    checks: list[CheckResult]
    tiers: list[int] = field(default_factory=lambda: [0, 1])
    options: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0
    kv_capacity: dict[str, Any] | None = None  # from --log: KV numbers + effective DCP

    @property
    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in STATUS_RANK}
        for c in self.checks:
            out[c.status] = out.get(c.status, 0) + 1
        return out

    @property
    def exit_code(self) -> int:
        """0 all ok/skip, 1 warnings or check errors, 2 any failure."""
        st = {c.status for c in self.checks}
        if "fail" in st:
            return int(ExitCode.FAILURE)
        if st & {"warn", "error"}:
            return int(ExitCode.FINDINGS)
        return int(ExitCode.OK)

    def get(self, check_id: str) -> CheckResult:
        for c in self.checks:
            if c.id == check_id:
                return c
        raise KeyError(check_id)

    def sorted_checks(self) -> list[CheckResult]:
        """Grouped by area (the area of its worst check first), worst first inside each area."""
        area_rank: dict[str, int] = {}
        for c in self.checks:
            area_rank[c.area] = min(area_rank.get(c.area, 9), STATUS_RANK.get(c.status, 9))
        order = {c.id: i for i, c in enumerate(self.checks)}
        return sorted(self.checks, key=lambda c: (area_rank[c.area], c.area,
                                                  STATUS_RANK.get(c.status, 9), order[c.id]))

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "exit_code": self.exit_code, "counts": self.counts,
                "tiers": list(self.tiers), "options": to_jsonable(self.options),
                "duration_s": round(self.duration_s, 4),
                "checks": [c.to_dict() for c in self.sorted_checks()],
                **({"kv_capacity": self.kv_capacity} if self.kv_capacity is not None else {})}
