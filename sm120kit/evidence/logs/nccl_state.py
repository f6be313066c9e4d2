"""What NCCL's own lines say: WARNs, transports, communicators and ranks, env, COLL op counts."""

from __future__ import annotations

import re
from collections.abc import Callable

from sm120kit.evidence.logs.parsers import nccl_comm_rank, nccl_env, nccl_transport, nccl_version
from sm120kit.evidence.logs.prefix import Origin
from sm120kit.evidence.logs.records import Evidence, Proc
from sm120kit.evidence.logs.versions import VersionScan

_OPCOUNT = re.compile(r"(?P<op>\w+): opCount (?P<n>[0-9a-f]+) .*?comm (?P<comm>0x[0-9a-f]+)")
# an NCCL WARN that states a fault: NCCL's WARN() before it returns an error code -
# "Cuda failure 'invalid argument'" (CUDACHECK), "Call to connect returned Connection refused",
# "NCCL cannot be captured in a graph if ..." (ncclInvalidUsage), "... timeout", "... failed"
_WARN_FAULT = re.compile(r"rror|ailed|ailure|imeout|imed out|[Cc]annot |[Ii]nvalid |not supported"
                         r"|[Uu]nsupported|returned |no socket interface|Got completion from peer")
# WARNs NCCL prints and goes on from: a bad environment value it replaces ("Invalid value x for
# NCCL_NTHREADS, using default 512." - src/misc/param.cc), a setting it ignores or falls back from
_WARN_GOES_ON = re.compile(r"using default|[Ii]gnor(?:e|ed|ing)\b|[Ff]all(?:ing)? ?back")
MAX_WARNS = 50
MAX_COMMS = 256
MAX_ENV = 200


def warn_goes_on(msg: str) -> bool:
    """An NCCL WARN the run goes on from (a replaced env value, an ignored setting)."""
    return bool(_WARN_GOES_ON.search(msg))


class NcclState:
    def __init__(self) -> None:
        self.nccl_warns: list[Evidence] = []
        self.nccl_warn_count = 0
        self.transports: dict[str, set[str]] = {}
        self.nccl_env: dict[str, str] = {}
        self.nccl_comms: dict[str, dict[int, str]] = {}  # comm -> rank -> proc key
        # NCCL COLL traces: comm -> proc key -> (last opCount, op, evidence)
        self.nccl_ops: dict[str, dict[str, tuple[int, str, Evidence]]] = {}

    def op_count(self, text: str, p: Proc, ev: Evidence) -> None:
        """A COLL trace line (the stream keeps each rank's last one): the rank's last opCount."""
        if "opCount" in text:
            m = _OPCOUNT.search(text)
            if m and len(self.nccl_ops) < MAX_COMMS:
                self.nccl_ops.setdefault(m.group("comm"), {})[p.key] = (
                    int(m.group("n"), 16), m.group("op"), ev)

    def feed(self, p: Proc, o: Origin, msg: str, ev: Evidence, order: int, vs: VersionScan,
             note_failure: Callable[[Evidence], None]) -> None:
        """One NCCL line of process ``p`` (line ``order`` of the input)."""
        if o.host and o.pid is not None:
            p.nccl_keys.add(f"{o.host}:{o.pid}")
        if o.level == "WARN":
            self._warn(p, msg, ev, order, note_failure)
        if " via " in msg:
            t = nccl_transport(msg)
            if t:
                self.transports.setdefault(p.key, set()).add(t)
        if "NCCL version" in msg:
            _version(msg, vs)
        if " nRanks " in msg:
            self._comm(p, msg, vs)
        if "set by environment" in msg:
            e = nccl_env(msg)
            if e and len(self.nccl_env) < MAX_ENV:
                self.nccl_env[e[0]] = e[1]

    def _warn(self, p: Proc, msg: str, ev: Evidence, order: int,
              note_failure: Callable[[Evidence], None]) -> None:
        self.nccl_warn_count += 1
        if len(self.nccl_warns) < MAX_WARNS:
            self.nccl_warns.append(ev)
        if _WARN_FAULT.search(msg) and not warn_goes_on(msg):
            note_failure(ev)
        if p.first_error is None and ("rror" in msg or "ailure" in msg):
            p.first_error, p.first_error_order = ev, order

    def _comm(self, p: Proc, msg: str, vs: VersionScan) -> None:
        c = nccl_comm_rank(msg)
        if c:
            comm, rank, n = c
            if len(self.nccl_comms) < MAX_COMMS:
                self.nccl_comms.setdefault(comm, {})[rank] = p.key
            if vs.world_size is not None and n == vs.world_size and p.rank is None:
                p.rank = rank


def _version(msg: str, vs: VersionScan) -> None:
    v = nccl_version(msg)
    if v:
        vs.versions.setdefault("nccl", v[0])
        if v[1]:
            vs.versions.setdefault("cuda", v[1])
