"""Facts about the installed vLLM from its dist-info and source text (no import).

Reads the pinned FlashInfer / torch from ``METADATA``, whether the SM120 sparse-MLA backend file
exists, its impl's class attributes (``can_return_lse_for_decode``, ``supports_dcp``), whether
it passes ``return_lse=`` to FlashInfer, which of our patch series' applied markers are present
(``patches/manifest.json`` through ``sm120kit.models.series.load_series``), and whether the
DSV4 backend is registered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sm120kit.errors import UserError
from sm120kit.facts.packages import exact_pin, get_dist, package_dir, pin_of
from sm120kit.facts.source import class_attributes, read_text
from sm120kit.models.series import load_series

SM120_FILE = "vllm/v1/attention/backends/mla/flashinfer_mla_sparse_sm120.py"
SM120_IMPL = "FlashInferMLASparseSM120Impl"
REGISTRY_FILE = "vllm/v1/attention/backends/registry.py"


@dataclass
class VllmInfo:
    installed: bool
    version: str | None = None
    root: str | None = None  # directory holding vllm/
    flashinfer_pin: str | None = None  # specifier, e.g. "==0.7.2.post1"
    flashinfer_pin_marker: str | None = None
    torch_pin: str | None = None
    has_sm120_backend: bool = False
    impl_attrs: dict[str, Any] = field(default_factory=dict)
    passes_return_lse: bool = False
    has_dsv4_backend: bool = False
    series: dict[str, Any] = field(default_factory=dict)

    @property
    def upstream_lse(self) -> bool:
        """The impl itself declares LSE return (an upstream/fork implementation, or ours)."""
        return bool(self.impl_attrs.get("can_return_lse_for_decode") is True
                    and self.passes_return_lse)

    @property
    def series_applied(self) -> bool:
        return bool(self.series.get("applied_variant"))

    @property
    def supports_dcp(self) -> bool:
        return self.series_applied or self.upstream_lse


def inspect(paths: Sequence[str] | None = None, *, series_root: Path | None = None) -> VllmInfo:
    d = get_dist("vllm", paths)
    pkg = package_dir("vllm", paths)
    if d is None and pkg is None:
        return VllmInfo(installed=False)
    info = VllmInfo(installed=True, version=d.version if d else None)
    if d is not None:
        info.flashinfer_pin, info.flashinfer_pin_marker = pin_of(d.requires, "flashinfer-python")
        info.torch_pin = exact_pin(pin_of(d.requires, "torch")[0]) or pin_of(d.requires, "torch")[0]
    if pkg is None:
        return info
    root = pkg.parent
    info.root = str(root)
    src = read_text(root / SM120_FILE)
    if src is not None:
        info.has_sm120_backend = True
        info.impl_attrs = class_attributes(src, SM120_IMPL) or {}
        info.passes_return_lse = "return_lse=" in src and "return_lse=False" not in src
    reg = read_text(root / REGISTRY_FILE) or ""
    info.has_dsv4_backend = "FLASHINFER_MLA_SPARSE_DSV4" in reg
    info.series = series_state(root, series_root, version=info.version)
    return info


def series_state(root: Path, series_root: Path | None = None, *,
                 version: str | None = None) -> dict[str, Any]:
    """Which variant of our series has every applied marker present under ``root``.

    Variants share marker texts, so the variant listing ``version`` among its releases wins.
    """
    try:
        series = load_series(series_root)
    except UserError as exc:
        return {"manifest": None, "error": exc.message, "applied_variant": None, "variants": {}}
    variants: dict[str, Any] = {}
    applied: str | None = None
    complete: list[str] = []
    for name, var in series.variants.items():
        marks = [m for p in var.patches for m in p.applied_markers]
        present = [m.present_in(root) for m in marks]
        variants[name] = {"markers": len(marks), "present": sum(present),
                          "releases": list(var.releases)}
        if marks and all(present):
            complete.append(name)
    if complete:
        mine = [n for n in complete if version and version in series.variants[n].releases]
        applied = (mine or complete)[0]
    return {"manifest": str(series.root), "series": series.id, "applied_variant": applied,
            "variants": variants, "error": None}
