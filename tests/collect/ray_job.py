"""A Ray driver shaped like ``vllm serve --distributed-executor-backend ray`` for the supervised
``collect --ray -- CMD`` test: it joins the cluster at ``argv[1]``, starts ``argv[2]`` DCP warmup
rank actors spread over the nodes (``ray_ranks.start_ranks``), rank ``argv[3]`` stalled before a
collective, prints startup progress until every rank is in place, then goes silent (the hang)."""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ray_ranks  # noqa: E402


def main() -> int:
    import ray

    address, world, stall = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ray.init(address=address, logging_level="WARNING", log_to_driver=False)
    nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
    progress = Path(tempfile.mkdtemp(prefix="ray-job-")) / "progress.jsonl"
    done = threading.Event()

    def ticker() -> None:
        while not done.is_set():
            print("driver: waiting for the ranks to reach the decode step", flush=True)
            time.sleep(0.5)

    threading.Thread(target=ticker, daemon=True).start()
    _actors, refs, where = ray_ranks.start_ranks(world, nodes, (stall, "merge"), progress)
    ray_ranks.wait_stalled(progress, world, stall)
    done.set()
    print(f"driver: ranks placed {where}", flush=True)
    ray.get(refs)  # never returns: one rank skips the collective
    return 0


if __name__ == "__main__":
    sys.exit(main())
