"""``sm120kit targets`` and ``sm120kit series``: what is supported, and what the series holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sm120kit.errors import ExitCode
from sm120kit.models.series import Series
from sm120kit.patchset.render import new_table
from sm120kit.patchset.targets import TargetRow, target_rows
from sm120kit.report import to_jsonable

_TARGET_STYLE = {"verified": "green", "unverified-here": "yellow", "unsupported": "red"}


@dataclass
class TargetsResult:
    series: str
    title: str
    targets: list[TargetRow]
    exit_code: int = ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = to_jsonable(self)
        for row, r in zip(d["targets"], self.targets, strict=True):
            row["support"] = r.support
        return d

    def render(self, console: Any) -> None:
        t = new_table(
            f"{self.series}: supported targets",
            "alias", "release", "base ref", "variant", "patches", "status", "how verified / why",
        )
        for r in self.targets:
            style = _TARGET_STYLE.get(r.status, "")
            why = r.verified if r.status == "verified" else (r.reason or r.verified or "")
            if r.port_from:
                why = (why + "; " if why else "") + f"ported from {r.port_from}"
            if r.requires_note:
                why = r.requires_note + "; " + why
            t.add_row(
                r.alias, r.release or "-", r.base_ref, r.variant, str(r.patches),
                f"[{style}]{r.support}[/{style}]" if style else r.support, why,
            )
        console.print(t)


@dataclass
class SeriesPatch:
    number: int
    file: str
    subject: str
    files: list[str]
    sha256: str


@dataclass
class SeriesVariant:
    name: str
    base_release: str
    releases: list[str]
    family: str
    aliases: list[str]
    patches: list[SeriesPatch] = field(default_factory=list)


@dataclass
class SeriesResult:
    series: str
    title: str
    credits: list[str]
    variants: list[SeriesVariant]
    exit_code: int = ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = to_jsonable(self)
        return d

    def render(self, console: Any) -> None:
        for v in self.variants:
            t = new_table(
                f"variant {v.name} · made on {v.base_release} · releases "
                f"{', '.join(v.releases)} · aliases {', '.join(v.aliases) or '-'}",
                "#", "patch", "subject", "files",
            )
            for p in v.patches:
                t.add_row(str(p.number), p.file, p.subject, "\n".join(p.files))
            console.print(t)
        if self.credits:
            console.print("credits: " + "; ".join(self.credits))


def list_targets(series: Series) -> TargetsResult:
    return TargetsResult(series.id, series.title, target_rows(series))


def list_series(series: Series, alias: str | None = None) -> SeriesResult:
    names = list(series.variants)
    if alias:
        names = [series.target(alias).variant]
    variants = []
    for name in names:
        v = series.variant(name)
        aliases = sorted(a for a, t in series.targets.items() if t.variant == name)
        variants.append(
            SeriesVariant(
                name, v.base_release, list(v.releases), v.family, aliases,
                [
                    SeriesPatch(i, p.file, p.subject, list(p.files), p.sha256)
                    for i, p in enumerate(v.patches, 1)
                ],
            )
        )
    return SeriesResult(series.id, series.title, series.credits, variants)
