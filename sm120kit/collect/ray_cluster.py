"""Collect across the nodes of a Ray cluster (vLLM's ``--distributed-executor-backend ray``).

``sm120kit collect --ray [ADDRESS]`` connects to the running cluster as a Ray driver, lists the
nodes and vLLM's worker actors (class ``RayWorkerProc`` in vLLM's Ray executor V2, 0.24+, actor
names ``vllm_Worker_<instance>_TP<t>[_PP<p>][_PCP<c>]``; ``RayWorkerWrapper`` in the older
executor) through Ray's state API (the GCS actor table when the cluster runs without a dashboard),
and runs :func:`node_snapshot` on every node as a Ray task pinned there (node-affinity scheduling,
``soft=False``, no CPU reserved, no retries). Each task runs the same per-host collectors as
``--attach`` (py-spy twice plus ``--native``, NVML, NCCL RAS, Flight Recorder, the workers' Ray
log tails, doctor tiers 0-1, host facts) under the same per-collector timeouts and what is left
of ``--deadline``, redacts secrets on the node, and returns its files through Ray. The head writes
them into ONE bundle, ``nodes/<node-id-prefix>/...`` per node (every text file passes the head's
redactor again, so host obfuscation uses one map for all nodes), plus ``ray/cluster.json`` and a
manifest whose ``nodes`` list records each node's status (``ok``, ``error``,
``not-collected`` = no answer before ``--deadline``, ``lost``, ``interrupted``) and its
collectors. A node that dies or never answers is recorded, never fatal, and makes the bundle
``partial: true`` (exit 1). Our own limits are never the cluster's fault: a node that did not
answer before ``--deadline`` is "not collected in time", and "lost" needs evidence about the
node itself (Ray's ``NodeDiedError`` / ``LocalRayletDiedError``, or the GCS marking it dead); a
Ctrl-C leaves a bundle flagged ``interrupted``. Which nodes, actors and local processes count is
:mod:`.ray_view` (live actors of live jobs; the rest is history); the address is checked to be a
GCS within the deadline before ``ray.init`` (:mod:`.ray_probe`).

Only the ``collect/ray_*.py`` modules import ``ray``, and only inside functions: every other
command works without it.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from sm120kit.collect.ray_probe import (
    ADDRESS_HINT,
    QUIET_ENV,
    NotInTime,
    probe,
    require_gcs,
    split_address,
)
from sm120kit.collect.ray_view import (
    ClusterView,
    RayNode,
    RayWorker,
    cluster_view,
    in_scope,
    instance_from_name,
    instances,
    ranks_from_name,
    scope_pids,
)
from sm120kit.errors import UserError
from sm120kit.evidence.procs import Proc, describe, discover
from sm120kit.evidence.redact import Redactor
from sm120kit.services.bundles import Bundle, CollectorRecord, iso
from sm120kit.services.snapshot import (
    BundleHooks,
    CollectContext,
    Options,
    env_hints,
    finalize,
    make_verdict,
    snapshot,
)

#: vLLM's Ray worker actor classes: ``RayWorkerProc`` (v1 ``ray_executor_v2.py``, vLLM 0.24+)
#: and ``RayWorkerWrapper`` (v1 ``ray_utils.py``, the executor before V2, up to 0.32).
DEFAULT_WORKER_CLASSES: tuple[str, ...] = ("RayWorkerProc", "RayWorkerWrapper")
PIP_HINT = "pip install 'sm120kit[ray]'  (Ray's client; the cluster's Ray version must match)"

NodeStatus = Literal["ok", "error", "not-collected", "lost", "interrupted"]
#: seconds between progress lines while nodes are awaited
PROGRESS_EVERY_S = 5.0
#: of ``--deadline``, kept for the verdict, summary, manifest and tarball after the wait
FINISH_RESERVE_S = 1.0
#: the diagnose verdict is skipped (the bundle says "not judged here") when less is left
JUDGE_MIN_S = 0.8
NO_WORKERS_HINT = ("is vLLM running with the Ray executor (--distributed-executor-backend ray)? "
                   "its workers are Ray actors of class RayWorkerProc (vLLM 0.24+) or "
                   "RayWorkerWrapper; another class: --ray-worker-class CLASS")

_BINARY_SUFFIX = (".json", ".txt", ".md", ".log", ".out", ".err")


def import_ray() -> Any:
    """``ray``, or one clear error (exit 2) with the pip hint when it is not installed."""
    try:
        import ray
    except ImportError:
        raise UserError("--ray needs the `ray` package, which is not installed",
                        hint=PIP_HINT) from None
    return ray


def _resolve(address: str | None) -> str | None:
    """The address ``ray.init`` would use: ``auto`` resolves through ``RAY_ADDRESS`` or the
    local node's ``/tmp/ray/ray_current_cluster`` (no network); ``None``: no cluster here."""
    target = address or os.environ.get("RAY_ADDRESS") or "auto"
    if target == "auto":
        try:
            from ray._private.services import canonicalize_bootstrap_address

            return canonicalize_bootstrap_address("auto")
        except Exception:  # e.g. several local clusters: Ray's own message says which
            return "auto"
    return target


