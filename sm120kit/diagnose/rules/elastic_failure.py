"""torchrun's summary names the failed rank: ``Root Cause (first observed failure)`` with its
rank, exit code, pid and error file, or the agent's ``failed (exitcode: N) local_rank: R``.
A negative exit code is the signal that ended the rank; -9 (SIGKILL) is named out-of-memory only
beside an OOM record (signal ``launcher-oom-record``, catalogue/known-launchers.toml: the kernel's
OOM killer, a memory cgroup, OOMKilled): torchrun's agent sends SIGTERM to the other workers, so
a SIGKILL came from outside and, without that record, its sender is not known (rank-crashed).
``error_file`` is where ``@record`` wrote the rank's own traceback."""

from __future__ import annotations

from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.elastic import ElasticFailure

_SIGNALS = {9: "SIGKILL", 6: "SIGABRT", 11: "SIGSEGV", 15: "SIGTERM", 7: "SIGBUS", 4: "SIGILL"}


OOM_RECORD = "launcher-oom-record"


def _describe(f: ElasticFailure, oom: bool) -> str:
    who = f"rank {f.rank}" if f.rank is not None else (
        f"local rank {f.local_rank}" if f.local_rank is not None else "a rank")
    if f.rank is not None and f.local_rank is not None:
        who += f" (local rank {f.local_rank})"
    at = f" on {f.host}" if f.host else ""
    pid = f", pid {f.pid}" if f.pid is not None else ""
    sig = f.signal
    if sig is not None:
        how = f"was killed by signal {sig} ({_SIGNALS.get(sig, 'signal')})"
        if sig == 9:
            how += (": the log records an OOM kill (host memory)" if oom else
                    ": sent from outside torchrun (no OOM record in the log: the host's OOM "
                    "killer, a container limit or a scheduler)")
    else:
        how = f"exited with code {f.exitcode}" if f.exitcode is not None else "failed"
    src = f"; its traceback is in {f.error_file}" if f.error_file else (
        "; no error_file: the rank's own traceback is in its output (or decorate its main with "
        "torch.distributed.elastic.multiprocessing.errors.record)")
    return f"torchrun reports {who}{at}{pid} {how}, first of the job's failures{src}"


def check(ctx: RuleContext) -> list[Finding]:
    root = ctx.facts.elastic_root
    if root is None:
        return []
    ev = [root.ev] + [f.ev for f in ctx.facts.elastic if f is not root][:2]
    ranks = [root.rank] if root.rank is not None else []
    oom = root.signal == 9 and bool(ctx.hits(OOM_RECORD))
    conf = 0.5
    return [RULE.finding(conf, _describe(root, oom), ev, ranks=ranks, role="position",
                         category="out-of-memory" if oom else None)]


RULE = Rule(
    id="torchrun-failure",
    category="rank-crashed",
    needs="torchrun's ChildFailedError summary or its agent's 'failed (exitcode: N)' line",
    tier="dead-rank",
    check=check,
    fix="Read that rank's own output (its first traceback) or its error_file; for a signal -9 "
        "check `dmesg` / the container's memory limit (host RAM, not GPU memory).",
    link="https://pytorch.org/docs/stable/elastic/errors.html",
)
