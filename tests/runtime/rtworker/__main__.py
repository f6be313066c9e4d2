"""Entry point of the per-release worker: ``python -m rtworker all --kind K --out DIR --release X``."""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

MODULES = (
    "vllm.v1.attention.backends.mla.flashinfer_mla_sparse_sm120",
    "vllm.v1.attention.backends.mla.flashinfer_mla_sparse",
    "vllm.v1.attention.backends.mla.sparse_utils",
    "vllm.v1.worker.gpu.warmup",
    "vllm.v1.attention.ops.dcp",
)
OPTIONAL = {"vllm.v1.attention.ops.dcp"}  # the DCP combine ops module arrived after 0.29


def run_imports() -> dict[str, Any]:
    import importlib

    res: dict[str, Any] = {"modules": {}}
    import importlib.util

    for name in MODULES:
        t0 = time.monotonic()
        if name in OPTIONAL and importlib.util.find_spec(name) is None:
            res["modules"][name] = {"file": None, "absent": True}  # not in this release
            continue
        mod = importlib.import_module(name)
        res["modules"][name] = {
            "file": getattr(mod, "__file__", None),
            "seconds": round(time.monotonic() - t0, 3),
        }
    import vllm

    res["vllm_version"] = getattr(vllm, "__version__", None)
    res["vllm_file"] = vllm.__file__
    try:
        importlib.import_module("vllm._C")
        res["vllm_C"] = True
    except ImportError as exc:
        res["vllm_C"] = False
        res["vllm_C_error"] = str(exc)
    import torch

    res["torch"] = torch.__version__
    res["cuda_available"] = torch.cuda.is_available()
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="rtworker")
    ap.add_argument("mode", choices=["all", "impl", "imports", "gloo", "interleave"])
    ap.add_argument("--kind", choices=["patched", "upstream"], required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--release", required=True)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args(argv)
    out: dict[str, Any] = {"release": args.release, "kind": args.kind, "timings": {}}
    stage = "imports"
    try:
        t0 = time.monotonic()
        out["imports"] = run_imports()
        out["timings"]["imports"] = round(time.monotonic() - t0, 2)
        if args.mode == "gloo":
            from rtworker import gloo_case

            stage = "gloo"
            out["gloo"] = gloo_case.run(args.out, args.rank, args.world, args.port)
        if args.mode == "impl":  # 0.25-0.29: the SM120 impl only (older workspace/warmup APIs)
            from rtworker import impl_case

            stage = "impl"
            out["impl"] = impl_case.run_all(args.kind, args.out)
        if args.mode == "interleave":
            from rtworker import interleave_case

            stage = "interleave"
            out["interleave"] = interleave_case.run_all(args.out)
        if args.mode == "all":
            from rtworker import impl_case, warmup_case, workspace_case

            for stage, fn in (
                ("workspace_cache", workspace_case.run_cache),
                ("impl", lambda: impl_case.run_all(args.kind, args.out)),
                ("workspace_init", workspace_case.run_init_fetch),
                ("workspace_refetch", lambda: workspace_case.run_forward_refetch(args.out)),
                ("warmup", warmup_case.run_all),
                ("warmup_mtp", warmup_case.run_mtp),
            ):
                t0 = time.monotonic()
                out[stage] = fn()
                out["timings"][stage] = round(time.monotonic() - t0, 2)
        out["status"] = "ok"
        rc = 0
    except Exception:
        out["status"] = "error"
        out["failed_stage"] = stage
        out["traceback"] = traceback.format_exc()
        print(out["traceback"], file=sys.stderr)
        rc = 1
    (args.out / "result.json").write_text(json.dumps(out, indent=1, default=str))
    return rc


if __name__ == "__main__":
    sys.exit(main())