def quiet_ray(debug: bool) -> None:
    """Keep Ray's C++ core and gRPC from printing warnings into the driver's stderr (and the
    Python ``ray`` loggers at ERROR) unless ``--debug``."""
    import logging

    if debug:
        return
    for k, v in QUIET_ENV.items():
        os.environ.setdefault(k, v)
    for name in ("ray", "ray._private", "ray.util"):
        logging.getLogger(name).setLevel(logging.ERROR)


def connect(address: str | None, deadline_s: float = 60.0, *, debug: bool = False,
            named_s: float | None = None) -> Any:
    """Join the cluster as a driver (``auto``: ``RAY_ADDRESS`` or the local node's cluster),
    every network step within ``deadline_s``: the address is first asked whether it is a GCS
    (:func:`~sm120kit.collect.ray_probe.require_gcs`, a child process killed at its deadline),
    then ``ray.init`` runs in a thread that is given up on at what is left of the deadline.
    ``named_s``: the ``--deadline`` the messages name (``deadline_s`` may be what is left of it)."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    t0 = time.monotonic()
    quiet_ray(debug)
    target = _resolve(address)
    if target is None:
        raise UserError("no Ray cluster found on this node (no RAY_ADDRESS, no running `ray start`)",
                        hint="pass the head's GCS address: sm120kit collect --ray HEAD_IP:6379")
    if target.startswith(("http://", "https://")):
        raise UserError(f"{target} is a dashboard URL, not a Ray GCS address", hint=ADDRESS_HINT)
    if target.startswith("ray://"):
        refuse_client_address(target, deadline_s, debug=debug)
    probed = target != "auto"
    if probed:
        require_gcs(target, deadline_s, debug=debug, named_s=named_s)
    box: dict[str, BaseException] = {}

    def init() -> None:
        try:
            ray.init(address=target, logging_level="DEBUG" if debug else "ERROR",
                     log_to_driver=False, namespace="sm120kit-collect")
        except BaseException as exc:
            box["exc"] = exc

    th = threading.Thread(target=init, name="ray-init", daemon=True)
    th.start()
    left = max(0.1, deadline_s - (time.monotonic() - t0))
    th.join(left)
    if th.is_alive():
        said = f"the Ray GCS at {target} answered, but joining" if probed else (
            f"joining the Ray cluster at {target}")
        raise NotInTime(f"not collected in time: {said} as a driver did not finish within "
                        f"--deadline {named_s or deadline_s:g}s",
                        hint="raise --deadline; if it persists check `ray status` on the head and "
                        "that this Ray version matches the cluster's (--debug shows Ray's log)")
    exc = box.get("exc")
    if exc is not None:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"cannot connect to the Ray cluster at {target}: {first}",
                        hint=ADDRESS_HINT) from None
    return ray


def refuse_client_address(target: str, deadline_s: float, *, debug: bool = False) -> None:
    """``ray://HOST:PORT`` is a Ray Client server (port 10001 by default), which proxies a
    driver but not the node tasks and state API collect needs: refused with the reason, after
    asking the port (within the deadline) so the line says what really answered."""
    t0 = time.monotonic()
    hp = split_address(target[len("ray://"):])
    if hp is None:
        raise UserError(f"{target}: not a ray://HOST:PORT address", hint=ADDRESS_HINT)
    host, port = hp
    shown = f"[{host}]" if ":" in host else host
    try:
        with socket.create_connection((host, port), timeout=max(0.5, min(5.0, deadline_s))):
            pass
    except OSError as exc:
        raise UserError(f"{target} is a Ray Client address and nothing answers there "
                        f"({exc.strerror or exc}); collect needs the cluster's GCS address, e.g. "
                        f"{shown}:6379", hint=ADDRESS_HINT) from None
    extra = ""
    left = deadline_s - (time.monotonic() - t0)
    if port != 6379 and left > 2.0:  # is the default GCS port of that host a GCS? (asked, not assumed)
        res = probe(f"{shown}:6379", min(left - 0.5, 4.0), debug=debug)
        extra = (f"; the GCS at {shown}:6379 answered: sm120kit collect --ray {shown}:6379"
                 if res.ok else f"; {shown}:6379 is not a GCS either ({res.kind})")
    raise UserError(f"{target} is a Ray Client address: collect needs the GCS address, e.g. "
                    f"{shown}:6379 (the Ray Client server accepts connections on port {port} but "
                    f"cannot run collect's per-node tasks){extra}", hint=ADDRESS_HINT)


@contextmanager
def native_stderr_hidden(debug: bool) -> Iterator[Path | None]:
    """Ray's C++ core and gRPC write to file descriptor 2 directly (``logging.cc ... Set ray log
    level``, ``rpc_client.h`` retries), whatever Python's logging says. Unless ``--debug``, fd 2
    points at a temporary file while this block runs and Python's ``sys.stderr`` (collect's own
    progress and errors) at a copy of the real stderr; the file is yielded so its text can go
    into the bundle."""
    if debug:
        yield None
        return
    sys.stderr.flush()
    real = os.dup(2)
    fd, name = tempfile.mkstemp(prefix="sm120kit-ray-stderr-", suffix=".log")
    old = sys.stderr
    try:
        os.dup2(fd, 2)
        sys.stderr = open(real, "w", buffering=1, encoding="utf-8", errors="replace",  # noqa: SIM115
                          closefd=False)
        yield Path(name)
    finally:
        try:
            sys.stderr.flush()
        finally:
            sys.stderr = old
            os.dup2(real, 2)
            os.close(real)
            os.close(fd)
            try:
                os.unlink(name)
            except OSError:
                pass


# --- on every node ---------------------------------------------------------------------------
def _ray_logs_dir() -> Path | None:
    try:
        import ray._private.worker as rw

        node = rw._global_node
        if node is not None:
            return Path(node.get_logs_dir_path())
    except Exception:
        pass
    p = Path(tempfile.gettempdir()) / "ray" / "session_latest" / "logs"
    return p if p.is_dir() else None


def _worker_log_tails(workers: list[dict[str, Any]], lines: int) -> dict[str, list[str]]:
    """The last ``lines`` of every worker actor's Ray log files (``worker-*-<pid>.out/.err``)."""
    d = _ray_logs_dir()
    out: dict[str, list[str]] = {}
    if d is None:
        return out
    for w in workers:
        pid = w.get("pid")
        if not pid:
            continue
        for f in sorted(d.glob(f"worker-*-{pid}.*"))[:4]:
            try:
                with open(f, "rb") as fh:
                    fh.seek(max(0, f.stat().st_size - 256 * 1024))
                    text = fh.read().decode("utf-8", "replace")
            except OSError:
                continue
            tail = [ln for ln in text.splitlines() if ln.strip()][-lines:]
            if tail:
                out[f"{w.get('label')}{f.suffix}"] = tail
    return out


