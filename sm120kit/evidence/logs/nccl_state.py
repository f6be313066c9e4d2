"""What NCCL's own lines say: WARNs, transports, communicators and ranks, env, COLL op counts."""

from __future__ import annotations

import re
from collections.abc import Callable

from sm120kit.evidence.logs.cue import Cues
from sm120kit.evidence.logs.parsers import nccl_comm_rank, nccl_env, nccl_transport, nccl_version
from sm120kit.evidence.logs.prefix import Origin
from sm120kit.evidence.logs.records import Evidence, Proc
from sm120kit.evidence.logs.versions import VersionScan

_OPCOUNT = re.compile(r"(?P<op>\w+): opCount (?P<n>[0-9a-f]+) .*?comm (?P<comm>0x[0-9a-f]+)")
MAX_WARNS = 50
MAX_COMMS = 256
MAX_ENV = 200


class NcclState:
    def __init__(self, cues: Cues | None = None) -> None:
        """``cues``: ``nccl-warn-fault`` (a WARN that states a fault: NCCL's WARN() before it
        returns an error code) and ``nccl-warn-goes-on`` (a replaced env value, an ignored
        setting); catalogue cues.toml."""
        self.fault = (cues or {}).get("nccl-warn-fault")
        self.goes_on = (cues or {}).get("nccl-warn-goes-on")
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
             note_failure: Callable[[Evidence], None], advice: bool = False) -> None:
        """One NCCL line of process ``p`` (line ``order`` of the input); ``advice``: a WARN the
        library prints on healthy runs too (catalogue benign.toml) is no fault."""
        if o.host and o.pid is not None:
            p.nccl_keys.add(f"{o.host}:{o.pid}")
        if o.level == "WARN" and not advice:
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
        if self.fault is not None and self.fault.find(msg) is not None and \
                (self.goes_on is None or self.goes_on.find(msg) is None):
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
