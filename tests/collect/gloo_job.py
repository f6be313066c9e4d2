"""A small real torch.distributed (gloo, CPU) job used by the collect tests and the benchmark.

``python gloo_job.py --world N [--mode stall|crash|healthy|watchdog] [--stall-rank R]`` starts N
rank processes (subprocesses of this launcher, same process group) that rendezvous over a local
TCPStore and run real gloo all_reduces:

* ``stall``: rank R never enters the next all_reduce (it sleeps in ``skip_collective_forever``);
  the other ranks block inside ``dist.all_reduce`` (gloo ``Work::wait``).
* ``crash``: rank R raises a RuntimeError with a traceback after a few collectives and exits 1;
  the others (after ``--survivor-delay`` s in ``busy_elsewhere``) enter the next all_reduce,
  where gloo fails them with "Connection closed by peer".
* ``healthy``: every rank runs ``--steps`` all_reduces and exits 0.
* ``watchdog``: like stall, and rank 0 prints a torch NCCL watchdog timeout line (the text of a
  real one) and keeps waiting.

Each rank sets its process title with setproctitle (``--title`` prefix, default
``VLLM::Worker_TP``) and logs with vLLM's 0.33 prefix format. With ``TORCH_FR_DUMP_TEMP_FILE``
set and ``--fr-dump-after S``, a background thread of every rank writes its Flight Recorder
buffer (``_dump_fr_trace``) to ``<prefix><rank>`` S seconds after the ranks diverge: gloo never
dumps by itself.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta


def log(rank: int, title: str, msg: str) -> None:
    name = title.split("::", 1)[-1] + str(rank)
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"({name} pid={os.getpid()}) INFO {stamp} [gloo_job.py:1] {msg}", flush=True)


def skip_collective_forever(rank: int) -> None:
    while True:
        time.sleep(0.2)


def busy_elsewhere(seconds: float) -> None:
    time.sleep(seconds)


def fr_dump_later(rank: int, after: float) -> None:
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
    if not prefix:
        return

    def run() -> None:
        time.sleep(after)
        import torch

        data = torch._C._distributed_c10d._dump_fr_trace(True, True, False)
        tmp = f"{prefix}{rank}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, f"{prefix}{rank}")

    threading.Thread(target=run, daemon=True, name="fr-dumper").start()


def rank_main(a: argparse.Namespace) -> int:
    try:
        import setproctitle

        setproctitle.setproctitle(f"{a.title}{a.rank}")
    except ImportError:
        pass
    import torch
    import torch.distributed as dist

    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
    store = dist.TCPStore("127.0.0.1", a.port, a.world, a.rank == 0, timeout=timedelta(seconds=60))
    dist.init_process_group(
        "gloo", store=store, rank=a.rank, world_size=a.world, timeout=timedelta(seconds=a.timeout)
    )
    log(a.rank, a.title, f"world_size={a.world} rank={a.rank} backend=gloo")
    t = torch.ones(1000)
    steps = a.steps if a.mode == "healthy" else 3
    for _i in range(steps):
        dist.all_reduce(t)
        if a.mode == "healthy" and a.step_sleep:
            time.sleep(a.step_sleep)
    log(a.rank, a.title, f"finished {steps} all_reduce steps")
    if a.mode == "healthy":
        if a.ready_dir:
            open(os.path.join(a.ready_dir, str(a.rank)), "w").close()
        dist.destroy_process_group()
        return 0
    fr_dump_later(a.rank, a.fr_dump_after)
    if a.ready_dir:
        open(os.path.join(a.ready_dir, str(a.rank)), "w").close()
    if a.rank == a.stall_rank:
        if a.mode == "crash":
            time.sleep(0.5)
            raise RuntimeError(f"rank {a.rank}: simulated failure in warmup")
        log(a.rank, a.title, "skipping the next collective")
        skip_collective_forever(a.rank)
    if a.mode == "crash" and a.survivor_delay:
        log(a.rank, a.title, f"busy for {a.survivor_delay}s before the next collective")
        busy_elsewhere(a.survivor_delay)
    if a.mode == "watchdog" and a.rank == 0:
        print(
            "[rank0]:[E1202 17:31:22.267261276 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=4, OpType=ALLREDUCE, NumelIn=1000, "
            "NumelOut=1000, Timeout(ms)=600000) ran for 600027 milliseconds before timing out.",
            file=sys.stderr,
            flush=True,
        )
    log(a.rank, a.title, "entering all_reduce")
    dist.all_reduce(t)
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launcher(a: argparse.Namespace) -> int:
    if a.launcher_title:
        import setproctitle

        setproctitle.setproctitle(a.launcher_title)
    import tempfile

    port = free_port()
    ready_dir = tempfile.mkdtemp(prefix="gloo-job-ready-")
    procs = []
    for r in range(a.world):
        cmd = [sys.executable, os.path.abspath(__file__), "--rank", str(r), "--port", str(port),
               "--ready-dir", ready_dir]
        cmd += sys.argv[1:]
        procs.append(subprocess.Popen(cmd))
    # startup progress (like vLLM's "Waiting for N core engine proc(s) to start"): printed until
    # every rank reached its last step, so a slow torch import is not mistaken for a stall
    while len(os.listdir(ready_dir)) < a.world and any(p.poll() is None for p in procs):
        print(f"launcher: waiting for {a.world - len(os.listdir(ready_dir))} rank(s) to start",
              flush=True)
        time.sleep(0.5)
    rc = 0
    for p in procs:
        rc = max(rc, abs(p.wait()))
    import shutil

    shutil.rmtree(ready_dir, ignore_errors=True)
    return rc


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--mode", default="stall", choices=["stall", "crash", "healthy", "watchdog"])
    ap.add_argument("--stall-rank", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--step-sleep", type=float, default=0.0)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--title", default="VLLM::Worker_TP")
    ap.add_argument("--fr-dump-after", type=float, default=0.5)
    ap.add_argument("--survivor-delay", type=float, default=0.0,
                    help="crash mode: the other ranks sleep this long before the next collective")
    ap.add_argument("--launcher-title", default=None, help="setproctitle of the launcher")
    ap.add_argument("--rank", type=int, default=None)
    ap.add_argument("--ready-dir", default=None)
    ap.add_argument("--port", type=int, default=None)
    ap.add_argument("--api-key", default=None, help="ignored; lets tests plant a secret in argv")
    a, _ = ap.parse_known_args()
    if a.rank is None:
        return launcher(a)
    return rank_main(a)


if __name__ == "__main__":
    sys.exit(main())
