"""CUDA versions: torch's build (from torch/version.py text) and the driver's CUDA (NVML)."""

from __future__ import annotations

from sm120kit.doctor.context import DoctorContext
from sm120kit.doctor.model import Outcome, fail, ok, skip, warn
from sm120kit.doctor.registry import check
from sm120kit.facts.packages import version_ge, version_tuple

SM120_MIN_CUDA = "12.8"


@check("cuda.torch", tier=0, title="torch CUDA build vs SM120 minimum (12.8)")
def torch_cuda(ctx: DoctorContext) -> Outcome:
    tb = ctx.torch()
    vi = ctx.vllm()
    if tb is None:
        if vi.installed:
            return fail("torch is not installed but vLLM is", "pip install the torch vLLM pins")
        return skip("torch is not installed")
    ev = dict(tb)
    ev["vllm_torch_pin"] = vi.torch_pin if vi.installed else None
    if not tb.get("readable"):
        return warn(f"cannot read {tb['path']}", None, **ev)
    cuda = tb.get("cuda")
    if not cuda:
        msg = f"torch {tb.get('version')} is a CPU-only build (torch.version.cuda is None)"
        if vi.installed:
            return fail(msg, "install a CUDA build of torch (CUDA >= 12.8), e.g. from "
                        "https://download.pytorch.org/whl/cu128", **ev)
        return warn(msg, "vLLM on SM120 needs a CUDA >= 12.8 torch build", **ev)
    if not version_ge(cuda, SM120_MIN_CUDA):
        return fail(f"torch {tb.get('version')} is built for CUDA {cuda}; SM120 needs >= "
                    f"{SM120_MIN_CUDA}", "install a torch built for CUDA 12.8 or newer", **ev)
    pin = ev["vllm_torch_pin"]
    tv = tb.get("version") or ""
    if pin and not pin.startswith(("<", ">", "~", "!")) and tv.split("+")[0] != pin:
        return warn(f"torch {tv} (CUDA {cuda}) but vLLM {vi.version} pins torch {pin}",
                    f"pip install torch=={pin} (matching CUDA build)", **ev)
    return ok(f"torch {tv}, CUDA {cuda}", **ev)


@check("cuda.driver", tier=1, title="Driver's CUDA version >= torch's CUDA runtime")
def driver_cuda(ctx: DoctorContext) -> Outcome:
    snap = ctx.nvml()
    if not snap.available:
        return skip(f"NVML unavailable: {snap.error}")
    tb = ctx.torch() or {}
    drv = snap.cuda_driver_version_str
    ev = {"driver": snap.driver_version, "driver_cuda": drv, "torch_cuda": tb.get("cuda")}
    if not drv:
        return warn("NVML did not report the driver's CUDA version", None, **ev)
    if not tb.get("cuda"):
        return ok(f"driver {snap.driver_version} supports CUDA {drv} (torch has no CUDA build to "
                  "compare)", **ev)
    if version_tuple(drv)[:2] < version_tuple(tb["cuda"])[:2]:
        return fail(f"driver {snap.driver_version} supports CUDA {drv} < torch's CUDA "
                    f"{tb['cuda']}", f"upgrade the NVIDIA driver to one supporting CUDA "
                    f"{tb['cuda']}, or use a torch build for CUDA <= {drv}", **ev)
    return ok(f"driver {snap.driver_version} supports CUDA {drv} >= torch's {tb['cuda']}", **ev)
