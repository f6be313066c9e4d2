"""``sm120kit collect``: supervise a launch (``-- vllm serve ...``) or snapshot a running vLLM
(``--attach [PID]``) into a redacted support bundle (thin: parse, call the core, render)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from sm120kit.cli import options
from sm120kit.cli.compose import bundle_hooks
from sm120kit.collect.attach import attach as do_attach
from sm120kit.errors import ExitCode, UserError
from sm120kit.report import cell, console, dump_json
from sm120kit.services.progress import parse_patience
from sm120kit.services.snapshot import Options
from sm120kit.services.supervision import LaunchOptions, launch


def _render_launch(res: Any, as_json: bool, report: Path | None = None) -> None:
    if as_json:
        dump_json("collect", {"status": res.outcome, **res.to_dict(),
                              "report": str(report) if report else None},
                  exit_code=res.exit_code)
        return
    con = console(stderr=True)
    if res.timeline:
        t = Table(title="startup phases", show_lines=False)
        t.add_column("phase")
        t.add_column("at (s)", justify="right")
        t.add_column("took (s)", justify="right")
        for i, ph in enumerate(res.timeline):
            nxt = res.timeline[i + 1]["t"] if i + 1 < len(res.timeline) else None
            t.add_row(ph["phase"], f"{ph['t']:.1f}", f"{nxt - ph['t']:.1f}" if nxt is not None else "")
        con.print(t)
    style = {"ready": "green", "exited": "green", "stalled": "bold red", "crashed": "bold red",
             "interrupted": "yellow"}.get(res.outcome, "")
    con.print(f"[{style}]{res.outcome}[/{style}] after {res.seconds:.1f}s: {res.reason}")
    for v in verdict_lines(res.verdict, res.reason):
        con.print(f"  - {v}")
    if res.bundle:
        extra = f" (detection → bundle {res.detect_to_bundle_s:.1f}s)" if res.detect_to_bundle_s else ""
        con.print(f"bundle: {res.bundle}{extra}")
    if report:
        con.print(f"report: {report}")


def verdict_lines(verdict: list[str], reason: str | None) -> list[str]:
    """The bundle's verdict under the outcome line, which already says the stall reason: the
    ``Reason:`` line is left out and a verdict that quotes the reason points up to it instead
    (summary.md and ``--json`` keep every line whole)."""
    out = []
    for v in verdict:
        if reason and v == f"Reason: {reason}":
            continue
        out.append(v.replace(f": {reason}", " (the reason above)") if reason else v)
    return out


def finish_bundle(tarball: Path | None, *, keep_dir: bool, judge: bool) -> Path | None:
    """After a bundle is packed: its report page beside the tarball (diagnose's findings,
    composed here), then the bundle folder removed unless ``--keep-dir`` (the tarball holds
    the same files). A page that cannot be written is a note on stderr, never a lost bundle."""
    if tarball is None or not Path(tarball).is_file():
        return None
    from sm120kit.cli.compose import write_report

    tarball = Path(tarball)
    page: Path | None = None
    try:
        page, _ = write_report(tarball, judge=judge)
    except Exception as exc:  # the bundle is what matters; the page is a view of it
        click.echo(f"sm120kit collect: no report page: {type(exc).__name__}: {exc}", err=True)
    folder = tarball.with_name(tarball.name.removesuffix(".tar.gz"))
    if not keep_dir and folder != tarball and folder.is_dir():
        shutil.rmtree(folder, ignore_errors=True)
    return page


def _render_attach(tb: Path, res: Any, procs: list[Any], as_json: bool,
                   report: Path | None = None) -> None:
    if as_json:
        dump_json("collect", {
            "status": "collected", "mode": "attach", "bundle": str(tb),
            "report": str(report) if report else None,
            "verdict": res.verdict if res else [],
            "processes": [{"pid": p.pid, "label": p.label, "role": p.role} for p in procs],
            "stacks": res.analysis if res else {},
        }, exit_code=ExitCode.OK)
        return
    con = console(stderr=True)
    t = Table(title="processes")
    for c in ("pid", "label", "role", "state", "where"):
        t.add_column(c)
    for p in procs:
        a = (res.analysis if res else {}).get(p.pid, {})
        t.add_row(str(p.pid), cell(p.label), p.role, str(a.get("state", "-")),
                  cell(str(a.get("collective") or a.get("caller") or a.get("top") or "")))
    con.print(t)
    for v in res.verdict if res else []:
        con.print(f"  - {v}")
    con.print(f"bundle: {tb}")
    if report:
        con.print(f"report: {report}")


def _ray_options(ray_addr: str, classes: tuple[str, ...], no_local: bool, attach: str | None,
                 command: tuple[str, ...]) -> tuple[Any, tuple[str, ...]]:
    if attach is not None:
        raise UserError("--ray and --attach are exclusive",
                        hint="--ray covers every node, this one included")
    from sm120kit.collect.ray_cluster import DEFAULT_WORKER_CLASSES, RayOptions, import_ray

    import_ray()
    if command and ray_addr == "auto" and len(command) == 1 and ":" in command[0]:
        ray_addr, command = command[0], ()  # `--ray -o DIR HOST:PORT`
    root = click.get_current_context().find_root().obj or {}
    return RayOptions(address=None if ray_addr == "auto" else ray_addr,
                      worker_classes=tuple(classes) or DEFAULT_WORKER_CLASSES,
                      discover_local=not no_local, debug=bool(root.get("debug"))), command


def _process_start() -> float:
    """``time.monotonic()`` of this process's start: ``--deadline`` counts from the command's
    start, not from the moment collect's code runs (imports take a while on a busy host)."""
    import time

    import psutil

    try:
        ago = time.time() - psutil.Process().create_time()
    except psutil.Error:
        ago = 0.0
    return time.monotonic() - min(max(ago, 0.0), 30.0)


