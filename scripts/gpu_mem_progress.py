"""GPU check of collect's gpu-mem progress channel (run on a machine with an NVIDIA GPU):
a launch that prints nothing for --seconds while it grows its GPU memory (as a weight load onto
the GPU or a KV-cache allocation does), then prints uvicorn's ready line. Under
`sm120kit collect --until-ready --stall-timeout 3` it must end `ready`, not `stalled`.

    python -m sm120kit collect --until-ready --stall-timeout 3 --json -- \
        python scripts/gpu_mem_progress.py --seconds 12
"""

from __future__ import annotations

import argparse
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--step-mib", type=int, default=512)
    a = ap.parse_args()
    import torch

    torch.cuda.init()
    print("INFO 07-15 10:20:01 [gpu_model_runner.py:2000] Starting to load model", flush=True)
    bufs = []
    end = time.monotonic() + a.seconds
    while time.monotonic() < end:
        bufs.append(torch.ones(a.step_mib << 20, dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()
        time.sleep(1.0)
    print(f"INFO:     Application startup complete. ({len(bufs) * a.step_mib} MiB on the GPU)",
          flush=True)
    time.sleep(120)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
