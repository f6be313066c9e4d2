"""Finding and labelling vLLM (and sm120kit warmup) processes.

Labels come from the process title that vLLM sets with setproctitle (``VLLM::Worker_TP3_DCP3``,
``VLLM::EngineCore``, ``VLLM::EngineCore_DP0``, ``VLLM::APIServer_0``), from our warmup ranks
(``sm120kit::warmup_DCP{r}``) and from the command line (``vllm serve`` → ``api-server``).

Nothing here sends signals: :func:`sm120kit.services.proctree.stop_tree` does, and only to
processes recorded as started by us (a :class:`Proc` with a matching ``create_time``, so a
recycled pid is never hit).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

import psutil

_TITLE_RX = re.compile(
    r"^(?:(?P<vllm>VLLM::(?P<vname>(?:Worker|EngineCore|APIServer|ApiServer|DPCoordinator)"
    r"[\w]*))|(?P<kit>sm120kit::(?P<kname>warmup_DCP\d+|[\w]+)))"
)
_RANK_RX = re.compile(r"(?:TP|DCP)(\d+)")


@dataclass
class Proc:
    pid: int
    label: str
    role: str  # worker | engine-core | api-server | warmup-rank | python | other
    create_time: float
    ppid: int | None = None
    cmdline: list[str] = field(default_factory=list)
    status: str | None = None
    is_python: bool = False
    rank: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "label": self.label,
            "role": self.role,
            "ppid": self.ppid,
            "status": self.status,
            "create_time": self.create_time,
            "is_python": self.is_python,
            "rank": self.rank,
            "cmdline": self.cmdline,
        }


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        cmd = p.cmdline()
    except (psutil.Error, OSError):
        return []
    # setproctitle pads the argv area: drop the empty tail
    while cmd and cmd[-1] == "":
        cmd.pop()
    return cmd


def environ(pid: int, max_up: int = 4) -> tuple[dict[str, str], int | None]:
    """The environment of ``pid``; when it reads empty (setproctitle reuses the environ area, so
    ``/proc/<pid>/environ`` of a titled vLLM worker is blank), the nearest ancestor's, which the
    process inherited. Returns (env, pid it was read from)."""
    try:
        p: psutil.Process | None = psutil.Process(pid)
    except (psutil.Error, OSError):
        return {}, None
    for _ in range(max_up + 1):
        if p is None or p.pid in (0, 1):
            break
        try:
            env = p.environ()
        except (psutil.Error, OSError):
            env = {}
        if env:
            return env, p.pid
        try:
            p = p.parent()
        except (psutil.Error, OSError):
            break
    return {}, None


def title_of(cmd: list[str]) -> str:
    """The setproctitle title (it replaces argv, so it shows as the joined cmdline)."""
    return " ".join(cmd).strip()


def classify(cmd: list[str], name: str = "") -> tuple[str | None, str]:
    """(label, role) from a command line / title; label None when not recognised."""
    title = title_of(cmd)
    m = _TITLE_RX.match(title)
    if m:
        if m.group("vllm"):
            vname = m.group("vname")
            if vname.startswith("Worker"):
                return vname, "worker"
            if vname.startswith("EngineCore"):
                return vname, "engine-core"
            if vname.startswith(("APIServer", "ApiServer")):
                return vname, "api-server"
            return vname, "other"
        return m.group("kname"), "warmup-rank" if m.group("kname").startswith("warmup") else "other"
    joined = " " + title + " "
    if re.search(r"[/ ]vllm serve |vllm\.entrypoints\.(?:openai\.)?api_server|[/ ]vllm serve$", joined):
        return "api-server", "api-server"
    if "multiprocessing.resource_tracker" in title:
        return "mp-resource-tracker", "other"
    return None, "python" if _looks_python(cmd, name) else "other"


def _looks_python(cmd: list[str], name: str) -> bool:
    exe = os.path.basename(cmd[0]) if cmd else name
    return bool(re.match(r"python\d*(?:\.\d+)?$", exe)) or bool(re.match(r"python", name))


def describe(p: psutil.Process, label: str | None = None) -> Proc | None:
    try:
        with p.oneshot():
            cmd = _cmdline(p)
            name = p.name()
            ct = p.create_time()
            ppid = p.ppid()
            status = p.status()
    except (psutil.Error, OSError):
        return None
    auto, role = classify(cmd, name)
    is_py = role in ("worker", "engine-core", "api-server", "warmup-rank") or _looks_python(cmd, name)
    if not is_py and cmd:
        try:
            is_py = "python" in os.path.basename(p.exe())
        except (psutil.Error, OSError):
            pass
    lab = label or auto or (os.path.basename(cmd[0]) if cmd else name) or str(p.pid)
    rank = None
    m = _RANK_RX.search(lab)
    if m:
        rank = int(m.group(1))
    return Proc(
        pid=p.pid,
        label=lab,
        role=role if role != "python" or not is_py else "python",
        create_time=ct,
        ppid=ppid,
        cmdline=cmd,
        status=status,
        is_python=is_py,
        rank=rank,
    )


def tree(root_pid: int, include_root: bool = True) -> list[Proc]:
    """The process and all its descendants, labelled."""
    try:
        root = psutil.Process(root_pid)
        kids = root.children(recursive=True)
    except (psutil.Error, OSError):
        return []
    out: list[Proc] = []
    for p in ([root] if include_root else []) + kids:
        d = describe(p)
        if d is not None:
            out.append(d)
    return out


def is_vllm_like(cmd: list[str]) -> bool:
    label, role = classify(cmd)
    return label is not None and role in ("worker", "engine-core", "api-server", "warmup-rank")


def discover(pid: int | None = None) -> list[Proc]:
    """A running vLLM's process tree.

    With ``pid``: climb from it to the topmost ancestor that still looks like vLLM (so a worker
    pid finds its engine core and API server), then take that ancestor's whole tree. Without:
    every process whose title or command line is a vLLM/warmup one, plus their descendants.
    """
    me = os.getpid()
    if pid is not None:
        try:
            p = psutil.Process(pid)
        except psutil.NoSuchProcess:
            return []
        top = p
        while True:
            try:
                parent = top.parent()
            except (psutil.Error, OSError):
                break
            if parent is None or parent.pid in (0, 1, me) or not is_vllm_like(_cmdline(parent)):
                break
            top = parent
        return tree(top.pid)
    found: dict[int, Proc] = {}
    for p in psutil.process_iter():
        if p.pid == me:
            continue
        cmd = _cmdline(p)
        if not cmd or not is_vllm_like(cmd):
            continue
        if p.pid in found:
            continue
        for d in tree(p.pid):
            found.setdefault(d.pid, d)
    return sorted(found.values(), key=lambda d: d.create_time)


def alive(proc: Proc) -> bool:
    """The recorded process still exists (same pid *and* start time) and is not a zombie."""
    try:
        p = psutil.Process(proc.pid)
        if abs(p.create_time() - proc.create_time) > 0.05:
            return False
        return p.status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, OSError):
        return False