def _warm_judge() -> None:
    """Import the diagnose engine (the bundle's judge, ~1 s of regex compiling on a busy host)
    in the background while collect waits on the network, so the verdict fits in --deadline."""
    import threading

    def load() -> None:
        try:
            import sm120kit.diagnose.engine  # noqa: F401
        except Exception:
            pass

    threading.Thread(target=load, name="warm-judge", daemon=True).start()


def _collect_ray(ropts: Any, out_dir: Path, deadline: float, sample_gap: float, stacks: str,
                 no_doctor: bool, no_redact: bool, host_map: Path | None, *, as_json: bool,
                 keep_dir: bool = False) -> int:
    from sm120kit.collect.ray_cluster import (
        NO_WORKERS_HINT,
        collect_ray,
        instances,
        not_collected,
    )
    from sm120kit.report import console, dump_json
    from sm120kit.services.snapshot import Options

    opts = Options(deadline_s=deadline, sample_gap_s=sample_gap,
                   stack_method="py-spy" if stacks == "auto" else stacks, doctor=not no_doctor,
                   hooks=bundle_hooks(doctor=not no_doctor))
    con = console(stderr=True)
    _warm_judge()
    res = collect_ray(out_dir, ropts, deadline_s=deadline, redact=not no_redact,
                      host_map_file=host_map, options=opts, started=_process_start(),
                      on_event=None if as_json else lambda m: con.print(f"[dim]{m}[/dim]"))
    nodes: list[dict[str, Any]] = [
        {"node": oc.folder, "status": oc.status, "seconds": oc.seconds, "error": oc.error,
         "workers": oc.workers} for oc in res.nodes]
    # partial (a node not collected, not in time, interrupted) or no worker actor found: exit 1;
    # a Ctrl-C: 130, the bundle flagged interrupted
    no_workers = not res.workers and not res.partial
    code = (ExitCode.INTERRUPTED if res.interrupted else
            ExitCode.FINDINGS if res.partial or no_workers else ExitCode.OK)
    status = "interrupted" if res.interrupted else "partial" if res.partial else "collected"
    hint = NO_WORKERS_HINT if no_workers else None
    # the page judges the bundle only when the collect ran whole: a partial or interrupted one
    # has its own verdict, and --deadline leaves no time for a second read
    page = finish_bundle(res.tarball, keep_dir=keep_dir,
                         judge=not res.partial and not res.interrupted)
    if as_json:
        dump_json("collect", {"status": status, "mode": "ray", "bundle": str(res.tarball),
                              "report": str(page) if page else None,
                              "seconds": res.seconds, "partial": res.partial,
                              "interrupted": res.interrupted,
                              "partial_reason": res.partial_reason, "nodes": nodes,
                              "workers": len(res.workers), "hint": hint,
                              "instances": instances(res.workers), "verdict": res.verdict},
                  exit_code=code)
        _exit_now(code)
        return code
    from rich.markup import escape
    from rich.table import Table

    t = Table(title="nodes")
    for c in ("node", "status", "seconds", "workers", "error"):
        t.add_column(c)
    for n in nodes:
        t.add_row(str(n["node"]), str(n["status"]), f"{n['seconds']:.1f}",
                  str(len(n["workers"])), cell(str(n["error"] or "")))
    if nodes:
        con.print(t)
    for v in res.verdict:
        con.print(f"  - {escape(v)}")
    if res.interrupted:
        con.print("interrupted: the bundle holds what arrived before Ctrl-C (flagged interrupted)")
    elif res.partial:
        con.print("partial: not fully collected: "
                  + escape(", ".join(not_collected(res.nodes)) or str(res.partial_reason)))
    if no_workers:
        con.print(f"no vLLM worker actor found: {escape(NO_WORKERS_HINT)}")
    con.print(f"bundle: {res.tarball} ({res.seconds:.1f}s)")
    if page:
        con.print(f"report: {page}")
    _exit_now(code)
    return code


