"""Where the CLI composes capabilities: a bundle written by collect / warmup / validate's
supervisor embeds doctor's tiers 0-1 and is judged by diagnose's rules engine. The services
that write bundles take these as :class:`~sm120kit.services.snapshot.BundleHooks`; no capability
imports another.

Both functions are module-level so that a Ray node can unpickle them by reference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sm120kit.services.snapshot import BundleHooks


def doctor_report() -> dict[str, Any]:
    """Doctor tiers 0-1 (what every bundle embeds as ``doctor.json``)."""
    from sm120kit.doctor import run_doctor

    return run_doctor(tiers=(0, 1)).to_dict()


def judge_bundle(root: Path) -> list[str]:
    """The diagnose rules engine over a bundle: the verdict, the next two findings, the fix."""
    from sm120kit.diagnose.engine import diagnose

    res = diagnose([root])
    lines = [res.verdict]
    for f in res.findings[1:3]:
        ph = f" [phase: {f.phase}]" if f.phase else ""
        lines.append(f"also: {f.category}: {f.summary}{ph}")
    if res.findings and res.findings[0].fix:
        lines.append(f"Fix: {res.findings[0].fix}")
    return lines


def bundle_hooks(*, doctor: bool = True) -> BundleHooks:
    return BundleHooks(doctor_report=doctor_report if doctor else None, judge=judge_bundle)


__all__ = ["bundle_hooks", "doctor_report", "judge_bundle"]
