"""What a Ray cluster looks like *now*: its live nodes, its live jobs and the vLLM worker actors of
those jobs, grouped per vLLM instance, kept apart from the cluster's history.

A long-lived cluster remembers everything: the GCS actor table keeps DEAD actors of finished jobs
and the node table keeps nodes that died hours ago. Only **live actors (state ``ALIVE``) of live
jobs** are ranks; only **live nodes** are collected. Dead actors, actors of finished jobs and dead
nodes are recorded in ``ray/cluster.json`` under ``history`` and are never a node outcome, a rank
or a verdict line.

Local discovery on the collecting node (``collect --ray`` without ``--no-ray-local``) is scoped
to the processes of the cluster's live jobs: the live jobs' driver processes on that node and the
pids of live actors there, with their process trees (ancestors and descendants: the API server
above an engine-core driver, the workers below). A ``VLLM::``-titled process that belongs to no
live job of this cluster is not collected (:func:`in_scope`).

The actor name says the instance and the ranks: vLLM's ``build_actor_name`` names its workers
``vllm_Worker_<instance>_TP<t>[_PP<p>][_PCP<c>]``; two ``vllm serve`` on one cluster have two
instance ids, and their ranks are grouped apart (:func:`instances`).

Imports ``ray`` only inside functions.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

_RANK_IN_NAME = re.compile(r"_(TP|PP|PCP|DCP|DP|EP)(\d+)")
_INSTANCE = re.compile(r"^vllm_Worker_(.+?)(?:_(?:TP|PP|PCP|DCP|DP|EP)\d+)*$")


def ranks_from_name(name: str | None) -> dict[str, int]:
    """``vllm_Worker_ab12_TP3_PP1`` → ``{'TP': 3, 'PP': 1}``."""
    return {k: int(v) for k, v in _RANK_IN_NAME.findall(name or "")}


def instance_from_name(name: str | None) -> str | None:
    """``vllm_Worker_ab12_TP3_PP1`` → ``ab12``; ``None`` for a name not built like vLLM's."""
    m = _INSTANCE.match(name or "")
    return m.group(1) if m else None


@dataclass
class RayNode:
    node_id: str
    ip: str
    hostname: str
    alive: bool
    is_head: bool = False

    @property
    def folder(self) -> str:
        return f"nodes/{self.node_id[:12]}"


@dataclass
class RayJob:
    job_id: str
    alive: bool
    driver_pid: int | None = None
    driver_ip: str = ""
    entrypoint: str = ""
    #: what Ray's job table holds when it differs from ``entrypoint`` (see clean_entrypoint)
    entrypoint_recorded: str | None = None


_EMPTY_ARG = re.compile(r'(?:\s+(?:""|\'\'))+\s*$')
_TITLE = re.compile(r"^(?:VLLM|sm120kit)::\S+")


def clean_entrypoint(recorded: str) -> tuple[str, str | None]:
    """Ray records a driver's entrypoint as ``list2cmdline(psutil.Process().cmdline())`` when
    the driver connects. vLLM retitles its processes (``setproctitle``, e.g. ``VLLM::EngineCore``)
    by overwriting the argv area, so the arguments read back as empty strings and Ray records
    ``VLLM::EngineCore "" "" ...``. Returns (entrypoint without the blanked arguments, what Ray
    recorded when that differs); the typed command is not recoverable from the job table."""
    text = recorded.strip()
    cleaned = _EMPTY_ARG.sub("", text)
    while cleaned != text:  # interleaved blanks: drop every empty quoted argument
        text = cleaned
        cleaned = _EMPTY_ARG.sub("", text)
    cleaned = re.sub(r'\s(?:""|\'\')(?=\s)', "", cleaned)
    if _TITLE.match(cleaned) and cleaned != recorded.strip():
        cleaned += "  (process title set by vLLM; the command line it replaced is not recorded)"
    return cleaned, (recorded if cleaned != recorded else None)