def _exit_now(code: int) -> None:
    """Run as the ``sm120kit`` program, end here: Ray's exit handler (``ray.shutdown``, ~1 s,
    longer while a ``ray.init`` given up on at the deadline still runs) would otherwise keep the
    process past ``--deadline`` after the bundle is written. Never in-process (tests, library)."""
    import os
    import sys

    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if getattr(spec, "name", "") == "sm120kit.__main__" or Path(sys.argv[0]).name == "sm120kit":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


@click.command(
    "collect",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
              default=Path("."), show_default=True, help="Where the bundle is written.")
@click.option("--attach", "attach", is_flag=False, flag_value="search", default=None,
              metavar="[PID]",
              help="Snapshot a running vLLM now: its PID (API server, engine core or a worker), "
              "or no value to search all processes for vLLM titles. Never kills anything.")
@click.option("--ray", "ray_addr", is_flag=False, flag_value="auto", default=None,
              metavar="[ADDRESS]",
              help="Collect from every node of a Ray cluster (vLLM's Ray executor): its GCS "
              "address, or no value for `auto` (RAY_ADDRESS / the local node's cluster). Alone: "
              "snapshot now; with `-- vllm serve ...`: gather all nodes at a stall. Needs "
              "sm120kit[ray] on every node.")
@click.option("--ray-worker-class", "ray_classes", multiple=True, metavar="CLASS",
              help="Ray actor class of the vLLM workers (repeatable; default: RayWorkerProc, "
              "RayWorkerWrapper).")
@click.option("--no-ray-local", is_flag=True,
              help="With --ray: do not also snapshot vLLM processes found by title on this node.")
@options.stall_timeout_option
@click.option("--until-ready", is_flag=True,
              help="Exit 0 once the server is ready (prints phase timings) and stop it.")
@click.option("--deadline", "deadline", type=float, default=60.0, show_default=True,
              help="Upper bound in seconds for collecting the evidence.")
@click.option("--no-redact", is_flag=True, help="Keep secrets in the bundle (not recommended).")
@click.option("--obfuscate-hosts", "host_map", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="Replace host names/IPs by stable aliases; MAPFILE keeps the "
              "private original → alias map (never put into the bundle).")
@click.option("--always-bundle", is_flag=True, help="Write a bundle even for a healthy run.")
@click.option("--keep-dir", is_flag=True,
              help="Keep the bundle folder next to its .tar.gz (default: only the tarball and "
              "its report page, <bundle>.html, are kept).")
@click.option("--keep-running", is_flag=True,
              help="After a stall bundle, keep supervising instead of stopping the command.")
@click.option("--stacks", "stacks", type=click.Choice(["auto", "py-spy", "faulthandler", "none"]),
              default="auto", show_default=True,
              help="How to get Python stacks (faulthandler: only processes started by collect).")
@click.option("--no-diag-env", is_flag=True,
              help="Do not add diagnostic environment variables / --watchdog-config.")
@click.option("--no-doctor", is_flag=True, help="Skip the doctor collector.")
@click.option("--sample-gap", type=float, default=2.0, show_default=True,
              help="Seconds between the two stack samples (busy vs blocked).")
@click.option("--patience", "patience", multiple=True, metavar="PHASE=SECONDS",
              help="Silence allowed in a known-long phase (jit-compile, weight-load, "
              "cuda-graph-capture, autotune); defaults 1800/1800/900/1200 s. Repeatable.")