def _node_procs(spec: dict[str, Any], ctx: CollectContext) -> list[Proc]:
    import psutil

    procs: list[Proc] = []
    for w in spec["workers"]:
        try:
            d = describe(psutil.Process(int(w["pid"])), label=str(w["label"]))
        except (psutil.Error, TypeError, ValueError):
            d = None
        if d is None:
            ctx.notes.append(f"worker actor {w['label']} (pid {w['pid']}) is gone on this node")
            continue
        d.role, d.rank, d.is_python = "worker", w.get("rank"), True
        procs.append(d)
    if spec.get("discover"):  # vLLM-titled processes of the cluster's live jobs only
        seen = {p.pid for p in procs}
        roots = [int(x) for x in spec.get("scope") or []]
        found = [p for p in discover() if p.pid not in seen and p.pid != os.getpid()]
        keep = [p for p in found if in_scope(p.pid, roots)]
        if len(keep) < len(found):
            ctx.notes.append(f"{len(found) - len(keep)} vLLM-titled process(es) on this node "
                             "belong to no live job of this Ray cluster: not collected")
        procs += keep
    return procs


def node_snapshot(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs ON a node (a Ray task): snapshot the worker pids of ``spec`` (and, with
    ``spec['discover']``, the node's vLLM processes found by title) into a temporary bundle with
    the usual collectors, and return its files (secrets already redacted) and the analysis."""
    import shutil

    t0 = time.monotonic()
    opts = Options(**spec["options"], hooks=spec.get("hooks") or BundleHooks())
    opts.deadline_s = max(1.0, float(spec["deadline_s"]))
    ctx = CollectContext(mode="ray-node", reason=str(spec["reason"]), stall_kind=spec.get("stall_kind"))
    tmp = Path(tempfile.mkdtemp(prefix="sm120kit-ray-node-"))
    try:
        bundle = Bundle.create(tmp, Redactor(enabled=bool(spec["redact"])),
                               meta={"mode": "ray-node", "node_id": spec["node_id"]})
        procs = _node_procs(spec, ctx)
        ctx.logs = _worker_log_tails(spec["workers"], opts.log_tail_lines)
        env_hints(procs, ctx, opts)
        if not procs:
            ctx.notes.append("no vLLM worker process on this node: host, GPU and RAS facts only")
        res = None
        try:
            res = snapshot(bundle, procs, ctx, opts)
        finally:
            finalize(bundle, procs, ctx, res, opts)
        files: dict[str, bytes] = {}
        for p in sorted(bundle.root.rglob("*")):
            if p.is_file() and not p.is_symlink() and not p.name.endswith(".part"):
                files[str(p.relative_to(bundle.root))] = p.read_bytes()
        return {
            "hostname": socket.gethostname(), "pid": os.getpid(), "files": files,
            "analysis": {str(k): v for k, v in (res.analysis if res else {}).items()},
            "verdict": res.verdict if res else [], "collectors": [asdict(r) for r in bundle.records],
            "processes": [p.to_dict() for p in procs], "seconds": round(time.monotonic() - t0, 3),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --- on the head: gather, write, judge ---------------------------------------------------------
@dataclass
class NodeOutcome:
    node_id: str
    folder: str
    status: NodeStatus
    seconds: float
    ip: str = ""
    hostname: str = ""
    is_head: bool = False
    error: str | None = None
    workers: list[str] = field(default_factory=list)  # actor labels expected on the node
    collectors: list[dict[str, Any]] = field(default_factory=list)
    analysis: dict[str, dict[str, Any]] = field(default_factory=dict)
    processes: list[dict[str, Any]] = field(default_factory=list)

    def to_manifest(self, red: Redactor) -> dict[str, Any]:
        return {"node_id": self.node_id, "folder": self.folder, "status": self.status,
                "seconds": self.seconds, "ip": red.text(self.ip), "hostname": red.text(self.hostname),
                "is_head": self.is_head, "error": red.text(self.error) if self.error else None,
                "workers": self.workers, "collectors": self.collectors}


@dataclass
class RayOptions:
    address: str | None = None
    worker_classes: tuple[str, ...] = DEFAULT_WORKER_CLASSES
    discover_local: bool = True  # also snapshot vLLM processes found by title on collect's node
    margin_s: float = 4.0  # of --deadline kept for the transfer and the head's writing
    debug: bool = False  # --debug: Ray's and gRPC's own log lines are not suppressed


@dataclass
class RayCollectResult:
    bundle_dir: Path
    tarball: Path | None
    nodes: list[NodeOutcome]
    workers: list[RayWorker]
    verdict: list[str]
    seconds: float
    source: str = "state-api"
    partial: bool = False
    interrupted: bool = False
    #: why the bundle is partial when no node says it (joining the cluster not done in time)
    partial_reason: str | None = None


def _is_binary(rel: str, data: bytes) -> bool:
    if rel.startswith("flight/") and not rel.endswith(_BINARY_SUFFIX):
        return True  # Flight Recorder pickles: copied unmodified, as on one host
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def write_node_files(bundle: Bundle, folder: str, files: dict[str, bytes]) -> int:
    """Write one node's files under ``folder``; text passes the head's redactor."""
    n = 0
    for rel, data in sorted(files.items()):
        dest = f"{folder}/{rel}"
        if _is_binary(rel, data):
            if len(data) <= 64 * 1024 * 1024 and not bundle.closed:
                bundle.path(dest).write_bytes(data)
                n += 1
            continue
        bundle.write_text(dest, data.decode("utf-8"), cap=max(bundle.cap, len(data) + 1024))
        n += 1
    return n


def _spec(node: RayNode, workers: list[RayWorker], opts: Options, deadline_s: float,
          ctx: CollectContext, redact: bool, scope: list[int] | None) -> dict[str, Any]:
    return {
        "node_id": node.node_id, "deadline_s": deadline_s, "redact": redact,
        "reason": ctx.reason, "stall_kind": ctx.stall_kind, "discover": scope is not None,
        "scope": scope or [],
        "options": {f.name: getattr(opts, f.name) for f in fields(opts)
                    if f.name not in ("deadline_s", "hooks")},
        "hooks": opts.hooks,  # module-level functions: pickled by reference
        "workers": [{"pid": w.pid, "label": w.label, "rank": w.rank, "class": w.class_name}
                    for w in workers if w.node_id == node.node_id and w.pid],
    }


def _classify_failure(ray: Any, exc: BaseException, node: RayNode,
                      wait_s: float = 0.0) -> tuple[NodeStatus, str]:
    """``lost`` only on evidence about the node; else ``error`` with Ray's one-line reason.
    ``wait_s``: how long the GCS may take to mark a node dead whose raylet just vanished (its
    health check notices in seconds) before the failure is taken as the task's alone."""
    from ray import exceptions as rex

    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    # evidence about the node itself: its raylet or the node died (Ray says so), or the GCS marks
    # it dead; a crashed task worker or an unschedulable task is about collect's task, not the node
    node_types = tuple(t for t in (getattr(rex, n, None) for n in (
        "NodeDiedError", "LocalRayletDiedError")) if isinstance(t, type))
    if isinstance(exc, node_types) or not _node_alive(ray, node.node_id, wait_s=wait_s):
        return "lost", f"{type(exc).__name__}: {msg}"
    if isinstance(exc, getattr(rex, "RayTaskError", ())):
        cause = getattr(exc, "cause", None)
        if cause is not None:
            msg = f"{type(cause).__name__}: {cause}"
    if "No module named 'sm120kit" in str(exc):
        msg = "sm120kit is not installed in the Python of this node's Ray workers: " + msg
    return "error", msg[:500]


def _node_alive(ray: Any, node_id: str, wait_s: float = 0.0) -> bool:
    """Whether the GCS still marks the node alive (polled up to ``wait_s`` for it to change)."""
    end = time.monotonic() + wait_s
    while True:
        try:
            alive = any(n["NodeID"] == node_id and n.get("Alive") for n in ray.nodes())
        except Exception:
            return True  # the GCS did not answer: no evidence against the node
        if not alive or time.monotonic() >= end:
            return alive
        time.sleep(0.25)


def gather(ray: Any, bundle: Bundle, nodes: list[RayNode], workers: list[RayWorker],
           opts: Options, ctx: CollectContext, *, deadline: float, redact: bool,
           scope: dict[str, list[int]] | None = None,
           on_event: Callable[[str], None] | None = None,
           margin_s: float = 4.0) -> list[NodeOutcome]:
    """Run :func:`node_snapshot` on every live node of ``nodes`` (pinned), wait until
    ``deadline`` (``time.monotonic()`` value), write each node's files into ``bundle``; never
    raises for a node's failure. ``scope``: node id → the pids of the cluster's live jobs there,
    for the nodes where vLLM-titled processes are also discovered (only within those trees).
    A line every :data:`PROGRESS_EVERY_S` says which nodes are still awaited; a Ctrl-C stops the
    wait and leaves the nodes not yet answered ``interrupted`` (``bundle.meta['interrupted']``)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    t0 = time.monotonic()
    remote = ray.remote(num_cpus=0, max_retries=0)(node_snapshot)
    node_deadline = max(1.0, deadline - t0 - margin_s)
    outcomes: dict[str, NodeOutcome] = {}
    pending: dict[Any, RayNode] = {}
    for n in nodes:
        bundle.redactor.add_host(n.hostname)
        bundle.redactor.add_host(n.ip)
        oc = NodeOutcome(n.node_id, n.folder, "not-collected", 0.0, ip=n.ip, hostname=n.hostname,
                         is_head=n.is_head, workers=[w.label for w in workers
                                                     if w.node_id == n.node_id])
        outcomes[n.node_id] = oc
        spec = _spec(n, workers, opts, node_deadline, ctx, redact, (scope or {}).get(n.node_id))
        ref = remote.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(n.node_id, soft=False),
            name=f"sm120kit-collect-{n.node_id[:12]}").remote(spec)
        pending[ref] = n
    if on_event:
        on_event(f"collecting from {len(pending)} node(s) ({len(workers)} vLLM worker actors)")
    try:
        with _ctrl_c_kept():
            _await(ray, bundle, pending, outcomes, t0, deadline, on_event)
    except KeyboardInterrupt:
        bundle.meta["interrupted"] = True
        for n in pending.values():
            oc = outcomes[n.node_id]
            oc.status, oc.seconds = "interrupted", round(time.monotonic() - t0, 3)
            oc.error = "not collected: the collect was interrupted (Ctrl-C) before this node answered"
        _cancel(ray, list(pending))
        return [outcomes[n.node_id] for n in nodes]
    budget = opts.deadline_s
    for n in pending.values():
        oc = outcomes[n.node_id]
        oc.seconds = round(time.monotonic() - t0, 3)
        alive = _node_alive(ray, n.node_id)
        oc.status = "not-collected" if alive else "lost"
        oc.error = (f"not collected in time: no answer before --deadline {budget:g}s (collect's "
                    "limit; nothing is known against the node)" if alive
                    else "the GCS marks the node dead: it left the cluster during the collect")
    _cancel(ray, list(pending))
    return [outcomes[n.node_id] for n in nodes]


def _cancel(ray: Any, refs: list[Any]) -> None:
    for ref in refs:
        try:
            ray.cancel(ref, force=True)
        except Exception:
            pass


_CTRL_C = threading.Event()


@contextmanager
def _ctrl_c_kept() -> Iterator[None]:
    """Ctrl-C while the nodes are awaited is never lost: the handler records it before it
    raises, since a KeyboardInterrupt raised inside ``ray.wait``'s native call can be swallowed
    there (the wait then just returns); ``_await`` raises it again on its next turn."""
    _CTRL_C.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_int(signum: int, frame: Any) -> None:
        _CTRL_C.set()
        raise KeyboardInterrupt

    prev = signal.signal(signal.SIGINT, on_int)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, prev)


def _await(ray: Any, bundle: Bundle, pending: dict[Any, RayNode],
           outcomes: dict[str, NodeOutcome], t0: float, deadline: float,
           on_event: Callable[[str], None] | None) -> None:
    """Take the nodes' answers as they come until ``deadline``; ``pending`` keeps the rest."""
    next_line = time.monotonic() + PROGRESS_EVERY_S
    while pending:
        if _CTRL_C.is_set():
            raise KeyboardInterrupt
        now = time.monotonic()
        left = deadline - now
        if left <= 0:
            break
        if now >= next_line:
            next_line = now + PROGRESS_EVERY_S
            if on_event:
                on_event(f"waiting for {len(pending)} node(s) "
                         f"({', '.join(n.folder.split('/', 1)[-1] for n in pending.values())}): "
                         f"{now - t0:.0f}s in, {left:.0f}s left of the deadline")
        ready, _ = ray.wait(list(pending), num_returns=1,
                            timeout=max(0.0, min(left, next_line - now)))
        for ref in ready:
            n = pending.pop(ref)
            oc = outcomes[n.node_id]
            oc.seconds = round(time.monotonic() - t0, 3)
            try:
                got = ray.get(ref)
            except Exception as exc:
                oc.status, oc.error = _classify_failure(
                    ray, exc, n, wait_s=max(0.0, min(3.0, deadline - time.monotonic())))
                continue
            _accept(bundle, oc, got)
            if on_event:
                on_event(f"node {n.folder}: {oc.status} in {oc.seconds:.1f}s")


def _accept(bundle: Bundle, oc: NodeOutcome, got: dict[str, Any]) -> None:
    write_node_files(bundle, oc.folder, got.get("files") or {})
    oc.hostname = str(got.get("hostname") or oc.hostname)
    bundle.redactor.add_host(oc.hostname)
    oc.collectors = list(got.get("collectors") or [])
    oc.analysis = dict(got.get("analysis") or {})
    oc.processes = list(got.get("processes") or [])
    oc.status = "ok"
    stk = next((c for c in oc.collectors if c.get("name") == "stacks"), None)
    if oc.workers and stk is not None and stk.get("status") in ("error", "timeout"):
        oc.status, oc.error = "error", f"no worker stacks: {stk.get('error')}"


# --- the cross-node verdict ------------------------------------------------------------------
def rank_rows(outcomes: list[NodeOutcome]) -> list[dict[str, Any]]:
    """One row per sampled process on every node: node, pid, label, rank, state, where."""
    rows = []
    for oc in outcomes:
        for pid, a in sorted(oc.analysis.items(), key=lambda kv: (
                kv[1].get("rank") if kv[1].get("rank") is not None else 1 << 30, kv[0])):
            rows.append({"node": oc.folder.split("/", 1)[-1], "pid": int(pid),
                         "instance": instance_from_name(a.get("label")) or "(not a Ray actor)",
                         "label": a.get("label"), "role": a.get("role"), "rank": a.get("rank"),
                         "state": a.get("state"), "collective": a.get("collective"),
                         "sync": a.get("sync"),
                         "where": a.get("caller") or a.get("top") or a.get("error")})
    return rows


def _rank_tables(rows: list[dict[str, Any]]) -> list[str]:
    """One rank table per vLLM instance (two `vllm serve` on one cluster are never merged)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["instance"], []).append(r)
    L: list[str] = []
    for inst, rs in sorted(groups.items()):
        title = "## Ranks across nodes" + (f" — instance {inst}" if len(groups) > 1 else "")
        L += ["", title, "", "| node | rank | label | pid | state | where | collective |",
              "|---|---|---|---|---|---|---|"]
        for r in rs:
            L.append(f"| {r['node']} | {'' if r['rank'] is None else r['rank']} | {r['label']} | "
                     f"{r['pid']} | {r['state']} | {str(r['where'] or '').replace('|', '/')} | "
                     f"{r['collective'] or r['sync'] or ''} |")
    return L


def render_cluster_summary(bundle: Bundle, outcomes: list[NodeOutcome], verdict: list[str],
                           notes: list[str]) -> str:
    red = bundle.redactor
    L = ["# sm120kit collect bundle (Ray cluster)", ""]
    if bundle.meta.get("interrupted"):
        L += ["**INTERRUPTED**: the collect was stopped (Ctrl-C) before it finished; this bundle "
              "holds only what had arrived, and a missing node or rank means nothing about it.",
              ""]
    L += [f"- created: {bundle.meta.get('created')}",
          f"- nodes: {len(outcomes)}; vLLM worker actors: {sum(len(o.workers) for o in outcomes)}"]
    bad = not_collected(outcomes)
    if bad:
        L.append(f"- **partial**: {len(bad)} of {len(outcomes)} node(s) not fully collected: "
                 + ", ".join(bad))
    elif bundle.meta.get("partial_reason"):
        L.append(f"- **partial**: {bundle.meta['partial_reason']}")
    L += ["", "## Verdict", ""]
    L += [f"- {x}" for x in verdict]
    L += ["", "## Nodes", "", "| node | host | status | seconds | workers | error |",
          "|---|---|---|---|---|---|"]
    for oc in outcomes:
        L.append(f"| {oc.folder} | {red.text(oc.hostname)} ({red.text(oc.ip)}) | {oc.status} | "
                 f"{oc.seconds} | {len(oc.workers)} | {red.text(oc.error or '')[:200]} |")
    L += _rank_tables(rank_rows(outcomes))
    if notes:
        L += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(L) + "\n"


def not_collected(outcomes: list[NodeOutcome]) -> list[str]:
    """``folder (status)`` of every node that is not ``ok``."""
    return [f"{oc.folder} ({oc.status})" for oc in outcomes if oc.status != "ok"]


def mark_partial(bundle: Bundle, outcomes: list[NodeOutcome]) -> bool:
    """``partial: true`` at the manifest's top level when a node is not fully collected."""
    bad = not_collected(outcomes)
    partial = bool(bad) or bool(bundle.meta.get("partial_reason")) or bool(
        bundle.meta.get("interrupted"))
    bundle.meta["partial"] = partial
    if bad:
        bundle.meta["partial_nodes"] = bad
    return partial


def _record_view(bundle: Bundle, ctx: CollectContext, ropts: RayOptions,
                 view: ClusterView) -> None:
    """``ray/cluster.json`` (now and history) and the notes about what is not collected."""
    bundle.write_json("ray/cluster.json", {
        "address": bundle.redactor.text(str(ropts.address or "auto")),
        "worker_classes": list(ropts.worker_classes), **view.to_json()})
    if not view.workers:
        ctx.notes.append(f"no live actor of class {'/'.join(ropts.worker_classes)} in a live job "
                         f"of the cluster: {NO_WORKERS_HINT}; every live node was still "
                         "collected")
    if view.dead_nodes or view.history:
        ctx.notes.append(f"cluster history, not collected: {len(view.dead_nodes)} dead node(s), "
                         f"{len(view.history)} dead or finished-job worker actor(s) "
                         "(ray/cluster.json → history)")


def gather_into(bundle: Bundle, ropts: RayOptions, opts: Options, ctx: CollectContext, *,
                deadline: float, redact: bool,
                on_event: Callable[[str], None] | None = None
                ) -> tuple[list[NodeOutcome], list[RayWorker]]:
    """Connect, list, gather every node into ``bundle`` (also used by the launch supervisor at
    a stall); records the cluster view and the per-node outcomes in the manifest."""
    t0 = time.monotonic()
    rec = CollectorRecord(name="ray-cluster", started=iso(time.time()))
    bundle.record(rec)
    outcomes: list[NodeOutcome] = []
    workers: list[RayWorker] = []
    try:
        ray = connect(ropts.address, max(1.0, deadline - time.monotonic()), debug=ropts.debug)
        view = cluster_view(ray, ropts.worker_classes,
                            timeout=max(1, min(10, int(deadline - time.monotonic()) // 3)))
        workers = view.workers
        _record_view(bundle, ctx, ropts, view)
        scope = None
        if ropts.discover_local:
            me = ray.get_runtime_context().get_node_id()
            scope = {n.node_id: scope_pids(view, n) for n in view.nodes if n.node_id == me}
        outcomes = gather(ray, bundle, view.nodes, workers, opts, ctx, deadline=deadline,
                          redact=redact, scope=scope, on_event=on_event, margin_s=ropts.margin_s)
        bundle.meta["ray"] = {"nodes": [oc.to_manifest(bundle.redactor) for oc in outcomes],
                              "workers": len(workers), "actors_source": view.source,
                              "instances": instances(workers),
                              "history": {"dead_nodes": len(view.dead_nodes),
                                          "dead_workers": len(view.history)}}
        mark_partial(bundle, outcomes)
        rec.status = "interrupted" if bundle.meta.get("interrupted") else "ok"
        rec.detail = ", ".join(f"{oc.folder}: {oc.status}" for oc in outcomes)
        rec.files = ["ray/cluster.json"] + [oc.folder + "/" for oc in outcomes]
    except KeyboardInterrupt:  # before the nodes were asked (joining, listing)
        rec.status, rec.error = "interrupted", "interrupted (Ctrl-C) before the nodes were asked"
        bundle.meta["interrupted"] = True
        bundle.meta["partial_reason"] = rec.error
        mark_partial(bundle, outcomes)
    except NotInTime as exc:
        rec.status, rec.error = "timeout", exc.message
        bundle.meta["partial_reason"] = exc.message
        mark_partial(bundle, outcomes)
    except UserError:
        rec.status, rec.error = "error", "could not reach the Ray cluster"
        raise
    finally:
        rec.seconds = round(time.monotonic() - t0, 3)
        bundle.record(rec)
        for oc in outcomes:
            bundle.record(CollectorRecord(name=f"node:{oc.folder.split('/', 1)[-1]}",
                                          started=rec.started, seconds=oc.seconds,
                                          status=oc.status, error=oc.error,
                                          detail=f"{len(oc.collectors)} collectors",
                                          files=[oc.folder + "/"]))
    return outcomes, workers


def collect_ray(out_dir: Path, ropts: RayOptions, *, deadline_s: float, redact: bool = True,
                host_map_file: Path | None = None, options: Options | None = None,
                on_event: Callable[[str], None] | None = None,
                started: float | None = None) -> RayCollectResult:
    """``collect --ray [ADDRESS]``: one bundle of every node, now. Never signals anything.
    ``started``: the ``time.monotonic()`` the deadline counts from (the command's start, so
    the whole run, startup and bundle writing included, ends within ``deadline_s``)."""
    t0 = time.monotonic() if started is None else started
    with native_stderr_hidden(ropts.debug) as ray_log:
        return _collect_ray(out_dir, ropts, t0, deadline_s, redact, host_map_file, options,
                            on_event, ray_log)


def _collect_ray(out_dir: Path, ropts: RayOptions, t0: float, deadline_s: float, redact: bool,
                 host_map_file: Path | None, options: Options | None,
                 on_event: Callable[[str], None] | None, ray_log: Path | None) -> RayCollectResult:
    end = t0 + deadline_s - min(FINISH_RESERVE_S, deadline_s / 2)
    early: str | None = None
    try:  # a bad address is one error line and no empty bundle
        connect(ropts.address, max(0.1, end - time.monotonic()), debug=ropts.debug,
                named_s=deadline_s)
    except NotInTime as exc:
        early = exc.message
    except KeyboardInterrupt:
        early = "interrupted (Ctrl-C) while joining the cluster, before the nodes were asked"
    opts = options or Options()
    opts.deadline_s = deadline_s
    ctx = CollectContext(mode="ray", reason="ray: snapshot requested", stall_kind="requested")
    bundle = Bundle.create(Path(out_dir), Redactor(enabled=redact, host_map_file=host_map_file),
                           meta={"mode": "ray", "deadline_s": deadline_s})
    outcomes: list[NodeOutcome] = []
    workers: list[RayWorker] = []
    try:
        if early is not None:
            _record_early(bundle, early)
        else:
            outcomes, workers = gather_into(bundle, ropts, opts, ctx, deadline=end,
                                            redact=redact, on_event=on_event)
    finally:
        if early is None:
            _shutdown()  # ~0.3 s here; left to the interpreter's exit it costs ~1 s after the bundle
        if ray_log is not None:
            _keep_ray_log(bundle, ray_log)
        hooks = opts.hooks
        if time.monotonic() > t0 + deadline_s - JUDGE_MIN_S:  # no time left to judge: say so
            hooks = replace(hooks, judge=None)
            bundle.meta["not_judged"] = "no time left in --deadline: run sm120kit diagnose on it"
        tb = finish(bundle, outcomes, ctx, hooks)
    return RayCollectResult(bundle.root, tb, outcomes, workers,
                            list(bundle.meta.get("verdict") or []), round(time.monotonic() - t0, 3),
                            partial=bool(bundle.meta.get("partial")),
                            interrupted=bool(bundle.meta.get("interrupted")),
                            partial_reason=bundle.meta.get("partial_reason"))


def _shutdown() -> None:
    try:
        import ray

        ray.shutdown()
    except Exception:
        pass


def _record_early(bundle: Bundle, why: str) -> None:
    """The bundle of a collect that stopped before any node was asked (deadline, Ctrl-C)."""
    rec = CollectorRecord(name="ray-cluster", started=iso(time.time()), error=why,
                          status="interrupted" if why.startswith("interrupted") else "timeout")
    bundle.record(rec)
    if rec.status == "interrupted":
        bundle.meta["interrupted"] = True
    bundle.meta["partial_reason"] = why
    mark_partial(bundle, [])


def _keep_ray_log(bundle: Bundle, path: Path) -> None:
    """Ray's and gRPC's own stderr lines (hidden from the terminal) as ``ray/driver-stderr.log``."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    if text.strip() and not bundle.closed:
        bundle.write_text("ray/driver-stderr.log", text[-256 * 1024:])


def headline(bundle: Bundle, outcomes: list[NodeOutcome]) -> str:
    """The bundle's first verdict line: what was collected, in the cluster's terms, before any
    rule's finding (an interrupted or late collect says so first; our limits blame no one)."""
    if bundle.meta.get("interrupted"):
        return ("INTERRUPTED: the collect was stopped (Ctrl-C) before it finished: partial "
                "evidence; a missing node or rank means nothing about it")
    late = [oc for oc in outcomes if oc.status == "not-collected"]
    budget = bundle.meta.get("deadline_s")
    if bundle.meta.get("partial_reason") and not outcomes:
        return str(bundle.meta["partial_reason"])
    rows = rank_rows(outcomes)
    states = Counter(str(r["state"] or "unknown") for r in rows if r["role"] != "api-server")
    ranks = (f"{sum(states.values())} process(es) sampled on "
             f"{sum(oc.status == 'ok' for oc in outcomes)} node(s): "
             + ", ".join(f"{n} {st}" for st, n in states.most_common())) if states else (
        "no rank sampled")
    if late:
        return (f"not collected in time: {len(late)} of {len(outcomes)} node(s) gave no answer "
                f"before --deadline {budget:g}s (collect's limit, nothing is known against them)"
                f"; {ranks}")
    return f"Ranks: {ranks}"


def finish(bundle: Bundle, outcomes: list[NodeOutcome], ctx: CollectContext,
           hooks: BundleHooks) -> Path:
    """Summary with the verdict (the headline, then the diagnose rules engine over the cluster
    bundle: the cross-node rules name the rank and node that stopped first), manifest, tarball."""
    bundle.write_json("timeline.json", {"mode": ctx.mode, "reason": ctx.reason,
                                        "stall_kind": ctx.stall_kind, "phases": [],
                                        "notes": ctx.notes})
    verdict = [headline(bundle, outcomes), *make_verdict(ctx, bundle, hooks)]
    bundle.meta["verdict"] = verdict
    bundle.write_text("summary.md", render_cluster_summary(bundle, outcomes, verdict, ctx.notes))
    bundle.write_manifest()
    bundle.redactor.save_host_map()
    tb = bundle.make_tarball()
    bundle.closed = True
    return tb


def remote_gather(ropts: RayOptions, *, redact: bool,
                  on_event: Callable[[str], None] | None = None
                  ) -> Callable[[Bundle, CollectContext, Options, float], list[str]]:
    """The hook the launch supervisor calls at a stall (``collect --ray -- vllm serve ...``):
    gather every node into the supervisor's bundle until ``deadline``; returns verdict lines."""
    import_ray()  # fail before the launch, not at the stall

    def hook(bundle: Bundle, ctx: CollectContext, opts: Options, deadline: float) -> list[str]:
        result: list[NodeOutcome] = []
        box: dict[str, BaseException] = {}

        def run() -> None:
            try:
                result.extend(gather_into(bundle, ropts, opts, ctx, deadline=deadline,
                                          redact=redact, on_event=on_event)[0])
            except BaseException as exc:  # reported as a note, never fatal to the launch
                box["exc"] = exc

        th = threading.Thread(target=run, name="ray-gather", daemon=True)
        th.start()
        th.join(max(0.0, deadline - time.monotonic()) + 2.0)
        if "exc" in box:
            ctx.notes.append(f"Ray gather failed: {box['exc']}")
        # the nodes are in the bundle now: finalize's verdict (the rules engine) reads them
        return []

    return hook


__all__ = ["DEFAULT_WORKER_CLASSES", "NodeOutcome", "RayCollectResult", "RayNode", "RayOptions",
           "RayWorker", "collect_ray", "gather", "gather_into", "import_ray", "instances",
           "mark_partial", "not_collected",
           "node_snapshot", "rank_rows", "ranks_from_name", "remote_gather"]
