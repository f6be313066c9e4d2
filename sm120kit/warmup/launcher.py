"""``python -m sm120kit.warmup.launcher SPEC.json``: import torch once, fork the DCP ranks.

Started by the runner in a new session (its own process group), so the runner can end the
launcher and every rank with one ``killpg``. Importing torch once and forking is ~N times cheaper
than N fresh interpreters on a small machine; nothing touches CUDA before the fork. The launcher
exits when every rank has exited (code: the worst rank's), ends the ranks on SIGTERM, and ends
itself and the ranks if the supervising process disappears.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import warnings
from pathlib import Path

from sm120kit.services.proctree import KILL_NOW, parent_alive, stop_pids
from sm120kit.warmup.config import RunConfig
from sm120kit.warmup.rank import rank_main


def _kill_children(pids: list[int]) -> None:
    """SIGKILL our own forked ranks through the one process-tree stop (a killed rank stays a
    zombie until reaped here, which the stop counts as gone)."""
    stop_pids(pids, steps_plan=KILL_NOW)


#: exit status and stderr tag of a launcher that cannot import torch
TORCH_MISSING_EXIT = 4
TORCH_MISSING_TAG = "sm120kit-launcher: torch cannot be imported:"


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    cfg = RunConfig.from_json(spec["config"])
    fd = int(spec["fd"])
    parent = int(spec["parent_pid"])
    result_dir = Path(spec["result_dir"])
    init_method = spec["init_method"]
    try:
        import setproctitle

        setproctitle.setproctitle("sm120kit::warmup_launcher")
    except ImportError:
        pass
    warnings.filterwarnings("ignore", message=".*NumPy.*")
    try:
        import torch  # noqa: F401  (imported once, inherited by every forked rank)
        import torch.distributed  # noqa: F401
    except ImportError as exc:  # third party: say so in one line, the supervisor reports it
        print(f"{TORCH_MISSING_TAG} {exc}", file=sys.stderr, flush=True)
        return TORCH_MISSING_EXIT

    children: list[int] = []

    def on_term(*_: object) -> None:
        _kill_children(children)
        os._exit(143)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for r in range(cfg.dcp):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = rank_main(
                    cfg, r, init_method=init_method, fd=fd, result_dir=result_dir,
                    parent_pid=parent,
                )  # fmt: skip
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children.append(pid)
    os.close(fd)
    worst = 0
    alive = set(children)
    while alive:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid:
            alive.discard(pid)
            worst = max(worst, os.waitstatus_to_exitcode(status) & 0xFF)
            continue
        if not parent_alive(parent):
            _kill_children(sorted(alive))
            return 3
        time.sleep(0.05)
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
