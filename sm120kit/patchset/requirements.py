"""What a target needs beyond the patch series: a FlashInfer newer than the release's pin.

vLLM 0.25.x pins flashinfer-python 0.6.13, whose ``trtllm_batch_decode_with_kv_cache_mla`` has no
``kv_scale_format`` and which has no SM120 sparse-MLA module: the SM120 backend cannot run with
the pin. Such a target carries ``requires_flashinfer`` in the manifest. The installed FlashInfer is
judged by its source (the decode function's signature and the SM120 module, read without
importing it, ``sm120kit.facts.flashinfer``; :mod:`sm120kit.patchset.requirement_check`), never
by vLLM's pin. This module only states the requirement: ``apply`` on a checkout reads no
environment and does not import the readers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from sm120kit.models.constants import FLASHINFER_VERSION_CHECK_ENV as VERSION_CHECK_ENV
from sm120kit.models.series import Series, Target

ReqStatus = Literal["met", "unmet", "unchecked"]


@dataclass
class FlashInferRequirement:
    alias: str
    minimum: str
    status: ReqStatus
    installed: str | None = None
    missing: list[str] = field(default_factory=list)
    cubin: str | None = None
    fix: str = ""

    def line(self) -> str:
        need = f"{self.alias} needs flashinfer-python >= {self.minimum} (the SM120 sparse-MLA API)"
        if self.status == "met":
            return f"{need}: installed {self.installed} has it"
        if self.status == "unchecked":
            return f"note: {need}; install it in the environment that runs vLLM: {self.fix}"
        have = f"flashinfer-python {self.installed}" if self.installed else "no flashinfer-python"
        lacks = f" ({', '.join(self.missing)} missing)" if self.missing else ""
        return f"warning: {need}, found {have}{lacks}; fix: {self.fix}"


def fix_text(minimum: str, cubin: str | None) -> str:
    fix = f"pip install flashinfer-python=={minimum}"
    if cubin and cubin.split("+")[0] != minimum:
        fix += (f"; flashinfer-cubin {cubin} lags it, so also export {VERSION_CHECK_ENV}=1 "
                "(FlashInfer refuses to import when the two versions differ)")
    else:
        fix += f" (with {VERSION_CHECK_ENV}=1 if an older flashinfer-cubin is installed)"
    return fix


def requirement(target: Target, series: Series | None = None) -> FlashInferRequirement | None:
    """The target's FlashInfer requirement, not checked against any environment. A fork alias
    (no release) ported from a variant takes the requirement of that variant's releases."""
    m = target.requires_flashinfer
    if not m and series is not None and target.release is None:
        variant = target.port_from or target.variant
        mins = {t.requires_flashinfer for t in series.targets.values()
                if t.variant == variant and t.release and t.requires_flashinfer}
        m = max(mins, key=lambda v: tuple(int(x) for x in v.split(".") if x.isdigit()),
                default=None)
    if not m:
        return None
    return FlashInferRequirement(target.alias, m, "unchecked", fix=fix_text(m, None))