@dataclass
class RayWorker:
    actor_id: str
    class_name: str
    name: str | None
    pid: int | None
    node_id: str | None
    state: str
    job_id: str = ""
    ranks: dict[str, int] = field(default_factory=dict)

    @property
    def rank(self) -> int | None:
        """The tensor-parallel rank named by the actor (vLLM's ``build_actor_name``)."""
        for k in ("TP", "DCP", "PCP", "PP", "DP", "EP"):
            if k in self.ranks:
                return self.ranks[k]
        return None

    @property
    def label(self) -> str:
        return self.name or f"{self.class_name}:{self.actor_id[:8]}"

    @property
    def instance(self) -> str:
        return instance_from_name(self.name) or (f"job-{self.job_id}" if self.job_id else "-")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rank": self.rank, "label": self.label, "instance": self.instance}


@dataclass
class ClusterView:
    nodes: list[RayNode]  # live nodes: collected
    workers: list[RayWorker]  # live vLLM worker actors of live jobs: the ranks
    jobs: list[RayJob]  # live jobs
    actors: list[RayWorker]  # every live actor of a live job (any class): the local scope
    dead_nodes: list[RayNode] = field(default_factory=list)
    history: list[RayWorker] = field(default_factory=list)  # dead / finished-job worker actors
    finished_jobs: list[RayJob] = field(default_factory=list)
    source: str = "state-api"

    def to_json(self) -> dict[str, Any]:
        return {
            "actors_source": self.source,
            "nodes": [{**asdict(n), "folder": n.folder} for n in self.nodes],
            "jobs": [asdict(j) for j in self.jobs],
            "workers": [w.to_dict() for w in self.workers],
            "instances": instances(self.workers),
            "history": {
                "note": "dead nodes, dead actors and actors of finished jobs: not collected, "
                        "not ranks",
                "nodes": [asdict(n) for n in self.dead_nodes],
                "workers": [w.to_dict() for w in self.history],
                "jobs": [asdict(j) for j in self.finished_jobs],
            },
        }


def instances(workers: list[RayWorker]) -> dict[str, list[str]]:
    """Worker labels per vLLM instance (rank order)."""
    out: dict[str, list[str]] = {}
    for w in sorted(workers, key=lambda w: (w.instance, w.rank if w.rank is not None else 1 << 30)):
        out.setdefault(w.instance, []).append(w.label)
    return out


def list_nodes(ray: Any) -> list[RayNode]:
    out = []
    for n in ray.nodes():
        res = n.get("Resources") or {}
        out.append(RayNode(node_id=str(n["NodeID"]), ip=str(n.get("NodeManagerAddress") or ""),
                           hostname=str(n.get("NodeManagerHostname") or ""),
                           alive=bool(n.get("Alive")),
                           is_head="node:__internal_head__" in res))
    return out


def list_jobs() -> list[RayJob]:
    """The GCS job table (every driver that ever joined, with ``IsDead``)."""
    import ray._private.state as gcs_state

    out = []
    for j in gcs_state.jobs():
        entry, recorded = clean_entrypoint(str(j.get("Entrypoint") or ""))
        out.append(RayJob(job_id=str(j.get("JobID") or ""), alive=not j.get("IsDead"),
                          driver_pid=int(j["DriverPid"]) if j.get("DriverPid") else None,
                          driver_ip=str(j.get("DriverIPAddress") or ""),
                          entrypoint=entry[:300],
                          entrypoint_recorded=recorded[:300] if recorded else None))
    return out


def list_actors(timeout: int = 10) -> tuple[list[RayWorker], str]:
    """Every actor in the cluster table (any state) and the source used: ``state-api`` (the
    dashboard's state API) or ``gcs`` (the GCS actor table, when there is no dashboard)."""
    rows: list[RayWorker] = []
    try:
        from ray.util.state import list_actors as state_actors

        for a in state_actors(detail=True, limit=10000, timeout=timeout,
                              raise_on_missing_output=False):
            rows.append(RayWorker(actor_id=a.actor_id, class_name=a.class_name or "",
                                  name=a.name or None, pid=a.pid, node_id=a.node_id,
                                  state=str(a.state), job_id=str(a.job_id or "")))
        return rows, "state-api"
    except Exception:  # no dashboard on the cluster: the GCS table has the same fields
        import ray._private.state as gcs_state

        for a in gcs_state.actors().values():
            addr = a.get("Address") or {}
            rows.append(RayWorker(actor_id=str(a.get("ActorID")),
                                  class_name=str(a.get("ActorClassName") or ""),
                                  name=a.get("Name") or None, pid=a.get("Pid") or None,
                                  node_id=addr.get("NodeID"), state=str(a.get("State")),
                                  job_id=str(a.get("JobID") or "")))
        return rows, "gcs"


