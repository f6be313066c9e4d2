"""Real CUDA hangs for exercising `sm120kit collect` on a GPU machine.

  python scripts/gpu_hang_demo.py sleep [--seconds S]
      one process blocked in torch.cuda.synchronize() behind a long device kernel
      (torch.cuda._sleep): the host thread waits in cudaDeviceSynchronize.
  python scripts/gpu_hang_demo.py nccl-delay [--seconds S] [--timeout T]
      a single-rank NCCL process group whose all_reduce is queued behind a long kernel on the
      same stream, with a process-group timeout shorter than the delay: the NCCL watchdog times
      the collective out and (with TORCH_NCCL_DUMP_ON_TIMEOUT=1) Flight Recorder dumps.

Prints "ready pid=<pid>" once the hang has started, so a supervisor knows when to look.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time


def _cycles_for(seconds: float) -> int:
    import torch

    # calibrate: _sleep spins for a number of GPU clock cycles
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(50_000_000)
    end.record()
    end.synchronize()
    per_cycle_ms = start.elapsed_time(end) / 50_000_000
    return int(seconds * 1000 / per_cycle_ms)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["sleep", "nccl-delay"])
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--timeout", type=float, default=15.0)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU", file=sys.stderr)
        return 2
    torch.cuda.set_device(0)
    cycles = _cycles_for(args.seconds)
    if args.mode == "sleep":
        print(f"ready pid={os.getpid()} mode=sleep cycles={cycles}", flush=True)
        torch.cuda._sleep(cycles)
        torch.cuda.synchronize()
        print("kernel finished", flush=True)
        return 0
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29555")
    dist.init_process_group(
        "nccl", rank=0, world_size=1, timeout=datetime.timedelta(seconds=args.timeout),
        device_id=torch.device("cuda", 0),
    )
    x = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(x)  # warm up the communicator
    torch.cuda.synchronize()
    print(f"ready pid={os.getpid()} mode=nccl-delay cycles={cycles}", flush=True)
    torch.cuda._sleep(cycles)  # the collective below waits behind this kernel
    dist.all_reduce(x)
    t0 = time.time()
    try:
        torch.cuda.synchronize()
    except Exception as exc:  # the watchdog aborts the communicator
        print(f"synchronize raised after {time.time() - t0:.1f}s: {exc}", flush=True)
        return 1
    print("collective completed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
