"""What the distributed launchers print when a multi-process job fails (catalogue file
known-launchers.toml): DeepSpeed's launcher (deepspeed/launcher/launch.py), HF accelerate's
``accelerate launch``, torch.distributed.elastic's rendezvous and TCPStore, Open MPI's mpirun and
Slurm's srun. Each log is the message in the shape its software prints it (wording from the source
named in the comment) inside the lines a launcher prints around it.

The key judgment: a rank killed by SIGKILL (DeepSpeed's ``exits with return code = -9``, mpirun's
``exited on signal 9 (Killed)``, srun's ``task N: Killed``, accelerate's ``died with
<Signals.SIGKILL: 9>``) is out-of-memory only when the log holds an OOM record (the kernel's
``Out of memory: Killed process``, a cgroup ``oom-kill`` event, Kubernetes' ``OOMKilled``, srun's
own ``Out Of Memory``); without one it is rank-crashed (a kill from outside whose sender the log
does not record, or the launcher's cascade after another task failed), and the summary names the
OOM killer as the first place to look.

Before these entries (main at 015f36e1): the DeepSpeed -9 log without an OOM record and the
torchrun -9 log were out-of-memory (wrong: no record says so); the accelerate state refusal was
rank-crashed, the rendezvous-closed and TCPStore logs config-invalid / p2p-transport (wrong: the
frames' place, not the message); the DeepSpeed -7, mpirun signal 11, srun and ORTE logs were
`unknown`; the mpirun signal 9 logs, the Open MPI PMI log and the DeepSpeed log killed while
loading shards were exit 0 (a false clear); the accelerate SIGKILL log was rank-crashed without
reading the signal (weak); a torchrun agent stopped by SIGTERM from outside was rank-crashed
("main failed first": wrong, no worker failed; now `unknown`, naming the outside stop). Healthy
runs of each launcher (and the launchers' start-up lines) stay exit 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose import catalogue as C
from sm120kit.diagnose.engine import diagnose
from tests.diagnose.known_checks import assert_healthy, assert_named, entry_ids

KNOWN = Path(C.__file__).resolve().parent / "known-launchers.toml"
SP = "/usr/local/lib/python3.10/dist-packages"

# DeepSpeed v0.16.9 deepspeed/launcher/runner.py and launch.py start-up lines
_DS = (
    "[2024-05-01 10:00:00,026] [WARNING] [runner.py:215:fetch_hostfile] Unable to find hostfile, "
    "will proceed with training with local resources only.\n"
    "Detected VISIBLE_DEVICES=0,1: setting --include=localhost:0,1\n"
    "[2024-05-01 10:00:00,136] [INFO] [runner.py:605:main] cmd = /usr/bin/python -u -m "
    "deepspeed.launcher.launch --world_info=eyJsb2NhbGhvc3QiOiBbMCwgMV19 "
    "--master_addr=127.0.0.1 --master_port=29500 --enable_each_rank_log=None train.py "
    "--deepspeed ds_config.json\n"
    "[2024-05-01 10:00:01,796] [INFO] [launch.py:146:main] WORLD INFO DICT: {'localhost': [0, 1]}\n"
    "[2024-05-01 10:00:01,796] [INFO] [launch.py:152:main] nnodes=1, num_local_procs=2, "
    "node_rank=0\n"
    "[2024-05-01 10:00:01,796] [INFO] [launch.py:164:main] dist_world_size=2\n"
    "[2024-05-01 10:00:01,796] [INFO] [launch.py:168:main] Setting CUDA_VISIBLE_DEVICES=0,1\n"
    "[2024-05-01 10:00:03,100] [INFO] [real_accelerator.py:254:get_accelerator] Setting "
    "ds_accelerator to cuda (auto detect)\n"
    "[2024-05-01 10:00:05,000] [INFO] [comm.py:700:init_distributed] Initializing TorchBackend in "
    "DeepSpeed with backend nccl\n"
)
_DS_STEPS = (
    "[2024-05-01 10:02:10,000] [INFO] [logging.py:128:log_dist] [Rank 0] step=10, skipped=0, "
    "lr=[1.9e-05], mom=[(0.9, 0.999)]\n"
    "[2024-05-01 10:03:40,000] [INFO] [logging.py:128:log_dist] [Rank 0] step=20, skipped=0, "
    "lr=[1.8e-05], mom=[(0.9, 0.999)]\n"
)
_ARGV = "['/usr/bin/python', '-u', 'train.py', '--local_rank=1', '--deepspeed', 'ds_config.json']"


def _ds_fail(code: int) -> str:
    """launch.py (v0.16.9, main's wait loop and sigkill_handler): the first child found with a
    non-zero return code; the launcher then terminates the others and reports that code."""
    return ("[2024-05-01 10:04:02,000] [INFO] [launch.py:319:sigkill_handler] Killing subprocess "
            "4411\n"
            "[2024-05-01 10:04:02,301] [INFO] [launch.py:319:sigkill_handler] Killing subprocess "
            "4412\n"
            f"[2024-05-01 10:04:04,120] [ERROR] [launch.py:325:sigkill_handler] {_ARGV} exits with "
            f"return code = {code}\n")


# the kernel's OOM record as `dmesg -T` prints it (mm/oom_kill.c)
_DMESG_OOM = (
    "$ dmesg -T | tail -2\n"
    "[Wed May  1 10:04:01 2024] Out of memory: Killed process 4412 (python) total-vm:98765432kB, "
    "anon-rss:61234567kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:123456kB "
    "oom_score_adj:0\n"
)

# accelerate v1.6.0 accelerate/commands/launch.py (simple_launcher) traceback
_ACC_TB = (
    "Traceback (most recent call last):\n"
    '  File "/usr/local/bin/accelerate", line 8, in <module>\n'
    "    sys.exit(main())\n"
    f'  File "{SP}/accelerate/commands/accelerate_cli.py", line 50, in main\n'
    "    args.func(args)\n"
    f'  File "{SP}/accelerate/commands/launch.py", line 1204, in launch_command\n'
    "    simple_launcher(args)\n"
    f'  File "{SP}/accelerate/commands/launch.py", line 795, in simple_launcher\n'
    "    raise subprocess.CalledProcessError(returncode=process.returncode, cmd=cmd)\n"
)

# torchrun's agent start (torch v2.5.1 torch/distributed/run.py and elastic/agent)
_TORCHRUN = (
    "W0501 10:00:00.123000 140 torch/distributed/run.py:793] \n"
    "W0501 10:00:00.123000 140 torch/distributed/run.py:793] *****************************************\n"
    "W0501 10:00:00.123000 140 torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment "
    "variable for each process to be 1 in default, to avoid your system being overloaded, please "
    "further tune the variable for optimal performance in your application as needed. \n"
    "W0501 10:00:00.123000 140 torch/distributed/run.py:793] *****************************************\n"
)

# the agent's line for a worker that ended on SIGKILL, and the SIGTERM it sends the others
_TORCHRUN_KILLED = (
    "W0501 10:20:00.000000 140 torch/distributed/elastic/multiprocessing/api.py:897] Sending "
    "process 2631 closing signal SIGTERM\n"
    "E0501 10:20:01.000000 140 torch/distributed/elastic/multiprocessing/api.py:869] failed "
    "(exitcode: -9) local_rank: 0 (pid: 2630) of binary: /usr/bin/python3\n"
)

# Open MPI v4.1.6 mpirun banner lines around its help messages
_MPI_BAR = "-" * 74 + "\n"

# name -> (expected category, log text); the source that prints the message in the comment
FIXED: dict[str, tuple[str, str]] = {
    # DeepSpeed v0.16.9 launch.py: -9 with no OOM record in the log (the launcher itself only
    # terminates the others after it saw this code): a kill from outside, cause not recorded
    "deepspeed-sigkill-no-oom-record": ("rank-crashed", _DS + _DS_STEPS + _ds_fail(-9)),
    # launch.py: -7 is SIGBUS; in containers the rank touched /dev/shm beyond its size
    "deepspeed-sigbus": ("shared-memory", _DS + _DS_STEPS + _ds_fail(-7)),
    # launch.py: the launcher killed its ranks while they were loading checkpoint shards
    # (transformers' progress bar at 0/7) and no rank printed an error: host RAM
    "deepspeed-killed-loading-shards": ("out-of-memory", _DS + (
        "Loading checkpoint shards:   0%|          | 0/7 [00:00<?, ?it/s]"
        "[2023-09-10 11:45:59,207] [INFO] [launch.py:428:sigkill_handler] Killing subprocess "
        "6293\n"
        "[2023-09-10 11:45:59,501] [INFO] [launch.py:428:sigkill_handler] Killing subprocess "
        "6294\n")),
    # accelerate v1.6.0 launch.py simple_launcher: the child died on SIGKILL, no OOM record
    "accelerate-child-sigkill": ("rank-crashed", (
        "The following values were not passed to `accelerate launch` and had defaults used "
        "instead:\n\t`--num_processes` was set to a value of `1`\n"
        "{'loss': 2.1234, 'learning_rate': 1.9e-05, 'epoch': 0.12}\n") + _ACC_TB
        + "subprocess.CalledProcessError: Command '['/usr/bin/python', 'train.py', '--bf16']' "
          "died with <Signals.SIGKILL: 9>.\n"),
    # accelerate v1.6.0 state.py (_check_initialized): a second Accelerator() with another
    # mixed_precision in the same process
    "accelerate-state-reinitialized": ("config-invalid", (
        "Traceback (most recent call last):\n"
        '  File "/workspace/train.py", line 41, in <module>\n'
        "    accelerator = Accelerator(mixed_precision='bf16')\n"
        f'  File "{SP}/accelerate/accelerator.py", line 408, in __init__\n'
        "    self.state = AcceleratorState(\n"
        f'  File "{SP}/accelerate/state.py", line 917, in __init__\n'
        "    self._check_initialized(mixed_precision, cpu)\n"
        f'  File "{SP}/accelerate/state.py", line 1017, in _check_initialized\n'
        "    raise ValueError(err.format(flag=f\"mixed_precision='{mixed_precision}'\"))\n"
        "ValueError: AcceleratorState has already been initialized and cannot be changed, restart "
        "your runtime completely and pass `mixed_precision='bf16'` to `Accelerator()`.\n")),
    # torch v2.5.1 elastic/rendezvous/dynamic_rendezvous.py: the agent joined a rendezvous that
    # another agent had closed (its job failed or ended there)
    "torchrun-rendezvous-closed": ("rank-crashed", _TORCHRUN + (
        "Traceback (most recent call last):\n"
        '  File "/usr/local/bin/torchrun", line 8, in <module>\n'
        "    sys.exit(main())\n"
        f'  File "{SP}/torch/distributed/elastic/agent/server/api.py", line 859, in '
        "_invoke_run\n"
        "    self._restart_workers(self._worker_group)\n"
        f'  File "{SP}/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", line 666, in '
        "next_rendezvous\n"
        "    self._op_executor.run(join_op, deadline, self._get_deadline)\n"
        f'  File "{SP}/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", line 677, in '
        "run\n"
        "    raise RendezvousClosedError\n"
        "torch.distributed.elastic.rendezvous.api.RendezvousClosedError\n")),
    # torch v2.5.1 elastic/agent/server/api.py: the agent received SIGTERM from outside (a
    # scheduler) and closed its workers; no worker failed (was rank-crashed: "main failed first")
    "torchrun-agent-stopped-by-sigterm": ("unknown", _TORCHRUN + (
        "[rank0]: step 1200 loss 1.92\n"
        "W0501 12:00:00.000000 140 torch/distributed/elastic/agent/server/api.py:704] Received 15 "
        "death signal, shutting down workers\n"
        "W0501 12:00:00.000000 140 torch/distributed/elastic/multiprocessing/api.py:897] Sending "
        "process 2630 closing signal SIGTERM\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/local/bin/torchrun", line 8, in <module>\n'
        "    sys.exit(main())\n"
        f'  File "{SP}/torch/distributed/elastic/multiprocessing/api.py", line 84, in '
        "_terminate_process_handler\n"
        '    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)\n'
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 140 got signal: "
        "15\n")),
    # torch v2.8.0 torch/csrc/distributed/c10d/Utils.hpp (recvBytes): the TCPStore's host went
    # away under a client (rank 0 / the master node's agent exited)
    "tcpstore-peer-closed": ("rank-crashed", _TORCHRUN + (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/workspace/train.py", line 88, in <module>\n'
        "[rank1]:     dist.barrier()\n"
        f'[rank1]:   File "{SP}/torch/distributed/distributed_c10d.py", line 4166, in barrier\n'
        "[rank1]:     work = default_pg.barrier(opts=opts)\n"
        "[rank1]: torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was "
        "likely closed. Did the remote server shutdown or crash?\n")),
    # Open MPI v4.1.6 orte/tools/orterun/help-orterun.txt (proc-aborted-strsignal), no OOM
    # record: "some external agent (outside of Open MPI) killed" the process
    "mpirun-signal-9": ("rank-crashed", (
        "[gpu01:0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>\n"
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0\n"
        + _MPI_BAR
        + "mpirun noticed that process rank 1 with PID 0 on node gpu02 exited on signal 9 "
          "(Killed).\n" + _MPI_BAR)),
    # the same after a rank returned non-zero and mpirun aborted the job (the cascade)
    "mpirun-signal-9-after-rank-exit": ("rank-crashed", (
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0\n"
        + _MPI_BAR + "Primary job  terminated normally, but 1 process returned\n"
        "a non-zero exit code. Per user-direction, the job has been aborted.\n" + _MPI_BAR
        + _MPI_BAR
        + "mpirun noticed that process rank 1 with PID 0 on node gpu02 exited on signal 9 "
          "(Killed).\n" + _MPI_BAR)),
    # the same help text for SIGSEGV: a native crash of the rank (nccl-tests under mpirun)
    "mpirun-signal-11": ("rank-crashed", (
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0\n"
        "[node02:01234] *** Process received signal ***\n"
        "[node02:01234] Signal: Segmentation fault (11)\n"
        + _MPI_BAR + _MPI_BAR
        + "mpirun noticed that process rank 1 with PID 0 on node node02 exited on signal 11 "
          "(Segmentation fault).\n" + _MPI_BAR)),
    # Slurm 23.11 src/plugins/launch/slurm/launch_slurm.c (_task_finish): a task ended on a
    # signal, no OOM record
    "srun-task-killed": ("rank-crashed", (
        "srun: error: gpu02: task 1: Killed\n"
        "srun: launch/slurm: _step_signal: Terminating StepId=4821.0\n")),
    # the same after another task exited non-zero: srun terminated the step (the cascade)
    "srun-task-killed-after-task-exit": ("rank-crashed", (
        "srun: error: gpu01: task 0: Exited with exit code 1\n"
        "srun: launch/slurm: _step_signal: Terminating StepId=4821.0\n"
        "srun: error: gpu02: tasks 1-3: Killed\n")),
    # the same function, the step's cgroup OOM (SIG_OOM): srun names it
    "srun-task-out-of-memory": ("out-of-memory", (
        "srun: error: gpu02: task 1: Out Of Memory\n"
        "srun: launch/slurm: _step_signal: Terminating StepId=4821.0\n")),
    # Open MPI v4.1.6 orte/mca/ess/pmi/help-ess-pmi.txt? (direct launch without PMI support)
    "ompi-srun-without-pmi": ("config-invalid", (
        "[gpu01:12345] OPAL ERROR: Not initialized in file pmix3x_client.c at line 112\n"
        + _MPI_BAR
        + 'The application appears to have been direct launched using "srun",\n'
          "but OMPI was not built with SLURM's PMI support and therefore cannot\n"
          "execute. There are several options for building PMI support under\n"
          "SLURM, depending upon the SLURM version you are using:\n")),
    # Slurm src/common/plugin.c (plugin_context_create): --mpi=pmix on a Slurm built without it
    "srun-mpi-plugin-missing": ("config-invalid", (
        "srun: error: Couldn't find the specified plugin name for mpi/pmix looking at all files\n"
        "srun: error: cannot find mpi plugin for mpi/pmix\n"
        "srun: error: MPI: Cannot create context for mpi/pmix\n"
        "srun: error: Invalid MPI type 'pmix', --mpi=list for acceptable types\n")),
    # Open MPI v4.1.6 orte/mca/plm/base/help-plm-base.txt (no-local-orted / daemon failed)
    "orte-daemons-not-started": ("config-invalid", (
        "bash: orted: command not found\n" + _MPI_BAR
        + "ORTE was unable to reliably start one or more daemons.\n"
          "This usually is caused by:\n\n"
          "* not finding the required libraries and/or binaries on\n"
          "  one or more nodes. Please check your PATH and LD_LIBRARY_PATH\n"
          "  settings, or configure OMPI with --enable-orterun-prefix-by-default\n")),
}

# name -> log that must stay exit 0
HEALTHY: dict[str, str] = {
    # a DeepSpeed run that completes: every child "exits successfully" (launch.py main)
    "deepspeed-run-completes": _DS + _DS_STEPS + (
        "[2024-05-01 10:20:00,000] [INFO] [launch.py:351:main] Process 4411 exits successfully.\n"
        "[2024-05-01 10:20:01,000] [INFO] [launch.py:351:main] Process 4412 exits successfully.\n"),
    # an accelerate launch whose script ends normally
    "accelerate-run-completes": (
        "The following values were not passed to `accelerate launch` and had defaults used "
        "instead:\n\t`--num_processes` was set to a value of `2`\n"
        "\t`--mixed_precision` was set to a value of `'no'`\n"
        "{'loss': 2.1234, 'learning_rate': 1.9e-05, 'epoch': 0.5}\n"
        "{'loss': 1.9876, 'learning_rate': 1.0e-05, 'epoch': 1.0}\n"
        "{'train_runtime': 612.3, 'train_samples_per_second': 52.1, 'train_loss': 2.05, "
        "'epoch': 1.0}\n"),
    # torchrun: the workers finish, one rank returns earlier and the agent closes the rest
    # (torch v2.5.1 elastic/multiprocessing/api.py _close) at its normal shutdown
    "torchrun-completes-closing-signal": _TORCHRUN + (
        "[rank0]: epoch 3 done, loss 0.412\n"
        "[rank1]: epoch 3 done, loss 0.409\n"
        "Training finished.\n"
        "W0501 10:30:00.000000 140 torch/distributed/elastic/multiprocessing/api.py:897] Sending "
        "process 2631 closing signal SIGTERM\n"),
    # mpirun running nccl-tests to the end
    "mpirun-nccl-tests-completes": (
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0\n"
        "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
        "   134217728      33554432     float     sum      -1   1312.4  102.27  191.75      0\n"
        "# Out of bounds values : 0 OK\n"
        "# Avg bus bandwidth    : 120.5\n"),
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_launcher_message_names_its_cause(name: str, tmp_path: Path) -> None:
    expected, text = FIXED[name]
    assert_named(KNOWN, name, expected, text, tmp_path)


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_launcher_healthy_run_stays_exit_0(name: str, tmp_path: Path) -> None:
    assert_healthy(name, HEALTHY[name], tmp_path)


# name -> log with an OOM record beside the launcher's SIGKILL report: out-of-memory, whichever
# entry or rule names it (known-supervisors.toml's DeepSpeed entry, the torchrun rule)
OOM_RECORDED: dict[str, str] = {
    "deepspeed-sigkill-with-dmesg-oom": _DS + _DS_STEPS + _ds_fail(-9) + _DMESG_OOM,
    "srun-killed-beside-cgroup-oom": (
        "srun: error: gpu02: task 1: Killed\n"
        "slurmstepd: error: Detected 1 oom_kill event in StepId=4821.0. Some of the step tasks "
        "have been OOM Killed.\n"),
    "mpirun-signal-9-beside-dmesg-oom": (
        "mpirun noticed that process rank 1 with PID 0 on node gpu02 exited on signal 9 "
        "(Killed).\n" + _DMESG_OOM),
    # torch v2.5.1 elastic/multiprocessing/api.py (the agent's "failed (exitcode: -9)" line)
    "torchrun-sigkill-beside-dmesg-oom": _TORCHRUN + _TORCHRUN_KILLED + _DMESG_OOM,
}


@pytest.mark.parametrize("name", sorted(OOM_RECORDED))
def test_sigkill_beside_an_oom_record_is_out_of_memory(name: str, tmp_path: Path) -> None:
    log = tmp_path / f"{name}.log"
    log.write_text(OOM_RECORDED[name])
    res = diagnose([log])
    assert res.exit_code == 1 and res.findings, res.verdict
    assert res.findings[0].category == "out-of-memory", [
        (f.category, f.rule) for f in res.findings]
    assert not any(f.rule in entry_ids(KNOWN) and f.category == "rank-crashed"
                   for f in res.findings), [(f.category, f.rule) for f in res.findings]


def test_torchrun_sigkill_without_an_oom_record_is_rank_crashed(tmp_path: Path) -> None:
    """torchrun's agent stops the other workers with SIGTERM (elastic/multiprocessing/api.py
    _close), so a worker's -9 came from outside; without an OOM record the torchrun-failure rule
    names rank-crashed (it named out-of-memory before)."""
    log = tmp_path / "torchrun-9.log"
    log.write_text(_TORCHRUN + _TORCHRUN_KILLED)
    res = diagnose([log])
    assert res.exit_code == 1 and res.findings, res.verdict
    top = res.findings[0]
    assert (top.rule, top.category) == ("torchrun-failure", "rank-crashed"), (top.rule, top.category)
    assert "no OOM record" in top.summary


def test_every_entry_has_a_case() -> None:
    """Each entry of known-launchers.toml is exercised by at least one log above."""
    from sm120kit.diagnose.catalogue.schema import parse_file
    texts = "\n".join(t for _, t in FIXED.values())
    missing = [e.id for e in parse_file(KNOWN) if not any(e.match(ln) for ln in texts.splitlines())]
    assert not missing, missing


def test_kill_while_loading_with_a_rank_error_is_not_called_oom(tmp_path: Path) -> None:
    """The weight-load entry reads a silent death: where a rank printed its own traceback while
    loading (a missing shard), that error is the answer, not the host's memory."""
    log = tmp_path / "ds-load-error.log"
    log.write_text(_DS + (
        "Loading checkpoint shards:   0%|          | 0/7 [00:00<?, ?it/s]\n"
        "Traceback (most recent call last):\n"
        '  File "/workspace/train.py", line 30, in <module>\n'
        "    model = AutoModel.from_pretrained(args.model_name_or_path)\n"
        "FileNotFoundError: [Errno 2] No such file or directory: "
        "'ChatGLM-6B/pytorch_model-00003-of-00007.bin'\n"
        "[2023-09-10 11:45:59,207] [INFO] [launch.py:428:sigkill_handler] Killing subprocess "
        "6293\n"))
    res = diagnose([log])
    assert res.exit_code == 1 and res.findings, res.verdict
    assert all(f.rule != "deepspeed-killed-during-weight-load" for f in res.findings), [
        (f.category, f.rule) for f in res.findings]


def test_launcher_stopped_by_the_user_is_not_called_oom(tmp_path: Path) -> None:
    """DeepSpeed's launcher received SIGINT (Ctrl-C) and killed its ranks while they loaded
    weights (launch.py sigkill_handler): a stop from outside, not a memory kill."""
    log = tmp_path / "ds-sigint.log"
    log.write_text(_DS + (
        "Loading checkpoint shards:  43%|████▎     | 3/7 [00:41<00:55, 13.9s/it]\n"
        "[2024-05-01 10:04:02,000] [INFO] [launch.py:319:sigkill_handler] Killing subprocess "
        "4411\n"
        "[2024-05-01 10:04:02,301] [INFO] [launch.py:319:sigkill_handler] Killing subprocess "
        "4412\n"
        "[2024-05-01 10:04:02,302] [INFO] [launch.py:328:sigkill_handler] Main process received "
        "SIGINT, exiting\n"))
    res = diagnose([log])
    assert all(f.category != "out-of-memory" for f in res.findings), [
        (f.category, f.rule) for f in res.findings]
    assert res.findings and res.findings[0].rule == "launcher-stopped-by-signal", [
        (f.category, f.rule) for f in res.findings]
