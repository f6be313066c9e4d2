"""The FlashInfer requirement of a target (:mod:`sm120kit.patchset.requirements`) judged against
an environment's installed FlashInfer, read from its source (``sm120kit.facts.flashinfer``)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from sm120kit.facts import flashinfer as fif
from sm120kit.facts.packages import get_dist
from sm120kit.models.series import Target
from sm120kit.patchset.requirements import (
    VERSION_CHECK_ENV,
    FlashInferRequirement,
    ReqStatus,
    fix_text,
)


def check_installed(target: Target, paths: Sequence[str] | None) -> FlashInferRequirement | None:
    """The target's requirement judged against the FlashInfer on ``paths`` (a sys.path)."""
    if not target.requires_flashinfer:
        return None
    m = target.requires_flashinfer
    info = fif.inspect(paths)
    cubin_dist = get_dist("flashinfer-cubin", paths)
    cubin = cubin_dist.version if cubin_dist else None
    missing: list[str] = []
    if not info.installed:
        missing = ["flashinfer-python"]
    elif info.decode_params is None:
        missing = [fif.DECODE_FN]
    else:
        missing = list(info.missing_params)
        if not info.sm120_module:
            missing.append("mla/_sparse_mla_sm120")
    fix = fix_text(m, cubin)
    if not missing and fif.cubin_mismatch(info.version, cubin, os.environ):
        missing = [f"flashinfer-cubin {cubin} != {info.version} without {VERSION_CHECK_ENV}=1"]
        fix = f"export {VERSION_CHECK_ENV}=1 (flashinfer-cubin has no {info.version} release)"
    status: ReqStatus = "unmet" if missing else "met"
    return FlashInferRequirement(target.alias, m, status, info.version, missing, cubin, fix)
