"""Writing the bundle of a supervised launch that stalled, crashed or was interrupted: the live
snapshot (stacks, flight recorder, NCCL, GPU) beside the other hosts' evidence when asked, then
the logs closed and everything packed. Nothing is written after packing: the bundle directory
equals its tarball."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sm120kit.evidence import flight
from sm120kit.evidence.procs import Proc
from sm120kit.services.bundles import Bundle
from sm120kit.services.proctree import SupervisedChild
from sm120kit.services.snapshot import (
    CollectContext,
    Options,
    Result,
    finalize,
    snapshot,
    write_processes,
)

#: gathers other hosts into the bundle at a stall (``collect --ray``): called with (bundle,
#: context, options, monotonic deadline), returns verdict lines; runs beside the snapshot
RemoteHook = Callable[[Bundle, CollectContext, Options, float], list[str]]


@dataclass
class Written:
    path: Path
    result: Result | None
    seconds: float


def _start_remote(hook: RemoteHook | None, bundle: Bundle, ctx: CollectContext, opts: Options,
                  t0: float) -> tuple[threading.Thread, list[str]] | None:
    if hook is None:
        return None
    lines: list[str] = []

    def run() -> None:
        try:
            lines.extend(hook(bundle, ctx, opts, t0 + opts.deadline_s))
        except Exception as exc:  # the other hosts are extra evidence, never fatal
            ctx.notes.append(f"gathering the other hosts failed: {type(exc).__name__}: {exc}")

    th = threading.Thread(target=run, name="collect-remote", daemon=True)
    th.start()
    return th, lines


def write_stall_bundle(
    bundle: Bundle, *, context: Callable[[], CollectContext], opts: Options,
    live: list[Proc], known: list[Proc], progress: dict[str, Any] | None,
    close_logs: Callable[[], None], remote: RemoteHook | None = None,
    on_event: Callable[[str], None] = lambda _m: None,
) -> Written:
    """Snapshot ``live`` (empty: the tree is gone, write what is known), close the logs, pack."""
    t_detect = time.monotonic()
    if progress is not None:
        bundle.write_json("progress.json", progress)
    ctx = context()
    res: Result | None = None
    rem = _start_remote(remote, bundle, ctx, opts, t_detect) if live else None
    try:
        if live:
            res = snapshot(bundle, live, ctx, opts)
        if rem is not None:
            rem[0].join(max(0.0, t_detect + opts.deadline_s - time.monotonic()) + 3.0)
            if res is not None:
                res.verdict += rem[1]
        else:
            write_processes(bundle, known, ctx)
    except KeyboardInterrupt:
        on_event("interrupted again: writing what was collected")
    finally:
        close_logs()
        ctx = context() if res is None else ctx
        path = finalize(bundle, live or known, ctx, res, opts)
    return Written(path, res, round(time.monotonic() - t_detect, 3))


def launch_context(reason: str, kind: str, *, argv: list[str], env: dict[str, str],
                   added: dict[str, str], timeline: list[dict[str, Any]], current: str | None,
                   logs: dict[str, list[str]], child: SupervisedChild, bundle_root: Path,
                   started: float, note: str | None) -> CollectContext:
    """What a launch's bundle records: the launch line and environment, phases, output, deaths,
    and where the diagnostic settings made NCCL, torch and vLLM write."""
    nccl_file = env.get("NCCL_DEBUG_FILE")
    return CollectContext(
        mode="launch", reason=reason, stall_kind=kind, argv=argv, env=env, added_env=added,
        timeline=timeline, current_phase=current, logs=logs, deaths=list(child.deaths),
        exit_code=child.poll(), own_pids=set(child.known),
        fh_dir=bundle_root / "faulthandler" if "SM120KIT_FAULTHANDLER_DIR" in added else None,
        fr_prefixes=[v for k, v in env.items() if k in flight.FR_PREFIX_VARS],
        watchdog_dirs=[str(bundle_root / "vllm-watchdog")],
        nccl_debug_files=[nccl_file] if nccl_file and not str(nccl_file).startswith(
            str(bundle_root)) else [],
        started=started, notes=[note] if note else [],
    )