def _is_worker(a: RayWorker, classes: tuple[str, ...]) -> bool:
    return a.class_name in classes or a.class_name.rsplit(".", 1)[-1] in classes


def build_view(nodes: list[RayNode], jobs: list[RayJob], actors: list[RayWorker],
               classes: tuple[str, ...], *, own_job: str | None = None,
               source: str = "state-api") -> ClusterView:
    """Split the tables into now (live nodes, live jobs, their ALIVE actors) and history."""
    live_jobs = {j.job_id for j in jobs if j.alive and j.job_id != own_job}
    known_jobs = {j.job_id for j in jobs}

    def live(a: RayWorker) -> bool:
        # an actor whose job is not in the table (table unavailable) is judged by its own state
        return a.state == "ALIVE" and (a.job_id in live_jobs or a.job_id not in known_jobs)

    for a in actors:
        a.ranks = ranks_from_name(a.name)
    live_actors = [a for a in actors if live(a) and a.job_id != own_job]
    workers = [a for a in live_actors if _is_worker(a, classes)]
    history = [a for a in actors if _is_worker(a, classes) and not live(a) and a.job_id != own_job]
    workers.sort(key=lambda w: (w.instance, w.node_id or "",
                                w.rank if w.rank is not None else 1 << 30))
    return ClusterView(
        nodes=[n for n in nodes if n.alive], workers=workers,
        jobs=[j for j in jobs if j.job_id in live_jobs], actors=live_actors,
        dead_nodes=[n for n in nodes if not n.alive], history=history,
        finished_jobs=[j for j in jobs if not j.alive], source=source)


def cluster_view(ray: Any, classes: tuple[str, ...], timeout: int = 10) -> ClusterView:
    """Read the node, job and actor tables of the connected cluster (collect's own job excluded)."""
    nodes = list_nodes(ray)
    try:
        jobs = list_jobs()
    except Exception:  # an older GCS without the job table: actor states alone decide
        jobs = []
    actors, source = list_actors(timeout)
    try:
        own = ray.get_runtime_context().get_job_id()
    except Exception:
        own = None
    return build_view(nodes, jobs, actors, classes, own_job=own, source=source)


def scope_pids(view: ClusterView, node: RayNode) -> list[int]:
    """The pids on ``node`` that belong to the cluster's live jobs: their drivers there (by the
    driver's IP) and every live actor placed there."""
    pids = {j.driver_pid for j in view.jobs if j.driver_pid and j.driver_ip == node.ip}
    pids |= {a.pid for a in view.actors if a.pid and a.node_id == node.node_id}
    return sorted(p for p in pids if p)


def in_scope(pid: int, roots: list[int]) -> bool:
    """Runs on the node: is ``pid`` one of ``roots``, or an ancestor or a descendant of one?"""
    import psutil

    if pid in roots:
        return True
    try:
        proc = psutil.Process(pid)
        if any(p.pid in roots for p in proc.parents()):
            return True  # below a driver or an actor
    except psutil.Error:
        return False
    for r in roots:  # above one (the API server over an engine-core driver)
        try:
            if any(p.pid == pid for p in psutil.Process(r).parents()):
                return True
        except psutil.Error:
            continue
    return False


__all__ = ["ClusterView", "RayJob", "RayNode", "RayWorker", "build_view", "clean_entrypoint",
           "cluster_view",
           "in_scope", "instance_from_name", "instances", "list_actors", "list_jobs",
           "list_nodes", "ranks_from_name", "scope_pids"]
