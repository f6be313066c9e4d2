"""Who wrote a line: vLLM process prefixes of every era, NCCL headers, torch ``[rankN]:``.

Recognised (any of them may follow a ``docker logs --timestamps`` RFC 3339 stamp and ANSI codes):

* vLLM logging prefixes: ``(Worker_TP3_DCP3 pid=353)``, ``(Worker pid=958)``,
  ``(VllmWorker rank=0 pid=85)``, ``(VllmWorkerProcess pid=3106)``,
  ``(RayWorkerWrapper pid=371, ip=10.128.21.6)``, ``(EngineCore_DP0 pid=77352)``,
  ``(EngineCore pid=1)``, ``(APIServer pid=1)``, ``(ApiServer_0 pid=1)``; several glued together
  (``(Worker pid=352) (Worker pid=350) INFO ...``): the last one owns the message.
* NCCL: ``host:pid:tid [dev] NCCL INFO|WARN|TRACE ...`` (optionally ``[timestamp] `` first).
* torch C++: ``[rank3]:[E1012 22:31:22.267 ProcessGroupNCCL.cpp:607] ...``, also without the
  rank prefix (``[E720 10:11:10.123 ...]``), and glog's ``E0720 10:11:10.123456 42 f.cc:1] ...``.
* vLLM level/time/location: ``INFO 05-15 05:34:09 [gpu_worker.py:123]`` and the V0 form
  ``INFO 10-30 11:56:48 multiproc_worker_utils.py:123]``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DOCKER_TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+")
# also Ray's bare ``(pid=2150)`` and the launchers that tag a job's output with a task or node
# name and a comma: SkyPilot's ``(vllm-test, pid=2150)`` / ``(head, rank=0, pid=2150)`` (that
# rank is the node's, not a process rank, and is not read)
_PREFIX = re.compile(
    r"\((?:(?P<name>[A-Za-z_][\w.-]*)(?: rank=(?P<rank>\d+))? |(?P<tag>[A-Za-z_][\w.-]*), "
    r"(?:rank=\d+, )?)?pid=(?P<pid>\d+)(?:, ip=(?P<ip>[0-9A-Fa-f.:]+))?\)\s?"
)
_NCCL = re.compile(
    r"(?:\[[^\]]{4,40}\] )?(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
    r"(?:[\w./-]+:\d+ )?NCCL (?P<level>INFO|WARN|TRACE|VERSION|ABORT)\b ?"
)
_TORCH_RANK = re.compile(r"\[rank(?P<rank>\d+)\]:")
_LEVEL = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) +(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d)"
    r"(?:[.,]\d+)? +\[?(?P<loc>[\w./<>-]+?(?::\d+)?)\] ?"
)
# torch's c10 logging: ``[E720 10:11:10.123 ...]`` (month not zero-padded), glog proper:
# ``E0720 10:11:10.123456 4242 file.cc:12] ...`` (``[`` optional: torch and glog both)
_GLOG = re.compile(r"\[?(?P<sev>[IWEF])(?P<mon>\d{1,2})(?P<day>\d\d) (?P<h>\d\d):(?P<m>\d\d):"
                   r"(?P<s>\d\d)(?:\.\d+)?[ \]]")
_SEV = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL"}
_WORKER_PARTS = re.compile(r"_(DP|PP|PCP|TP|DCP|EP)(\d+)")


@dataclass(frozen=True)
class Origin:
    """Attribution of one line."""

    name: str | None = None  # vLLM process name (Worker_TP3_DCP3, EngineCore_DP0, ...)
    pid: int | None = None
    rank: int | None = None  # explicit rank (VllmWorker rank=, torch [rankN]:)
    ip: str | None = None
    host: str | None = None  # NCCL host
    dev: int | None = None  # NCCL cuda device
    kind: str = "plain"  # vllm | nccl | torch | plain
    level: str | None = None  # INFO/WARNING/ERROR/... (vLLM, NCCL or glog)
    t: float | None = None  # sortable seconds (month/day/time; no year in vLLM logs)
    loc: str | None = None  # vLLM file:line
    message: str = ""  # the text after the prefixes

    @property
    def role(self) -> str:
        return role_of(self.name)

    @property
    def key(self) -> str:
        """Stable per-process key: pid when known, else rank, else the process name."""
        if self.pid is not None:
            return f"pid {self.pid}"
        if self.rank is not None:
            return f"rank {self.rank}"
        return self.name or "main"


def role_of(name: str | None) -> str:
    if not name:
        return "main"
    low = name.lower()
    if low.startswith(("apiserver", "api_server")):
        return "api-server"
    if low.startswith("enginecore") or low.startswith("engine_core"):
        return "engine-core"
    if "worker" in low:
        return "worker"
    return "other"


def worker_parts(name: str | None) -> dict[str, int]:
    """``Worker_TP3_DCP3`` → {"TP": 3, "DCP": 3}."""
    if not name:
        return {}
    return {k: int(v) for k, v in _WORKER_PARTS.findall(name)}


def _t(mon: str, day: str, h: str, m: str, s: str) -> float:
    return float((((int(mon) * 31 + int(day)) * 24 + int(h)) * 60 + int(m)) * 60 + int(s))


_TS_CACHE: dict[str, float] = {}


def _ts(ts: str) -> float:
    """``MM-DD HH:MM:SS`` → sortable seconds (cached: a log repeats each second many times)."""
    v = _TS_CACHE.get(ts)
    if v is None:
        v = _t(ts[0:2], ts[3:5], ts[6:8], ts[9:11], ts[12:14])
        if len(_TS_CACHE) > 100_000:
            _TS_CACHE.clear()
        _TS_CACHE[ts] = v
    return v


def attribute(line: str) -> Origin:
    """Parse the prefixes of an ANSI-stripped line."""
    pos = 0
    # cheap character tests gate every regex: most lines take one or two matches
    m = _DOCKER_TS.match(line) if line[:2].isdigit() else None
    t: float | None = None
    if m:
        ts = m.group(0)
        t = _t(ts[5:7], ts[8:10], ts[11:13], ts[14:16], ts[17:19])
        pos = m.end()
    name = pid = rank = ip = None
    while line.startswith("(", pos):
        pm = _PREFIX.match(line, pos)
        if not pm:
            break
        name, pid, ip = pm.group("name") or pm.group("tag"), int(pm.group("pid")), pm.group("ip")
        rank = int(pm.group("rank")) if pm.group("rank") else None
        pos = pm.end()
        while pos < len(line) and line[pos] in " \r":
            pos += 1
    nm = _NCCL.match(line, pos) if " NCCL " in line else None
    if nm:
        return Origin(
            name=name, pid=int(nm.group("pid")), rank=rank, ip=ip, host=nm.group("host"),
            dev=int(nm.group("dev")), kind="nccl", level=nm.group("level"), t=t,
            message=line[nm.end():],
        )
    tm = _TORCH_RANK.match(line, pos) if line.startswith("[rank", pos) else None
    if tm:
        rest = line[tm.end():]
        if rest.startswith(" "):
            rest = rest[1:]
        g = _GLOG.match(rest)
        lvl = None
        if g:
            lvl = _SEV[g.group("sev")]
            t = _t(g.group("mon"), g.group("day"), g.group("h"), g.group("m"), g.group("s"))
        return Origin(
            name=name, pid=pid, rank=int(tm.group("rank")), ip=ip, kind="torch", level=lvl, t=t,
            message=rest,
        )
    lm = _LEVEL.match(line, pos)
    if lm:
        lvl, ts, loc = lm.group("level", "ts", "loc")
        return Origin(
            name=name, pid=pid, rank=rank, ip=ip, kind="vllm",
            level="WARNING" if lvl == "WARN" else lvl, t=_ts(ts), loc=loc,
            message=line[lm.end():],
        )
    g = _GLOG.match(line, pos) if line[pos:pos + 1] in ("[", "I", "W", "E", "F") else None
    if g:  # a torch/glog line without a rank prefix: its own time, not the previous line's
        return Origin(
            name=name, pid=pid, rank=rank, ip=ip, kind="torch", level=_SEV[g.group("sev")],
            t=_t(g.group("mon"), g.group("day"), g.group("h"), g.group("m"), g.group("s")),
            message=line[pos:],
        )
    return Origin(
        name=name, pid=pid, rank=rank, ip=ip, kind="vllm" if name else "plain", t=t,
        message=line[pos:],
    )
