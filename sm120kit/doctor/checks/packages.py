"""Installed packages (tier 0, importlib.metadata only) and vLLM's FlashInfer pin."""

from __future__ import annotations

from typing import Any

from sm120kit.doctor.context import DoctorContext
from sm120kit.doctor.model import Outcome, ok, skip, warn
from sm120kit.doctor.registry import check
from sm120kit.facts.packages import (
    dist_names_matching,
    exact_pin,
    get_dist,
    is_local,
)

PACKAGES = ("vllm", "flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache", "torch",
            "nvidia-nccl-cu12", "nvidia-nccl-cu13", "nvidia-ml-py", "b12x")
# Pins of vLLM releases that PyPI never carried (doctor-checks.md §0.3: vllm 0.34.0 pins it).
NOT_ON_PYPI = {"flashinfer-python": {"0.7.3"}}


def versions(ctx: DoctorContext) -> dict[str, str | None]:
    def read() -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for name in PACKAGES:
            d = get_dist(name, ctx.paths)
            out[name] = d.version if d else None
        for name, ver in dist_names_matching(r"flashinfer-jit-cache-sm\d{2,3}[af]?", ctx.paths):
            out[name] = ver
        return out

    return ctx.cached("package_versions", read)


@check("packages.installed", tier=0, title="Installed packages")
def installed(ctx: DoctorContext) -> Outcome:
    v = versions(ctx)
    ev: dict[str, Any] = {"versions": v}
    problems: list[str] = []
    fi = v.get("flashinfer-python")
    if v.get("flashinfer-cubin") and fi and v["flashinfer-cubin"] != fi:
        problems.append(f"flashinfer-cubin {v['flashinfer-cubin']} != flashinfer-python {fi}")
    for name, ver in v.items():
        if name.startswith("flashinfer-jit-cache") and ver and fi:
            base = ver.split("+", 1)[0]
            if base != fi.split("+", 1)[0]:
                problems.append(f"{name} {ver} does not match flashinfer-python {fi}")
    if v.get("nvidia-nccl-cu12") and v.get("nvidia-nccl-cu13"):
        problems.append("both nvidia-nccl-cu12 and nvidia-nccl-cu13 are installed")
    shown = ", ".join(f"{k} {val}" for k, val in v.items() if val) or "none of them"
    if not v.get("vllm") and not fi:
        return warn(f"neither vLLM nor FlashInfer is installed here ({shown})",
                    "run doctor inside the environment that runs `vllm serve`", **ev)
    if problems:
        return warn("; ".join(problems),
                    "install matching kernel wheels (`flashinfer download-kernels`) or remove them",
                    **ev)
    return ok(shown, **ev)


@check("packages.flashinfer_pin", tier=0, title="vLLM's pinned FlashInfer vs installed")
def flashinfer_pin(ctx: DoctorContext) -> Outcome:
    vi = ctx.vllm()
    v = versions(ctx)
    if not vi.installed:
        return skip("vLLM is not installed")
    fi = v.get("flashinfer-python")
    spec = vi.flashinfer_pin
    ev = {"vllm": vi.version, "pin": spec, "pin_marker": vi.flashinfer_pin_marker,
          "installed": fi}
    if spec is None:
        return ok(f"vLLM {vi.version} does not pin flashinfer-python", **ev)
    pin = exact_pin(spec)
    missing = pin in NOT_ON_PYPI["flashinfer-python"] if pin else False
    if fi is None:
        return warn(f"vLLM {vi.version} wants flashinfer-python{spec}, which is not installed",
                    f"pip install 'flashinfer-python{spec}'" if not missing else
                    "install flashinfer-python >= 0.6.14 (the pinned one is not on PyPI)", **ev)
    if pin is None or pin == fi:
        return ok(f"flashinfer-python {fi} matches vLLM {vi.version}'s pin {spec}", **ev)
    note = " (that version is not on PyPI)" if missing else ""
    if is_local(fi) or is_local(vi.version):
        return warn(f"local/fork build: flashinfer-python {fi}, vLLM {vi.version} pins "
                    f"{spec}{note}", None, **ev)
    return warn(f"flashinfer-python {fi} installed, vLLM {vi.version} pins {spec}{note}",
                f"pip install 'flashinfer-python=={pin}'" if not missing else
                "keep a flashinfer-python with the SM120 API (>= 0.6.14); the pin is not on PyPI",
                **ev)
