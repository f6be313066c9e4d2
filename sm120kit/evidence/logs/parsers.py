"""Parsers for the message kinds diagnosis needs: torch watchdog records, NCCL lines, vLLM
timeouts/deaths, exceptions. Each takes the (ANSI-stripped) line and returns a small record or
None; all key on substrings that stayed stable across torch 2.2–2.14, NCCL 2.18–2.32 and
vLLM V0–0.34 (see shared/reference/hang-diagnostics.md §2.2–2.3, §3.1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# --- torch ProcessGroupNCCL watchdog ---------------------------------------------------------
_WORK = re.compile(
    r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)"
    r"(?:, NumelIn=(?P<nin>-?\d+), NumelOut=(?P<nout>-?\d+))?"
    r"(?:, Timeout\(ms\)=(?P<tmo>\d+))?\)"
    r"(?: ?ran for (?P<ran>\d+) ?milliseconds)?"
)
_PG = re.compile(
    r"\[(?:PG ID (?P<pgid>\d+) PG GUID (?P<guid>[^ \]]+)(?: ?\((?P<gdesc>[^)]*)\))?"
    r"|PG (?P<pg>\d+)(?: \((?P<desc>[^)]*)\))?) Rank (?P<rank>\d+)\]"
)
_RANK_ONLY = re.compile(r"\[Rank (?P<rank>\d+)\]")
_ENQ = re.compile(
    r"last enqueued (?:NCCL )?work: (?P<enq>-?\d+), last completed (?:NCCL )?work: (?P<done>-?\d+)"
)
_AT_WORK = re.compile(
    r"(?:Timeout at NCCL work|detected by watchdog at work(?: sequence id)?):? (?P<seq>-?\d+)"
)


@dataclass
class WatchdogRecord:
    rank: int | None = None
    pg: str | None = None
    seq: int | None = None
    op: str | None = None
    numel_in: int | None = None
    numel_out: int | None = None
    timeout_ms: int | None = None
    ran_ms: int | None = None
    last_enqueued: int | None = None
    last_completed: int | None = None
    run: int = 0  # which launch of the input it belongs to
    t: float | None = None  # log time of the line (sortable seconds), when it has one


def parse_watchdog(line: str) -> WatchdogRecord | None:
    """A torch watchdog timeout/status line → record (fields that the line has)."""
    if "atchdog" not in line and "last enqueued" not in line and "Timeout at NCCL work" not in line:
        return None
    w = _WORK.search(line)
    e = _ENQ.search(line)
    a = _AT_WORK.search(line)
    if not (w or e or a):
        return None
    rec = WatchdogRecord()
    p = _PG.search(line)
    if p:
        rec.rank = int(p.group("rank"))
        rec.pg = p.group("pgid") or p.group("pg")
    else:
        r = _RANK_ONLY.search(line)
        if r:
            rec.rank = int(r.group("rank"))
    if w:
        rec.seq = int(w.group("seq"))
        rec.op = w.group("op")
        rec.numel_in = int(w.group("nin")) if w.group("nin") else None
        rec.numel_out = int(w.group("nout")) if w.group("nout") else None
        rec.timeout_ms = int(w.group("tmo")) if w.group("tmo") else None
        rec.ran_ms = int(w.group("ran")) if w.group("ran") else None
    if a and rec.seq is None:
        rec.seq = int(a.group("seq"))
    if e:
        rec.last_enqueued = int(e.group("enq"))
        rec.last_completed = int(e.group("done"))
    return rec


# --- NCCL ------------------------------------------------------------------------------------
_TRANSPORT = re.compile(r" via (?P<t>P2P/[\w/]+|SHM(?:/[\w/]+)?|NET/[\w/.-]+|COLLNET\S*|NVLS\S*)")
_NCCL_VERSION = re.compile(r"NCCL version (?P<v>\d+\.\d+\.\d+)(?:\+cuda(?P<cuda>[\d.]+))?")
_COMM_RANK = re.compile(r"comm 0x(?P<comm>[0-9a-f]+) rank (?P<rank>\d+) nRanks (?P<n>\d+)")
_NCCL_ENV = re.compile(r"(?P<k>NCCL_[A-Z0-9_]+) set by environment to (?P<v>\S*)")


def nccl_transport(msg: str) -> str | None:
    m = _TRANSPORT.search(msg)
    if not m:
        return None
    t = m.group("t")
    return t.split("/")[0] + ("/" + t.split("/")[1] if "/" in t else "")


def nccl_version(msg: str) -> tuple[str, str | None] | None:
    m = _NCCL_VERSION.search(msg)
    return (m.group("v"), m.group("cuda")) if m else None


def nccl_comm_rank(msg: str) -> tuple[str, int, int] | None:
    m = _COMM_RANK.search(msg)
    return (m.group("comm"), int(m.group("rank")), int(m.group("n"))) if m else None


def nccl_env(msg: str) -> tuple[str, str] | None:
    m = _NCCL_ENV.search(msg)
    return (m.group("k"), m.group("v")) if m else None


# --- vLLM timeouts and deaths ----------------------------------------------------------------
_SHM = re.compile(r"No available (?:shared memory broadcast )?block found in (?P<s>\d+) seconds?")
_RPC = re.compile(r"RPC call to (?P<method>\w+) timed out")
_DEATH = re.compile(
    r"Worker proc (?P<proc>\S+) died unexpectedly(?: \(exit code: (?P<code>-?\d+)\))?"
    r"|Worker (?P<proc2>\S+) pid (?P<pid>\d+) died, exit code: (?P<code2>-?\d+)"
    r"|RayWorkerProc rank=(?P<rrank>\d+) died unexpectedly"
    r"|Engine core process (?P<proc3>\S+) died unexpectedly"
)
_PROC_RANK = re.compile(r"(?:VllmWorker|Worker)[-_](?P<rank>\d+)\b")


@dataclass
class Death:
    proc: str | None
    rank: int | None
    pid: int | None
    exit_code: int | None


def shm_wait_seconds(line: str) -> int | None:
    m = _SHM.search(line) if "available" in line else None
    return int(m.group("s")) if m else None


def rpc_timeout(line: str) -> str | None:
    m = _RPC.search(line) if "timed out" in line else None
    return m.group("method") if m else None


def worker_death(line: str) -> Death | None:
    if "died" not in line:
        return None
    m = _DEATH.search(line)
    if not m:
        return None
    proc = m.group("proc") or m.group("proc2") or m.group("proc3")
    code = m.group("code") or m.group("code2")
    rank = None
    if m.group("rrank"):
        rank = int(m.group("rrank"))
    elif proc:
        r = _PROC_RANK.search(proc)
        rank = int(r.group("rank")) if r else None
    return Death(
        proc=proc, rank=rank, pid=int(m.group("pid")) if m.group("pid") else None,
        exit_code=int(code) if code is not None else None,
    )


# --- exceptions ------------------------------------------------------------------------------
_EXC = re.compile(
    r"^\s*(?P<type>(?:[A-Za-z_][\w]*\.)*[A-Z][\w]*(?:Error|Exception|Exit|Interrupt|Warning)|"
    r"torch\.OutOfMemoryError|c10::\w+)(?::\s*(?P<msg>.*))?$"
)


def exception_line(msg: str) -> tuple[str, str] | None:
    """``ValueError: bad thing`` (a traceback's last line) → (type, message)."""
    if "Error" not in msg and "Exception" not in msg and "Exit" not in msg and "c10::" not in msg:
        return None
    if msg.startswith((" ", "\t")) and not msg.lstrip().startswith(("raise", "torch.", "c10")):
        # traceback frame/source lines are indented; exception lines are not (except nested)
        if not _EXC.match(msg.strip()):
            return None
    m = _EXC.match(msg.strip())
    if not m:
        return None
    t = m.group("type")
    if t.endswith("Warning"):
        return None
    return t, (m.group("msg") or "").strip()
