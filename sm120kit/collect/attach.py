"""``sm120kit collect --attach [PID]``: find a running vLLM process tree and snapshot it now."""

from __future__ import annotations

from pathlib import Path

from sm120kit.errors import UserError
from sm120kit.evidence.procs import Proc, discover
from sm120kit.services.snapshot import CollectContext, Options, Result, collect_procs


def attach(
    pid: int | None,
    out_dir: Path,
    *,
    deadline_s: float = 60.0,
    redact: bool = True,
    host_map_file: Path | None = None,
    options: Options | None = None,
) -> tuple[Path, Result | None, list[Proc]]:
    """``collect --attach [PID]``: find the running vLLM tree (see :func:`procs.discover`) and
    snapshot it now. Never signals anything. Raises UserError when nothing is found."""
    procs = discover(pid)
    if not procs:
        if pid is not None:
            raise UserError(f"no process with pid {pid}", hint="check the pid with `ps -ef`")
        raise UserError(
            "no running vLLM process found (titles VLLM::Worker*, VLLM::EngineCore*, "
            "VLLM::APIServer*, sm120kit::warmup_DCP*, or `vllm serve`)",
            hint="pass the API server or a worker pid: sm120kit collect --attach PID",
        )
    roots = [p for p in procs if p.ppid not in {q.pid for q in procs}]
    ctx = CollectContext(mode="attach")
    if len(roots) > 1:
        ctx.notes.append("several process trees matched: " + ", ".join(
            f"{r.label} (pid {r.pid})" for r in roots) + "; all were sampled")
    tb, res = collect_procs(procs, out_dir, reason="attach: snapshot requested",
                            deadline_s=deadline_s, redact=redact, host_map_file=host_map_file,
                            options=options, context=ctx)
    return tb, res, procs


__all__ = ["attach"]
