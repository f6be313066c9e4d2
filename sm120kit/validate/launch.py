"""``sm120kit validate -- vllm serve ...``: launch the DCP server through collect's supervisor,
validate it, and (without ``--reference-url``) relaunch the same line with DCP 1 as the reference.

The servers run one after the other (both would not fit on the same GPUs): the DCP server answers
every planned prompt, is stopped, the DCP-1 relaunch answers the same prompts, and the two are
compared. A server that crashes or stalls (collect's silence/signal/death rules), or stops answering
validate, is bundled by the supervisor while still live; the error names the bundle.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sm120kit.errors import UserError
from sm120kit.models.serve_args import parse_serve_args
from sm120kit.models.timeouts import DEFAULT_STALL_TIMEOUT_S
from sm120kit.services.snapshot import BundleHooks
from sm120kit.services.supervision import LaunchOptions, LaunchResult, LaunchSupervisor
from sm120kit.validate.client import ServerClient
from sm120kit.validate.identity import counters_tell, refuse_same
from sm120kit.validate.kv import kv_capacity
from sm120kit.validate.model import NoiseFloor, ServerFacts, ValidateResult
from sm120kit.validate.run import (
    Planned,
    ValidateOptions,
    answers,
    dcp_layout,
    noise_floor,
    placement_notes,
    plan,
    result,
    server_facts,
)

Progress = Callable[[str], None]
_DCP_OPTS = ("--decode-context-parallel-size", "-dcp")
_INTERLEAVE_OPTS = ("--cp-kv-cache-interleave-size", "--dcp-kv-cache-interleave-size")


@dataclass
class LaunchSettings:
    out_dir: Path
    ready_timeout: float = 1800.0  # cold JIT + weight load of a large checkpoint: ~20 min seen
    stall_timeout: float = DEFAULT_STALL_TIMEOUT_S
    #: doctor's report and the bundle verdict, composed by the CLI
    hooks: BundleHooks = field(default_factory=BundleHooks)


def serve_url(argv: list[str]) -> str:
    """Where ``vllm serve`` listens: ``--host``/``--port`` of the line (default :8000)."""
    host, port = "127.0.0.1", "8000"
    for i, tok in enumerate(argv):
        name, eq, val = tok.partition("=")
        if name in ("--host", "--port"):
            v = val if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            if name == "--port":
                port = v
            elif v not in ("", "0.0.0.0", "::"):
                host = v
    if not port.isdigit():
        raise UserError(f"--port {port!r} of the launch line is not a port number")
    return f"http://{host}:{port}"


def launch_api_key(argv: list[str]) -> str | None:
    """The first ``--api-key`` of the launch line (vLLM guards /v1/* with it), if any."""
    for i, tok in enumerate(argv):
        name, eq, val = tok.partition("=")
        if name == "--api-key":
            v = val if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            return v or None
    return None


def reference_argv(argv: list[str]) -> list[str]:
    """The same launch with DCP 1: the DCP size and interleave options removed, DCP 1 added."""
    out: list[str] = []
    skip = False
    for tok in argv:
        if skip:
            skip = False
            continue
        name, eq, _ = tok.partition("=")
        if name in _DCP_OPTS + _INTERLEAVE_OPTS:
            skip = not eq
            continue
        out.append(tok)
    return out + ["--decode-context-parallel-size", "1"]


def _wait_ready(sup: LaunchSupervisor, thread: threading.Thread, url: str,
                settings: LaunchSettings, label: str, api_key: str | None) -> None:
    """Until ``/v1/models`` answers; a 401 is raised at once (a wrong key never gets ready)."""
    deadline = time.monotonic() + settings.ready_timeout
    with ServerClient(url, label=label, timeout=10.0, api_key=api_key) as probe:
        while time.monotonic() < deadline:
            if not thread.is_alive():
                return  # ended before ready: the caller reports the supervisor's outcome
            if sup.ready:
                try:
                    probe.models()
                    return
                except UserError as exc:
                    if "HTTP 401" in exc.message:
                        raise
            time.sleep(0.5)
    sup.report_stall(f"not ready after {settings.ready_timeout:.0f}s")
    thread.join()


@contextmanager
def launched(argv: list[str], settings: LaunchSettings, label: str, say: Progress,
             api_key: str | None = None) -> Iterator[tuple[str, LaunchSupervisor]]:
    """Run ``argv`` under collect's supervisor until the block ends; its URL and supervisor.
    (All of validate's launch supervision is here: one place to swap the supervisor.)"""
    url = serve_url(argv)
    opts = LaunchOptions(out_dir=settings.out_dir, stall_timeout=settings.stall_timeout,
                         echo=False, doctor=False, hooks=settings.hooks)
    sup = LaunchSupervisor(list(argv), opts, on_event=lambda m: say(f"{label}: {m}"))
    box: dict[str, LaunchResult] = {}
    thread = threading.Thread(target=lambda: box.setdefault("r", sup.run()), daemon=True,
                              name=f"validate-{label}")
    thread.start()
    try:
        _wait_ready(sup, thread, url, settings, label, api_key)
    except BaseException:  # a 401, Ctrl-C: stop the server before saying why
        sup.stop_requested.set()
        thread.join()
        raise
    if not thread.is_alive():
        _raise_outcome(box.get("r"), label, "before it was ready")
    try:
        yield url, sup
    except UserError as exc:
        if thread.is_alive():
            sup.report_stall(f"{label} stopped answering validate: {exc.message}")
        thread.join()
        _raise_outcome(box.get("r"), label, "during validation", cause=exc)
        raise
    finally:
        sup.stop_requested.set()
        thread.join()
    res = box.get("r")
    if res is not None and res.outcome not in ("stopped", "exited", "ready"):
        _raise_outcome(res, label, "during validation")


def _raise_outcome(res: LaunchResult | None, label: str, when: str,
                   cause: UserError | None = None) -> None:
    if res is None:
        raise UserError(f"the {label} launch ended {when} without a result")
    if res.outcome in ("stopped",) and cause is not None:
        raise cause
    hint = f"bundle: {res.bundle}; name the cause with: sm120kit diagnose {res.bundle}" \
        if res.bundle else None
    raise UserError(f"the {label} {res.outcome} {when}: {res.reason}", hint=hint) from cause


def _log_text(sup: LaunchSupervisor) -> str:
    with sup.lock:
        return "\n".join(line for dq in sup.tails.values() for line in dq)


def validate_launch(argv: list[str], opts: ValidateOptions, settings: LaunchSettings,
                    progress: Progress | None = None) -> ValidateResult:
    say = progress or (lambda _m: None)
    notes: list[str] = []
    sa = parse_serve_args(argv)
    opts.check()
    opts = replace(opts, dcp=sa.dcp if opts.dcp is None else opts.dcp,
                   interleave=sa.interleave if opts.interleave is None else opts.interleave,
                   block_size=sa.effective_block_size if opts.block_size is None
                   else opts.block_size,
                   layout_source="launch line", api_key=launch_api_key(argv) or opts.api_key)
    layout = dcp_layout(opts, notes)
    with launched(argv, settings, "DCP server", say, opts.api_key) as (url, sup):
        with opts.client(url, "server") as dcp:
            server = server_facts(dcp)
            ref_facts = _given_reference(opts, dcp)
            planned = plan(opts, dcp, server, layout, True, ref_facts)
            notes += placement_notes(planned, layout)
            mine = answers(dcp, planned, opts, say)
        log = _log_text(sup)
    reference, theirs, floor = _reference(argv, opts, settings, server, planned, notes, say)
    kv = kv_capacity(log, None)
    res = result(server, reference, layout, opts, planned, mine, theirs, floor, notes, kv)
    res.launch = {"argv": list(argv), "url": url,
                  "reference_argv": None if opts.reference_url else reference_argv(argv)}
    return res


def _given_reference(opts: ValidateOptions, dcp: ServerClient) -> ServerFacts | None:
    """With --reference-url: refuse the launched server itself, and learn its max_model_len."""
    if not opts.reference_url:
        return None
    with opts.client(opts.reference_url, "reference", dcp.model) as ref:
        refuse_same(dcp.url, ref.url, dcp.metrics(), ref.metrics(), opts.dcp,
                    counters_tell(dcp, ref))
        return server_facts(ref)


def _reference(argv: list[str], opts: ValidateOptions, settings: LaunchSettings,
               server: ServerFacts, planned: list[Planned], notes: list[str],
               say: Progress) -> tuple[ServerFacts, list[Any], NoiseFloor | None]:
    model = opts.model or server.model

    def ask(url: str) -> tuple[ServerFacts, list[Any], NoiseFloor | None]:
        with opts.client(url, "reference", model) as ref:
            facts = server_facts(ref)
            theirs = answers(ref, planned, opts, say)
            return facts, theirs, noise_floor(ref, planned, theirs, opts, say)

    if opts.reference_url:
        return ask(opts.reference_url)
    notes.append("reference: the same launch line relaunched with DCP 1")
    with launched(reference_argv(argv), settings, "reference", say,
                  opts.reference_api_key or opts.api_key) as (url, _sup):
        return ask(url)
