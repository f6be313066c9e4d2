"""What Ray (2.40-2.60) prints when a vLLM-on-Ray start or run fails (catalogue file
known-ray.toml). Each log is the message in the shape Ray prints it (wording from the source
named in the comment: the ray 2.49.2 wheel's Python modules and the strings of its raylet,
gcs_server and _raylet.so), inside the lines a vLLM start on Ray prints around it; the top
finding names the category and rests on an entry of known-ray.toml.

Before these entries the answers were: `ray start` on a port a running head holds: rank-crashed
(first-dead-rank, wrong: the cluster was never stopped); a worker's GCS loss while vLLM served:
exit 0 (a false all-clear); a request the cluster cannot schedule, an infeasible request, a GCS
loss pasted alone, the raylet's worker-death report alone, a failed RAY_CHECK in the raylet, a
raylet that exited with its agent: unknown; a raylet or node death, a WorkerCrashedError, an
actor whose worker exited with a code, vLLM's executor-v2 worker monitor: rank-crashed from the
generic first-dead-rank rule, which names none of them. The right category for those is
rank-crashed (Ray states where the run broke, not why): the entries name the Ray message and
stay behind a cause found elsewhere (the worker's own NCCL error, the memory monitor's kill),
which the second group checks. Healthy vLLM-on-Ray starts with Ray's usual INFO/WARNING noise
(one placement-group wait, a pending request later placed, an RL trainer whose actors waited
once, object spilling, a Python patch mismatch, a clamped object store, GCS-loss lines after
`ray stop`) stay exit 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose import catalogue as C
from sm120kit.diagnose.engine import diagnose
from tests.diagnose.known_checks import assert_healthy, assert_named, entry_ids

KNOWN = Path(C.__file__).resolve().parent / "known-ray.toml"
SP = "/usr/local/lib/python3.12/dist-packages"

_START = (
    "INFO 06-10 09:12:01 [__init__.py:244] Automatically detected platform cuda.\n"
    "INFO 06-10 09:12:03 [api_server.py:1395] vLLM API server version 0.9.1\n"
    "INFO 06-10 09:12:03 [cli_args.py:325] non-default args: {'model': 'Qwen/Qwen3-32B', "
    "'tensor_parallel_size': 8, 'distributed_executor_backend': 'ray'}\n"
    "2025-06-10 09:12:10,101\tINFO worker.py:1832 -- Connecting to existing Ray cluster at "
    "address: 10.0.0.5:6379...\n"
    "2025-06-10 09:12:10,122\tINFO worker.py:2003 -- Connected to Ray cluster. View the dashboard "
    "at http://127.0.0.1:8265 \n"
    "INFO 06-10 09:12:11 [ray_utils.py:334] No current placement group found. Creating a new "
    "placement group.\n"
)
_PG_WAIT = (
    "INFO 06-10 09:12:21 [ray_utils.py:214] Waiting for creating a placement group of specs for "
    "10 seconds. specs=[{'node:10.0.0.5': 0.001, 'GPU': 1.0}, {'GPU': 1.0}]. Check `ray status` "
    "to see if you have enough resources, and make sure the IP addresses used by ray cluster are "
    "the same as VLLM_HOST_IP environment variable specified in each node if you are running on a "
    "multi-node.\n"
)
_LOADED = (
    "INFO 06-10 09:12:35 [ray_distributed_executor.py:176] use_ray_spmd_worker: False\n"
    "(pid=4471) INFO 06-10 09:12:40 [__init__.py:244] Automatically detected platform cuda.\n"
    "(RayWorkerWrapper pid=4471, ip=10.0.0.6) INFO 06-10 09:13:02 [model_runner.py:1110] "
    "Starting to load model Qwen/Qwen3-32B...\n"
    "(RayWorkerWrapper pid=4471, ip=10.0.0.6) INFO 06-10 09:13:40 [model_runner.py:1115] Loading "
    "weights took 38.20 seconds [repeated 7x across cluster] (Ray deduplicates logs by default. "
    "Set RAY_DEDUP_LOGS=0 to disable log deduplication, or see https://docs.ray.io/en/master/"
    "ray-observability/user-guides/configure-logging.html#log-deduplication for more options.)\n"
)
_READY = (
    "INFO 06-10 09:14:40 [api_server.py:1457] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
    "INFO:     Started server process [5012]\n"
    "INFO:     Waiting for application startup.\n"
    "INFO:     Application startup complete.\n"
)
_SERVING = (
    "INFO 06-10 10:14:40 [loggers.py:118] Engine 000: Avg prompt throughput: 512.3 tokens/s, Avg "
    "generation throughput: 380.1 tokens/s, Running: 12 reqs, Waiting: 0 reqs, GPU KV cache "
    "usage: 11.2%, Prefix cache hit rate: 40.1%\n"
)
_CORE = "ERROR 06-10 09:13:40 [core.py:515] "
_ACTOR_DIED = (
    f"{_CORE}ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this "
    "task.\n"
    f"{_CORE}\tclass_name: RayWorkerWrapper\n"
    f"{_CORE}\tactor_id: 5066c201b724a3936948a11201000000\n"
    f"{_CORE}\tpid: 4471\n"
    f"{_CORE}\tip: 10.0.0.6\n"
)

# name -> (category, log text); the source that prints the message in the comment above each
FIXED: dict[str, tuple[str, str]] = {
    # ray-2.49.2 python/ray/scripts/scripts.py (start: a local GCS already holds the address)
    "ray-start-port-in-use": ("config-invalid", (
        "$ ray start --head --port=6379\n"
        "Usage stats collection is enabled. To disable this, add `--disable-usage-stats` to the "
        "command that starts the cluster, or run the following command: `ray disable-usage-stats` "
        "before starting the cluster.\n\nLocal node IP: 10.0.0.5\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/local/bin/ray", line 8, in <module>\n    sys.exit(main())\n'
        f'  File "{SP}/ray/scripts/scripts.py", line 931, in start\n'
        "    raise ConnectionError(\n"
        "ConnectionError: Ray is trying to start at 10.0.0.5:6379, but is already running at "
        "10.0.0.5:6379. Please specify a different port using the `--port` flag of `ray start` "
        "command.\n")),
    # ray-2.49.2 src/ray/rpc/gcs/gcs_rpc_client.h, in a vLLM worker's log after the head went
    "ray-gcs-lost": ("rank-crashed", _START + _PG_WAIT + _LOADED + _READY + _SERVING + (
        "(RayWorkerWrapper pid=4471, ip=10.0.0.6) [2025-06-10 10:21:03,476 E 4471 4512] "
        "gcs_rpc_client.h:542: Failed to connect to GCS within 60 seconds. GCS may have been "
        "killed. It's either GCS is terminated by `ray stop` or is killed unexpectedly. If it is "
        "killed unexpectedly, see the log file gcs_server.out. https://docs.ray.io/en/master/"
        "ray-observability/user-guides/configure-logging.html#logging-directory-structure. The "
        "program will terminate.\n")),
    # the same line alone, as a vLLM 0.2 user pasted it (vllm issue 1465)
    "ray-gcs-lost-alone": ("rank-crashed", (
        "[2023-11-01 10:00:00,000 E 2201 2240] gcs_rpc_client.h:552: Failed to connect to GCS "
        "within 60 seconds. GCS may have been killed. It's either GCS is terminated by `ray stop` "
        "or is killed unexpectedly. If it is killed unexpectedly, see the log file "
        "gcs_server.out. https://docs.ray.io/en/master/ray-observability/ray-logging.html"
        "#logging-directory-structure. The program will terminate.\n")),
    # ray-2.49.2 python/ray/exceptions.py (LocalRayletDiedError.__str__)
    "ray-local-raylet-died": ("rank-crashed", _START + _PG_WAIT + _LOADED + _READY + _SERVING + (
        "ERROR 06-10 10:21:05 [core.py:400] ray.exceptions.LocalRayletDiedError: The task's local "
        "raylet died. Check raylet.out for more information.\n")),
    # ray-2.49.2 src/ray/core_worker/transport/normal_task_submitter.cc (NODE_DIED)
    "ray-task-node-died": ("rank-crashed", _START + _LOADED + (
        f"{_CORE}ray.exceptions.NodeDiedError: Task failed due to the node (where this task was "
        "running)  was dead or unavailable.\n"
        f"{_CORE}\n{_CORE}The node IP: 10.0.0.6, node ID: 74673a353f8e0caba3dcb01d6e777d7dc644906"
        "56fa0b38ccf9ed161\n"
        f"{_CORE}\n{_CORE}This can happen if the instance where the node was running failed, the "
        "node was preempted, or raylet crashed unexpectedly (e.g., due to OOM) etc.\n")),
    # ray-2.49.2 python/ray/exceptions.py (WorkerCrashedError.__str__)
    "ray-worker-crashed": ("rank-crashed", _START + _LOADED + (
        f"{_CORE}ray.exceptions.WorkerCrashedError: The worker died unexpectedly while executing "
        "this task. Check python-core-worker-*.log files for more information.\n")),
    # ray-2.49.2 src/ray/raylet/node_manager.cc, pushed to the driver (vllm issue 1111's shape)
    "ray-raylet-worker-died": ("rank-crashed", _START + _LOADED + (
        "2025-06-10 09:13:41,619\tWARNING worker.py:2058 -- A worker died or was killed while "
        "executing a task by an unexpected system error. To troubleshoot the problem, check the "
        "logs for the dead worker. RayTask ID: ffffffffffffffffa55573c318fcb45089df416702000000 "
        "Worker ID: 40060cc4698e6b41b7073182fde862a6a5ea32e8f6ac18bc2f4e1c15 Node ID: 1a6050c7a4f7"
        "7ea40a9aa1d8f08ba6cfbec96c0138c62b2190c918cb Worker IP address: 10.0.0.6 Worker port: "
        "10005 Worker PID: 4471\n")),
    # ray-2.49.2 python/ray/_raylet.pyx (SystemExit with a code) via ActorDiedError
    "ray-actor-worker-exit-code": ("rank-crashed", _START + _LOADED + _ACTOR_DIED + (
        f"{_CORE}The actor is dead because its worker process has died. Worker exit type: "
        "SYSTEM_ERROR Worker exit detail: Worker exits unexpectedly. Worker exits with an exit "
        "code 1.\n")),
    # the same with exit code None on Kubernetes, as the raylet reports it (Agent-R1 issue 33)
    "ray-actor-worker-exit-none-k8s": ("rank-crashed", _START + _LOADED + (
        "(raylet) A worker died or was killed while executing a task by an unexpected system "
        "error. To troubleshoot the problem, check the logs for the dead worker. RayTask ID: "
        "ffffffffffffffff2d4d212e431c850dcf83f60801000000 Worker ID: e954d96d346a63ed2902300"
        "32cf56d0d796d0cf80a9074a1b5307606 Node ID: 0cca822e450292fc9c2e3ae3955db328c8bb6c10ae0e"
        "228a87b1f59d Worker IP address: 10.0.0.6 Worker port: 34379 Worker PID: 4471 Worker "
        "exit type: SYSTEM_ERROR Worker exit detail: Worker exits unexpectedly. Worker exits "
        "with an exit code None. The worker may have exceeded K8s pod memory limits.\n")),
    # ray-2.49.2 python/ray/autoscaler/_private/autoscaler.py (cluster full of actors); the run
    # was stopped by hand while it waited
    "ray-resource-request-pending": ("config-invalid", _START + (
        "(autoscaler +20s) Tip: use `ray status` to view detailed cluster status. To disable "
        "these messages, set RAY_SCHEDULER_EVENTS=0.\n"
        "(autoscaler +20s) Warning: The following resource request cannot be scheduled right "
        "now: {'GPU': 1.0, 'node:10.0.0.5': 0.001}. This is likely due to all cluster resources "
        "being claimed by actors. Consider creating fewer actors or adding more nodes to this "
        "Ray cluster.\n^C\nAborted!\n")),
    # ray-2.49.2 raylet: the actor/task wording of the same wait (ray issue 21097's shape)
    "ray-resource-request-pending-raylet": ("config-invalid", _START + (
        "2025-06-10 09:12:41,346\tWARNING worker.py:2059 -- The actor or task with ID "
        "ffffffffffffffff9c08bcf94d34ab010a5c459102000000 cannot be scheduled right now. You can "
        "ignore this message if this Ray cluster is expected to auto-scale or if you specified a "
        "runtime_env for this actor or task, which may take time to install.  Otherwise, this is "
        "likely due to all cluster resources being claimed by actors. To resolve the issue, "
        "consider creating fewer actors or increasing the resources available to this Ray "
        "cluster.\n^C\nAborted!\n")),
    # ray-2.49.2 src/ray/gcs/gcs_server/gcs_autoscaler_state_manager.cc
    "ray-infeasible-tasks": ("config-invalid", _START + (
        "(raylet) There are tasks with infeasible resource requests that cannot be scheduled. See "
        "https://docs.ray.io/en/latest/ray-core/scheduling/index.html#ray-scheduling-resources for "
        "more details. Possible solutions: 1. Updating the ray cluster to include nodes with all "
        "required resources 2. To cause the tasks with infeasible requests to raise an error "
        "instead of hanging, set the 'RAY_enable_infeasible_task_early_exit=true'. This feature "
        "will be turned on by default in a future release of Ray.\n^C\nAborted!\n")),
    # ray-2.49.2 src/ray/util/logging.h (RAY_CHECK) in the raylet's compiled-graph channel code,
    # as a multi-node vLLM printed it (vllm issue 29373)
    "ray-check-failed": ("rank-crashed", _START + _LOADED + _READY + _SERVING + "".join(
        "(EngineCore_DP0 pid=37804) " + line + "\n" for line in (
            "(raylet) [2025-11-24 16:14:48,882 C 37444 37444] (raylet) experimental_mutable_object"
            "_provider.cc:154:  An unexpected system state has occurred. You have likely "
            "discovered a bug in Ray. Please report this issue at https://github.com/ray-project/"
            "ray/issues and we'll work with you to fix it. Check failed: object_manager_->"
            "WriteAcquire(info.local_object_id, total_data_size, nullptr, total_metadata_size, "
            "info.num_readers, object_backing_store) Status not OK: ChannelError: Channel closed. ",
            "(raylet) *** StackTrace Information ***",
            f"(raylet) {SP}/ray/core/src/ray/raylet/raylet(+0xef0aca) [0x5d9928c5daca] "
            "ray::operator<<()"))),
    # ray-2.49.2 src/ray/raylet/agent_manager.cc (ray issue 41343's shape)
    "ray-raylet-agent-failed": ("rank-crashed", _START + _LOADED + "".join(
        "(raylet, ip=10.0.0.6) " + line + "\n" for line in (
            "[2025-06-10 09:13:47,634 E 24 59] (raylet) agent_manager.cc:70: The raylet exited "
            "immediately because one Ray agent failed, agent_name = dashboard_agent/1015601482.",
            "The raylet fate shares with the agent. This can happen because",
            "- The version of `grpcio` doesn't follow Ray's requirement. Agent can segfault with "
            "the incorrect `grpcio` version. Check the grpcio version `pip freeze | grep grpcio`.",
            "- The agent failed to start because of unexpected error or port conflict. Read the log "
            "`cat /tmp/ray/session_latest/logs/{dashboard_agent|runtime_env_agent}.log`.",
            "- The agent is killed by the OS (e.g., out of memory)."))),
    # vLLM v0.20.0 vllm/v1/executor/ray_executor_v2.py (the worker monitor thread)
    "vllm-ray-worker-proc-died": ("rank-crashed", _START + _LOADED + _READY + _SERVING + (
        "(EngineCore pid=301) ERROR 06-10 10:21:05 [ray_executor_v2.py:522] RayWorkerProc "
        "rank=[3] died unexpectedly, shutting down executor.\n"
        "ERROR 06-10 10:21:05 [async_llm.py:480] AsyncLLM output_handler failed.\n"
        "ERROR 06-10 10:21:05 [async_llm.py:480] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.\n")),
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_ray_message_is_named(name: str, tmp_path: Path) -> None:
    category, text = FIXED[name]
    assert_named(KNOWN, name, category, text, tmp_path)


# Ray wraps the worker's own error (RayTaskError(<type>)) or states the reason a worker died; the
# wrapped error or the stated reason decides, not the Ray wrapper: name -> (category, log).
WRAPPED: dict[str, tuple[str, str]] = {
    # the memory monitor's kill (raylet node_manager.cc) stated in the ActorDiedError
    "actor-died-node-out-of-memory": ("out-of-memory", _START + _LOADED + (
        "(raylet) [2025-06-10 09:13:38,002 E 2201 2201] (raylet) node_manager.cc:3069: 1 Workers "
        "(tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other "
        "reasons at node (ID: 7c2bd9, IP: 10.0.0.6) over the last time period.\n"
        + _ACTOR_DIED
        + f"{_CORE}The actor is dead because its worker process has died. Worker exit type: "
        "NODE_OUT_OF_MEMORY Worker exit detail: Task was killed due to the node running low on "
        "memory.\n")),
    # RayTaskError(OutOfMemoryError) around torch's CUDA OOM
    "raytask-cuda-oom": ("out-of-memory", _START + _LOADED + (
        f"{_CORE}ray.exceptions.RayTaskError(OutOfMemoryError): ray::RayWorkerWrapper.execute_"
        "method() (pid=4471, ip=10.0.0.6, actor_id=5066c201b724a3936948a11201000000, repr=<vllm."
        "executor.ray_utils.RayWorkerWrapper object at 0x7f2c>)\n"
        f'{_CORE}  File "{SP}/vllm/worker/worker_base.py", line 620, in execute_method\n'
        f"{_CORE}    raise e\n"
        f"{_CORE}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 "
        "has a total capacity of 79.10 GiB of which 1.02 GiB is free.\n")),
    # an ActorDiedError (exit code 1) after the worker's own NCCL error
    "actor-exit-after-nccl-error": ("library-version", _START + _LOADED + (
        "(RayWorkerWrapper pid=4471, ip=10.0.0.6) ERROR 06-10 09:13:38 [worker_base.py:620] "
        "Error executing method 'init_device'. This might cause deadlock in distributed "
        "execution.\n"
        "(RayWorkerWrapper pid=4471, ip=10.0.0.6) ERROR 06-10 09:13:38 [worker_base.py:620] "
        "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)\n"
        + _ACTOR_DIED
        + f"{_CORE}The actor is dead because its worker process has died. Worker exit type: "
        "SYSTEM_ERROR Worker exit detail: Worker exits unexpectedly. Worker exits with an exit "
        "code 1.\n")),
}


@pytest.mark.parametrize("name", sorted(WRAPPED))
def test_wrapped_or_stated_cause_decides(name: str, tmp_path: Path) -> None:
    category, text = WRAPPED[name]
    log = tmp_path / f"{name}.log"
    log.write_text(text)
    res = diagnose([log])
    assert res.exit_code == 1 and res.findings, res.verdict
    top = res.findings[0]
    assert top.category == category, (top.category, top.rule, top.summary)
    assert top.rule not in entry_ids(KNOWN), (top.rule, "a known-ray.toml entry must not outrank it")


HEALTHY: dict[str, str] = {
    # one placement-group wait (vLLM ray_utils.py), then the workers load and the server is up
    "pg-wait-then-ready": _START + _PG_WAIT + _LOADED + _READY,
    # the autoscaler's pending-request warning while a node joins, then ready
    "request-pending-then-ready": _START + (
        "(autoscaler +20s) Warning: The following resource request cannot be scheduled right "
        "now: {'GPU': 1.0, 'node:10.0.0.5': 0.001}. This is likely due to all cluster resources "
        "being claimed by actors. Consider creating fewer actors or adding more nodes to this "
        "Ray cluster.\n") + _PG_WAIT + _LOADED + _READY,
    # an RL trainer (verl's shape: vLLM rollout workers as Ray actors, no HTTP server) whose
    # actors wait once for GPUs, then load the model and train
    "rl-trainer-request-pending-then-steps": (
        "2025-06-10 09:12:10,122\tINFO worker.py:2003 -- Started a local Ray instance. View the "
        "dashboard at http://127.0.0.1:8265 \n"
        "(autoscaler +20s) Warning: The following resource request cannot be scheduled right "
        "now: {'GPU': 1.0, 'CPU': 1.0}. This is likely due to all cluster resources being claimed "
        "by actors. Consider creating fewer actors or adding more nodes to this Ray cluster.\n"
        "(WorkerDict pid=4471) INFO 06-10 09:13:02 [model_runner.py:1110] Starting to load model "
        "Qwen/Qwen2.5-7B-Instruct...\n"
        "(WorkerDict pid=4471) INFO 06-10 09:13:40 [loader.py:458] Loading weights took 38.20 "
        "seconds\n"
        "(WorkerDict pid=4471) INFO 06-10 09:13:52 [model_runner.py:1146] Model loading took "
        "14.25 GiB and 40.0 seconds\n"
        "(main_task pid=2462) step:1 - actor/pg_loss:0.012 - actor/lr:1e-06 - "
        "critic/score/mean:0.21 - timing_s/gen:41.2\n"
        "(main_task pid=2462) step:2 - actor/pg_loss:0.010 - actor/lr:1e-06 - "
        "critic/score/mean:0.24 - timing_s/gen:39.8\n"),
    # a Python patch-version warning of ray/_private/utils.py (check_version_info), then ready
    "python-patch-mismatch": (
        "2025-06-10 09:12:10,110\tWARNING utils.py:1436 -- Python patch version mismatch: The "
        "cluster was started with:\n    Ray: 2.49.2\n    Python: 3.12.3\nThis process on node "
        "10.0.0.6 was started with:\n    Ray: 2.49.2\n    Python: 3.12.8\n") + _START + _LOADED
        + _READY,
    # serving, with object spilling, the raylet's worker-count warning and a clamped object store
    "spilling-while-serving": _START + _LOADED + _READY + _SERVING + (
        "(raylet) Spilled 4096 MiB, 12 objects, write throughput 512 MiB/s. Set "
        "RAY_verbose_spill_logs=0 to disable this message.\n"
        "(raylet) [2025-06-10 10:15:01,000 W 2201 2201] (raylet) worker_pool.cc:551: WARNING: 18 "
        "PYTHON worker processes have been started on node: 7c2bd9 with address: 10.0.0.5. This "
        "could be a result of using a large number of actors, or due to tasks blocked in ray.get() "
        "calls (see https://github.com/ray-project/ray/issues/3644 for some discussion of "
        "workarounds).\n"
        "(raylet) [2025-06-10 10:16:29,435 W 39 39] (raylet) store_runner.cc:83: System memory "
        "request exceeds memory available in /dev/shm. The request is for 10200547328 bytes, and "
        "the amount available is 9663676416 bytes.\n") + _SERVING,
    # an offline batch run that finished; `ray stop` then ends the workers, which report the GCS
    "gcs-lines-after-ray-stop": _START + _LOADED + (
        "Processed prompts: 100%|██████████| 1000/1000 [02:11<00:00,  7.61it/s, est. speed input: "
        "3896.00 toks/s, output: 1948.00 toks/s]\n"
        "$ ray stop\nStopped all 12 Ray processes.\n"
        "(RayWorkerWrapper pid=4471, ip=10.0.0.6) [2025-06-10 09:20:03,476 E 4471 4512] "
        "gcs_rpc_client.h:542: Failed to connect to GCS within 60 seconds. GCS may have been "
        "killed. It's either GCS is terminated by `ray stop` or is killed unexpectedly. If it is "
        "killed unexpectedly, see the log file gcs_server.out.\n"),
}


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_healthy_ray_start_stays_healthy(name: str, tmp_path: Path) -> None:
    assert_healthy(name, HEALTHY[name], tmp_path)
