"""Real multi-node Ray clusters on one machine for the ``collect --ray`` tests: Ray's own
in-process cluster utility (``ray.cluster_utils.Cluster``: a GCS and one raylet per node, each
node with its own node id) and DCP warmup ranks of ``sm120kit warmup`` (the project's
``RankRun``, gloo on CPU) as Ray actors pinned to the nodes, one of them stalled before a
collective with ``inject_stall``.

The actor class is not vLLM's (no GPU, no vLLM engine here): the tests pass its class name with
``--ray-worker-class``; the actors are named like vLLM's Ray workers
(``vllm_Worker_<instance>_TP<rank>``, ``build_actor_name`` in vLLM's ray_utils.py), so the rank
comes from the name as it does for vLLM.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

NODE_ARGS: dict[str, Any] = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}
#: a removed node is noticed within ~2 s (Ray's defaults allow ~30 s of missed health checks)
FAST_HEALTH = {"health_check_period_ms": 500, "health_check_failure_threshold": 3,
               "health_check_initial_delay_ms": 500}


class DcpWarmupRank:
    """One DCP warmup rank (``sm120kit.warmup.rank.RankRun``) in a Ray actor; progress lines go
    to ``progress`` (JSON lines, appended atomically) so the test knows where each rank is."""

    def __init__(self, rank: int, dcp: int, progress: str) -> None:
        self.rank, self.dcp, self.progress = rank, dcp, progress

    def where(self) -> dict[str, Any]:
        import ray

        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id()}

    def run(self, init_method: str, stall: tuple[int, str] | None) -> dict[str, Any]:
        from sm120kit.warmup.config import RunConfig
        from sm120kit.warmup.rank import RankRun, Reporter

        if os.environ.get("SM120KIT_TEST_SECRET"):  # a worker that logs a credential
            print(f"rank {self.rank}: downloading with {os.environ['SM120KIT_TEST_SECRET']}",
                  file=sys.stderr, flush=True)

        cfg = RunConfig(dcp=self.dcp, heads_per_rank=2, topk=256, seq_len=1024,
                        inject_stall=stall, stall_timeout=600)
        fd = os.open(self.progress, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        return RankRun(cfg, self.rank, Reporter(self.rank, fd)).run(init_method)


class IdleRank:
    """A rank actor that only waits (a served, idle vLLM worker): for the tests of what counts as
    a rank (live actors of live jobs, per instance), where no collective is needed."""

    def where(self) -> dict[str, Any]:
        import ray

        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id()}

    def spawn_titled(self, title: str) -> int:
        """A child process of this actor titled like a vLLM process (argv[0] = ``title``, as
        setproctitle shows it): part of this job's tree."""
        import subprocess

        p = subprocess.Popen(["bash", "-c", f'exec -a "{title}" "{sys.executable}" -c '
                              '"import time; time.sleep(600)"'], start_new_session=False)
        return p.pid


def start_idle(instance: str, world: int, node_ids: list[str]) -> tuple[list[Any], dict[int, Any]]:
    """``world`` :class:`IdleRank` actors named like vLLM's workers of ``instance``, rank r on
    ``node_ids[r % len]``; returns (actors, rank → where it runs)."""
    import ray
    import ray.cloudpickle
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cls = ray.remote(num_cpus=0)(IdleRank)
    actors = [cls.options(
        name=f"vllm_Worker_{instance}_TP{r}",
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_ids[r % len(node_ids)], soft=False),
    ).remote() for r in range(world)]
    return actors, dict(enumerate(ray.get([a.where.remote() for a in actors], timeout=120)))


def finished_job(address: str, node_ids: list[str], instance: str = "old") -> None:
    """An earlier job: a driver that places rank actors on ``node_ids`` and exits (its actors die
    with it and stay in the GCS actor table as DEAD). Run in its own process."""
    import ray

    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    start_idle(instance, len(node_ids), node_ids)
    ray.shutdown()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def cluster(n_nodes: int) -> Iterator[Any]:
    """A head and ``n_nodes - 1`` worker nodes (1 CPU, 80 MiB object store each), this process
    connected as a driver. Every port is a free one: the GCS and the raylets pick their own, the
    head's dashboard (Ray's default 8265) and dashboard agent (52365) get one here, so a Ray
    cluster already running on the box is no obstacle (tests/collect/test_ray_ports.py)."""
    import ray
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, connect=False,
                head_node_args={**NODE_ARGS, "include_dashboard": True,
                                "dashboard_port": free_port(),
                                "dashboard_agent_listen_port": free_port(),
                                "_system_config": FAST_HEALTH})
    try:
        for _ in range(n_nodes - 1):
            c.add_node(**NODE_ARGS)
        c.wait_for_nodes()
        ray.init(address=c.address, logging_level="WARNING", log_to_driver=False)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def start_ranks(world: int, node_ids: list[str], stall: tuple[int, str], progress: Path,
                instance: str = "sm120kittest", env: dict[str, str] | None = None,
                ) -> tuple[list[Any], list[Any], dict[int, dict[str, Any]]]:
    """``world`` rank actors, rank r on ``node_ids[r % len]`` (``env``: their environment
    through Ray's runtime_env); returns (actors, run refs, where each rank runs: pid, node id)."""
    import ray
    import ray.cloudpickle
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # by value: the Ray workers cannot import this test module (tests/ is not on their path)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cls = ray.remote(num_cpus=0)(DcpWarmupRank)
    actors = [cls.options(
        name=f"vllm_Worker_{instance}_TP{r}",
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_ids[r % len(node_ids)], soft=False),
        **({"runtime_env": {"env_vars": env}} if env else {}),
    ).remote(r, world, str(progress)) for r in range(world)]
    where = dict(enumerate(ray.get([a.where.remote() for a in actors], timeout=120)))
    init = f"tcp://127.0.0.1:{free_port()}"
    refs = [a.run.remote(init, stall) for a in actors]
    return actors, refs, where


def wait_stalled(progress: Path, world: int, stall_rank: int, timeout: float = 150.0) -> None:
    """Until the stalled rank logged its inject-stall line and every other rank announced the
    collective it is entering in the merge phase."""
    end = time.monotonic() + timeout
    text = ""
    while time.monotonic() < end:
        text = progress.read_text() if progress.exists() else ""
        msgs = [json.loads(ln) for ln in text.splitlines() if ln.strip()]
        stalled = any(m["r"] == stall_rank and m["k"] == "log" and "inject-stall" in m["text"]
                      for m in msgs)
        waiting = {m["r"] for m in msgs if m["k"] == "coll" and m.get("phase") == "merge"}
        if stalled and len(waiting - {stall_rank}) == world - 1:
            time.sleep(1.0)  # into the gloo wait
            return
        time.sleep(0.3)
    raise AssertionError(f"ranks did not reach the stall in {timeout}s:\n{text[-3000:]}")
