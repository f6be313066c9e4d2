"""A real process that blocks in a native CUDA-runtime wait, for the kernel-hang bundle test.

``python cuda_sync_job.py LIB`` sets its title like a vLLM worker (``VLLM::Worker_TP0``), logs
vLLM's 0.33 prefix format while it "loads weights", then calls ``cudaDeviceSynchronize`` from
LIB through ctypes, the way torch.cuda.synchronize() reaches the runtime. There is no GPU here:
LIB is a tiny library the test compiles whose ``cudaDeviceSynchronize`` blocks forever (pause),
as the real one does behind a kernel that never returns. Everything else is real: the process,
its output, its native stack as py-spy --native reads it.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time


def log(msg: str) -> None:
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"(Worker_TP0 pid={os.getpid()}) INFO {stamp} [default_loader.py:1] {msg}", flush=True)


def synchronize(lib: ctypes.CDLL) -> None:
    lib.cudaDeviceSynchronize()


def load_weights(lib: ctypes.CDLL) -> None:
    log("Starting to load model /models/demo...")
    log("Loading safetensors checkpoint shards:   0% Completed | 0/4")
    synchronize(lib)


def main() -> int:
    try:
        import setproctitle

        setproctitle.setproctitle("VLLM::Worker_TP0")
    except ImportError:
        pass
    load_weights(ctypes.CDLL(sys.argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
