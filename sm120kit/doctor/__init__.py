"""``sm120kit doctor``: judge the FlashInfer build, SM120 GPUs, launch config and host.

``run_doctor(...) -> DoctorReport`` is the entry point (``.checks``, ``.exit_code``,
``.to_dict()``). Facts come from ``sm120kit.facts``; each check is a small function in
``sm120kit.doctor.checks.<area>`` registered in ``sm120kit.doctor.registry``.
"""

from __future__ import annotations

from sm120kit.doctor.model import CheckResult, DoctorReport
from sm120kit.doctor.runner import run_doctor

__all__ = ["CheckResult", "DoctorReport", "run_doctor"]