@click.option("--no-progress", is_flag=True,
              help="Judge stalls by output only (no sampling of processes, IO, caches, GPU).")
@click.option("--status-every", type=float, default=30.0, show_default=True, hidden=True,
              help="Seconds between live status lines while the output is quiet.")
@options.json_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def collect_cmd(
    out_dir: Path, attach: str | None, stall_timeout: float, until_ready: bool, deadline: float,
    no_redact: bool, host_map: Path | None, always_bundle: bool, keep_running: bool, stacks: str,
    no_diag_env: bool, no_doctor: bool, sample_gap: float, patience: tuple[str, ...],
    no_progress: bool, status_every: float, as_json: bool, command: tuple[str, ...],
    ray_addr: str | None = None, ray_classes: tuple[str, ...] = (), no_ray_local: bool = False,
    keep_dir: bool = False,
) -> int:
    """Supervise `-- vllm serve ...` and bundle the evidence of a stall, or `--attach [PID]`.

    \b
    sm120kit collect --until-ready -- vllm serve MODEL --decode-context-parallel-size 8 ...
    sm120kit collect --attach            # find VLLM::* processes and snapshot them
    sm120kit collect --attach 12345      # a worker or API server pid
    sm120kit collect --ray               # every node of the local Ray cluster, now
    sm120kit collect --ray -- vllm serve MODEL --distributed-executor-backend ray ...
    """
    if stall_timeout <= 0 or deadline <= 0:
        raise UserError("--stall-timeout and --deadline must be positive")
    ray_opts = None
    if ray_addr is not None:
        ray_opts, command = _ray_options(ray_addr, ray_classes, no_ray_local, attach, command)
        if not command:
            return _collect_ray(ray_opts, out_dir, deadline, sample_gap, stacks, no_doctor,
                                no_redact, host_map, as_json=as_json, keep_dir=keep_dir)
    if attach is not None:
        pid: int | None = None
        if command and attach == "search" and len(command) == 1 and command[0].isdigit():
            attach = command[0]  # `--attach -o DIR 123`
        elif command:
            raise UserError("--attach takes at most one PID, not a command",
                            hint="sm120kit collect --attach [PID]  or  sm120kit collect -- CMD ...")
        if attach != "search":
            if not attach.isdigit():
                raise UserError(f"--attach expects a PID, got {attach!r}",
                                hint="sm120kit collect --attach [PID]")
            pid = int(attach)
        opts = Options(deadline_s=deadline, sample_gap_s=sample_gap,
                       stack_method="py-spy" if stacks == "auto" else stacks,
                       doctor=not no_doctor, hooks=bundle_hooks(doctor=not no_doctor))
        tb, res, procs = do_attach(pid, out_dir, deadline_s=deadline, redact=not no_redact,
                                   host_map_file=host_map, options=opts)
        _render_attach(tb, res, procs, as_json, finish_bundle(tb, keep_dir=keep_dir, judge=True))
        return ExitCode.OK
    argv = list(command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UserError("no command to launch",
                        hint="sm120kit collect [OPTIONS] -- vllm serve MODEL ...  (or --attach)")
    if shutil.which(argv[0]) is None and not Path(argv[0]).exists():
        raise UserError(f"command not found: {argv[0]}", hint="check PATH / the virtualenv")
    lo = LaunchOptions(
        out_dir=out_dir, stall_timeout=stall_timeout, until_ready=until_ready,
        deadline_s=deadline, redact=not no_redact, host_map_file=host_map,
        always_bundle=always_bundle, keep_running=keep_running, stacks=stacks,
        diag_env=not no_diag_env, faulthandler=not no_diag_env, sample_gap_s=sample_gap,
        doctor=not no_doctor, stdout_to_stderr=as_json, progress=not no_progress,
        patience=parse_patience(patience), status_every_s=status_every,
        hooks=bundle_hooks(doctor=not no_doctor),
    )
    if ray_opts is not None:
        from sm120kit.collect.ray_cluster import remote_gather

        ray_opts.discover_local = False  # the supervisor snapshots its own tree
        lo.remote = remote_gather(ray_opts, redact=not no_redact)
    lres = launch(argv, lo)
    _render_launch(lres, as_json, finish_bundle(lres.bundle, keep_dir=keep_dir, judge=True))
    return int(lres.exit_code)
