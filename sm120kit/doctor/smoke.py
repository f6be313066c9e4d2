"""Functional P2P + NCCL all-reduce smoke test (``doctor --deep``), run as a subprocess.

``python -m sm120kit.doctor.smoke [--timeout S]`` prints one JSON object: ``status`` (ok, fail,
skip), ``reason``, per-pair copy results and the all-reduce result. The parent enforces the
wall-clock limit and kills the whole process group on a hang (the "P2P OK but hangs" case).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank(rank: int, world: int, port: int, outdir: str, timeout: float) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=timeout))
    t = torch.full((1 << 20,), float(rank + 1), device=f"cuda:{rank}")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    expect = world * (world + 1) / 2
    okv = bool(torch.all(t == expect).item())
    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as fh:
        json.dump({"rank": rank, "ok": okv, "value": float(t[0].item()), "expect": expect}, fh)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    timeout = float(args[args.index("--timeout") + 1]) if "--timeout" in args else 60.0
    out: dict[str, Any] = {"status": "ok", "reason": None, "pairs": [], "all_reduce": None}
    try:
        import torch
    except Exception as exc:
        out.update(status="skip", reason=f"torch is not importable: {exc}")
        print(json.dumps(out))
        return 0
    if not torch.cuda.is_available():
        out.update(status="skip", reason="torch sees no CUDA device")
        print(json.dumps(out))
        return 0
    n = torch.cuda.device_count()
    out["gpus"] = n
    try:
        v = torch.cuda.nccl.version()
        out["nccl_version"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
    except Exception as exc:  # a torch without NCCL
        out["nccl_version"] = None
        out["nccl_version_error"] = str(exc)[:200]
    out["names"] = [torch.cuda.get_device_name(i) for i in range(n)]
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            rec: dict[str, Any] = {"src": i, "dst": j,
                                   "can_access_peer": bool(torch.cuda.can_device_access_peer(i, j))}
            a = torch.arange(1 << 20, dtype=torch.float32, device=f"cuda:{i}")
            b = a.to(f"cuda:{j}")
            torch.cuda.synchronize(i)
            torch.cuda.synchronize(j)
            rec["copy_ok"] = bool(torch.equal(a.cpu(), b.cpu()))
            out["pairs"].append(rec)
    if not torch.distributed.is_available() or not torch.distributed.is_nccl_available():
        out["all_reduce"] = {"status": "skip", "reason": "this torch has no NCCL"}
    else:
        import torch.multiprocessing as mp

        with tempfile.TemporaryDirectory() as d:
            mp.spawn(_rank, args=(n, _free_port(), d, timeout), nprocs=n, join=True)
            ranks = []
            for r in range(n):
                with open(os.path.join(d, f"rank{r}.json")) as fh:
                    ranks.append(json.load(fh))
        out["all_reduce"] = {"status": "ok" if all(r["ok"] for r in ranks) else "fail",
                             "world": n, "ranks": ranks}
    bad_pairs = [p for p in out["pairs"] if not p["copy_ok"]]
    if bad_pairs or (out["all_reduce"] or {}).get("status") == "fail":
        out["status"] = "fail"
        out["reason"] = (f"{len(bad_pairs)} GPU pair copies corrupted" if bad_pairs
                         else "NCCL all-reduce returned wrong values")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
