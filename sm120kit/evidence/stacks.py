"""Live Python stacks of other processes: py-spy (``dump --json``, ``--native`` when it works),
ptrace-rights diagnosis, a faulthandler fallback, and the busy/blocked comparison of two samples.

Every py-spy run is a bounded subprocess (``timeout``); py-spy pauses the target only while it
reads (~10-60 ms plain, up to ~0.5 s with ``--native``).

Fallback when ptrace is refused: processes *we launched* get a ``sitecustomize`` (see
:func:`faulthandler_site_dir`) that registers ``faulthandler`` for ``SIGUSR1`` into a per-pid file
and drops a ``<pid>.ready`` marker. Only such processes (marker present, pid and start time ours)
are ever sent ``SIGUSR1``; attached processes are never signalled.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CAP_SYS_PTRACE = 19
_PERM_RX = re.compile(
    r"Permission denied|Operation not permitted|os error 13|os error 1\b|SYS_PTRACE|elevated permissions",
    re.IGNORECASE,
)
_GONE_RX = re.compile(r"No such file or directory|No such process|os error 2\b|os error 3\b")
_NOTPY_RX = re.compile(r"Failed to find python version|Failed to get python version|not a python")
COLLECTIVE_FUNCS = frozenset(
    {
        "all_reduce", "all_gather", "all_gather_into_tensor", "_all_gather_base", "reduce_scatter",
        "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all", "all_to_all_single",
        "broadcast", "broadcast_object_list", "broadcast_object", "barrier", "monitored_barrier",
        "gather", "scatter", "reduce", "send", "recv", "isend", "irecv", "batch_isend_irecv",
        "all_gather_object", "gather_object", "scatter_object_list", "wait",
    }
)
#: Python-level waits (in torch / CUDA / vLLM's shared-memory broadcast queue)
SYNC_FUNCS = frozenset({"synchronize", "item", "cpu", "tolist", "wait_event", "dequeue", "enqueue",
                        "acquire_read", "acquire_write"})
#: native waits a ``--native`` sample shows under the Python frames
NATIVE_SYNC_FUNCS = frozenset({"cuEventSynchronize", "cudaStreamSynchronize",
                               "cudaDeviceSynchronize", "cuCtxSynchronize_v2", "pthread_cond_wait"})
_COMM_FILES = ("distributed", "c10d", "parallel_state", "communicator", "pynccl")
_SYNC_FILES = ("cuda", "shm_broadcast", "torch")


def py_spy_path() -> str | None:
    """py-spy next to this interpreter (venv) or on PATH."""
    cand = Path(sys.executable).with_name("py-spy")
    if cand.exists():
        return str(cand)
    return shutil.which("py-spy")


# --- ptrace rights ---------------------------------------------------------------------------
def ptrace_facts() -> dict[str, Any]:
    """Capabilities and Yama scope of this process: what py-spy will be allowed to do."""
    facts: dict[str, Any] = {"uid": os.geteuid()}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                eff = int(line.split()[1], 16)
                facts["cap_eff"] = hex(eff)
                facts["cap_sys_ptrace"] = bool(eff & (1 << CAP_SYS_PTRACE))
    except (OSError, ValueError):
        facts["cap_sys_ptrace"] = None
    try:
        facts["yama_ptrace_scope"] = int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        facts["yama_ptrace_scope"] = None  # no Yama
    facts["in_container"] = Path("/.dockerenv").exists() or _cgroup_container()
    return facts


def _cgroup_container() -> bool:
    try:
        txt = Path("/proc/1/cgroup").read_text()
    except OSError:
        return False
    return any(w in txt for w in ("docker", "kubepods", "containerd", "lxc"))


def ptrace_advice(facts: dict[str, Any] | None = None) -> str:
    """Exactly what to add so py-spy may read other processes."""
    f = facts or ptrace_facts()
    tips: list[str] = []
    if f.get("cap_sys_ptrace") is False:
        tips.append(
            "this process lacks CAP_SYS_PTRACE: start the container with `--cap-add SYS_PTRACE` "
            "(docker/podman; Kubernetes: securityContext.capabilities.add: [SYS_PTRACE])"
        )
    scope = f.get("yama_ptrace_scope")
    if scope is not None and scope >= 1:
        tips.append(
            f"kernel.yama.ptrace_scope={scope}: run `sudo sysctl -w kernel.yama.ptrace_scope=0` "
            "(or run collect as root / as the target's parent)"
        )
    if f.get("uid") != 0:
        tips.append("run collect as the same user as vLLM, or with sudo")
    tips.append(
        "seccomp can also block ptrace/process_vm_readv: `--security-opt seccomp=unconfined` "
        "if the above is already set"
    )
    return "; ".join(tips)


# --- py-spy ----------------------------------------------------------------------------------
@dataclass
class Sample:
    pid: int
    ok: bool
    method: str  # py-spy | py-spy-native | faulthandler
    threads: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    error_kind: str | None = None  # permission | gone | not-python | timeout | missing | other
    seconds: float = 0.0
    native_error: str | None = None
    cpu_times: float | None = None
    t: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "ok": self.ok,
            "method": self.method,
            "error": self.error,
            "error_kind": self.error_kind,
            "native_error": self.native_error,
            "seconds": round(self.seconds, 4),
            "cpu_times": self.cpu_times,
            "threads": self.threads,
        }


def classify_error(text: str) -> str:
    if _PERM_RX.search(text):
        return "permission"
    if _GONE_RX.search(text):
        return "gone"
    if _NOTPY_RX.search(text):
        return "not-python"
    return "other"


def _first_error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    keep = [ln for ln in lines if not re.match(r"^\d+: |^Stack backtrace:", ln)]
    return " | ".join(keep[:3])[:400] if keep else (lines[0][:400] if lines else "no output")


def _cpu_seconds(pid: int) -> float | None:
    try:
        import psutil

        ct = psutil.Process(pid).cpu_times()
        return float(ct.user + ct.system)
    except Exception:
        return None


def py_spy_dump(
    pid: int, *, native: bool = True, timeout: float = 10.0, exe: str | None = None,
    retry_plain: bool = True,
) -> Sample:
    """One ``py-spy dump --json`` of ``pid`` (``--native`` first; retried without on failure
    unless ``retry_plain=False``)."""
    exe = exe or py_spy_path()
    t0 = time.monotonic()
    if exe is None:
        return Sample(pid, False, "py-spy", error="py-spy is not installed (pip install py-spy)",
                      error_kind="missing")
    cpu = _cpu_seconds(pid)
    native_error = None
    attempts = ([True, False] if retry_plain else [True]) if native else [False]
    last_err = ""
    kind = "other"
    for use_native in attempts:
        cmd = [exe, "dump", "--pid", str(pid), "--json"] + (["--native"] if use_native else [])
        left = timeout - (time.monotonic() - t0)
        if left <= 0.2:
            break
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=left, check=False,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            last_err, kind = f"py-spy timed out after {left:.1f}s", "timeout"
            if use_native:
                native_error = last_err
                continue
            break
        except OSError as exc:
            return Sample(pid, False, "py-spy", error=str(exc), error_kind="missing",
                          seconds=time.monotonic() - t0)
        if r.returncode == 0:
            try:
                threads = json.loads(r.stdout)
            except ValueError as exc:
                last_err, kind = f"unparseable py-spy output: {exc}", "other"
                continue
            return Sample(
                pid, True, "py-spy-native" if use_native else "py-spy", threads=threads,
                seconds=time.monotonic() - t0, native_error=native_error, cpu_times=cpu,
                t=time.time(),
            )
        err = (r.stderr or r.stdout or "").strip()
        kind = classify_error(err)
        last_err = _first_error_line(err)
        if kind == "gone":  # py-spy's "Error: No such process (os error 3)": say what it means
            last_err = f"process {pid} exited before its stack could be read"
        if kind in ("permission", "gone", "not-python"):
            break  # no point retrying without --native
        if use_native:
            native_error = last_err
    return Sample(pid, False, "py-spy", error=last_err, error_kind=kind,
                  seconds=time.monotonic() - t0, native_error=native_error)


# --- faulthandler fallback -------------------------------------------------------------------
_SITECUSTOMIZE = '''\
# Written by sm120kit collect: lets `collect` get Python stacks without ptrace.
# Registers faulthandler for SIGUSR1 (only when SIGUSR1 still has its default action) writing
# all threads' stacks to $SM120KIT_FAULTHANDLER_DIR/<pid>.txt, then runs any other
# sitecustomize found later on sys.path.
import os as _os
import sys as _sys


def _sm120kit_register():
    d = _os.environ.get("SM120KIT_FAULTHANDLER_DIR")
    if not d:
        return
    try:
        import faulthandler
        import signal

        if signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, None):
            return
        pid = _os.getpid()
        f = open(_os.path.join(d, "%d.txt" % pid), "a", buffering=1)
        faulthandler.register(signal.SIGUSR1, file=f, all_threads=True, chain=False)
        _sys.modules[__name__].__dict__["_sm120kit_fh_file"] = f
        with open(_os.path.join(d, "%d.ready" % pid), "w") as m:
            m.write(str(pid))
    except Exception:
        pass


def _sm120kit_chain():
    import importlib.machinery
    import importlib.util

    here = _os.path.dirname(_os.path.abspath(__file__))
    rest = [p for p in _sys.path if p and _os.path.abspath(p) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    if spec.origin and _os.path.dirname(_os.path.abspath(spec.origin)) == here:
        return
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)


_sm120kit_register()
try:
    _sm120kit_chain()
except Exception:
    pass
'''


def faulthandler_site_dir(work: Path) -> Path:
    """A directory holding our ``sitecustomize.py``; prepend it to the child's PYTHONPATH."""
    d = work / "site"
    d.mkdir(parents=True, exist_ok=True)
    (d / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    return d


_FH_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):")
_FH_FRAME = re.compile(r'^\s+File "(?P<file>[^"]*)", line (?P<line>\d+) in (?P<name>.*)$')


def parse_faulthandler(text: str) -> list[dict[str, Any]]:
    """faulthandler all-threads text → py-spy-like thread dicts (innermost frame first)."""
    threads: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    for line in text.splitlines():
        m = _FH_THREAD.match(line)
        if m:
            cur = {
                "thread_id": int(m.group(2), 16),
                "thread_name": None,
                "os_thread_id": None,
                "active": m.group(1) == "Current thread",
                "owns_gil": m.group(1) == "Current thread",
                "frames": [],
                "source": "faulthandler",
            }
            threads.append(cur)
            continue
        f = _FH_FRAME.match(line)
        if f and cur is not None:
            fn = f.group("file")
            cur["frames"].append(
                {"name": f.group("name"), "filename": fn, "short_filename": os.path.basename(fn),
                 "line": int(f.group("line"))}
            )
    return threads


def faulthandler_dump(pid: int, fh_dir: Path, *, timeout: float = 3.0) -> Sample:
    """SIGUSR1 → read the new part of ``<fh_dir>/<pid>.txt``. Only call for our own children
    whose ``<pid>.ready`` marker exists (the caller checks the pid belongs to our tree)."""
    t0 = time.monotonic()
    marker = fh_dir / f"{pid}.ready"
    out = fh_dir / f"{pid}.txt"
    if not marker.exists():
        return Sample(pid, False, "faulthandler", error="process did not register the faulthandler"
                      " hook (not a Python child of ours, or SIGUSR1 was already taken)",
                      error_kind="other")
    try:
        start = out.stat().st_size
    except OSError:
        start = 0
    cpu = _cpu_seconds(pid)
    try:
        os.kill(pid, signal.SIGUSR1)
    except ProcessLookupError:
        return Sample(pid, False, "faulthandler", error="process is gone", error_kind="gone")
    text = ""
    last_size = -1
    while time.monotonic() - t0 < timeout:
        time.sleep(0.05)
        try:
            size = out.stat().st_size
        except OSError:
            continue
        if size > start and size == last_size:
            break
        last_size = size
    try:
        with open(out, "rb") as f:
            f.seek(start)
            text = f.read().decode("utf-8", "replace")
    except OSError as exc:
        return Sample(pid, False, "faulthandler", error=str(exc), error_kind="other")
    threads = parse_faulthandler(text)
    if not threads:
        return Sample(pid, False, "faulthandler", error="no faulthandler output within "
                      f"{timeout:.1f}s", error_kind="timeout", seconds=time.monotonic() - t0)
    return Sample(pid, True, "faulthandler", threads=threads, seconds=time.monotonic() - t0,
                  cpu_times=cpu, t=time.time())


# --- rendering and analysis ------------------------------------------------------------------
def render_text(sample: Sample, label: str = "") -> str:
    """py-spy-like text of a sample (innermost frame first)."""
    head = f"Process {sample.pid}" + (f" [{label}]" if label else "") + f" via {sample.method}"
    lines = [head]
    if not sample.ok:
        lines.append(f"  no stack: {sample.error}")
        return "\n".join(lines) + "\n"
    for th in sample.threads:
        state = "active" if th.get("active") else "idle"
        if th.get("owns_gil"):
            state += ", gil"
        name = th.get("thread_name")
        tid = th.get("os_thread_id") or th.get("thread_id")
        lines.append("")
        lines.append(f"Thread {tid} ({state})" + (f': "{name}"' if name else ""))
        for fr in th.get("frames", []):
            fn = fr.get("short_filename") or fr.get("filename") or "?"
            ln = fr.get("line")
            lines.append(f"    {fr.get('name')} ({fn}" + (f":{ln})" if ln else ")"))
    return "\n".join(lines) + "\n"


def _py_frames(th: dict[str, Any]) -> list[dict[str, Any]]:
    """Python frames only (native frames have no line or a .so file)."""
    return [fr for fr in th.get("frames", []) if _is_python(fr)]


def native_summary(sample: Sample, depth: int = 8) -> list[str]:
    """The innermost frames of the main thread of a ``--native`` sample (C and Python)."""
    th = main_thread(sample)
    if th is None:
        return []
    out = []
    for f in th.get("frames", [])[:depth]:
        lib = f.get("short_filename") or f.get("filename") or ""
        out.append(f"{f.get('name')} ({lib}" + (f":{f.get('line')})" if f.get("line") else ")"))
    return out


def main_thread(sample: Sample) -> dict[str, Any] | None:
    if not sample.threads:
        return None
    for th in sample.threads:
        if th.get("os_thread_id") == sample.pid:
            return th
    for th in sample.threads:
        if th.get("thread_name") in ("MainThread", None) and th.get("source") != "faulthandler":
            return th
    # faulthandler: the main thread is the last one listed
    return sample.threads[-1]


def signature(sample: Sample, depth: int = 6) -> tuple[tuple[str, str, int], ...]:
    th = main_thread(sample)
    if th is None:
        return ()
    frames = _py_frames(th)[:depth]
    return tuple((f.get("name", ""), f.get("short_filename") or f.get("filename", ""),
                  int(f.get("line") or 0)) for f in frames)


def _is_python(fr: dict[str, Any]) -> bool:
    """A Python frame (native frames have no line or a .so file)."""
    fn = str(fr.get("filename") or "")
    return bool(fr.get("line")) and not re.search(r"\.so(?:\.[\d.]+)?$", fn)


def _frame_at(fr: dict[str, Any]) -> str:
    return f"{fr.get('short_filename') or fr.get('filename')}:{fr.get('line')}"


def blocking_call(frames: list[dict[str, Any]]) -> dict[str, Any]:
    """THE stack classifier: the collective or sync call a thread waits in, from its frames
    (innermost first, py-spy's frame dicts). ``{"collective": name, "collective_frame": at}``,
    ``{"sync": name}`` or ``{}``.

    Python frames first: the public ``torch.distributed`` API frame of a run of
    ``distributed_c10d.py`` frames (the blocked ``work.wait()`` sits inside it; private helpers
    start with ``_``), a known collective in a communication module, or a Python-level wait in
    torch / CUDA / vLLM's shared-memory queue. Without one, a native wait of a ``--native``
    sample (``cudaStreamSynchronize``, ``pthread_cond_wait``, ...)."""
    py = [f for f in frames if _is_python(f)]
    for i, f in enumerate(py):
        fn = str(f.get("filename") or "")
        name = str(f.get("name") or "")
        if fn.endswith("distributed_c10d.py"):
            run = [f]
            for g in py[i + 1:]:
                if not str(g.get("filename") or "").endswith("distributed_c10d.py"):
                    break
                run.append(g)
            pub = [g for g in run if not str(g.get("name") or "").startswith("_")]
            f = pub[-1] if pub else run[-1]
            return {"collective": f.get("name"), "collective_frame": _frame_at(f)}
        if name in COLLECTIVE_FUNCS and any(w in fn for w in _COMM_FILES):
            return {"collective": name, "collective_frame": _frame_at(f)}
        if name in SYNC_FUNCS and any(w in fn for w in _SYNC_FILES):
            return {"sync": name}
    for f in frames:
        if not _is_python(f) and str(f.get("name") or "") in NATIVE_SYNC_FUNCS:
            return {"sync": str(f.get("name"))}
    return {}


def where(sample: Sample) -> dict[str, Any]:
    """Top Python frame, the collective/sync call it sits in (if any), native innermost frame."""
    th = main_thread(sample)
    if th is None:
        return {}
    py = _py_frames(th)
    info: dict[str, Any] = {}
    if py:
        f = py[0]
        info["top"] = f"{f.get('name')} ({f.get('short_filename') or f.get('filename')}:{f.get('line')})"
    info.update(blocking_call(th.get("frames", [])))
    # first frame outside torch/stdlib: the caller in user/vLLM code
    for f in py:
        fn = f.get("filename") or ""
        stdlib = "/lib/python3" in fn and "-packages/" not in fn
        if "/torch/" not in fn and not stdlib:
            info["caller"] = f"{f.get('name')} ({f.get('short_filename') or fn}:{f.get('line')})"
            break
    frames = th.get("frames", [])
    if frames and not frames[0].get("line"):
        info["native_top"] = frames[0].get("name")
    info["active"] = bool(th.get("active"))
    return info


def compare(s1: Sample, s2: Sample | None) -> dict[str, Any]:
    """Busy or blocked, from two samples a few seconds apart.

    * ``blocked``: same main-thread frames both times and (almost) no CPU used in between;
    * ``spinning``: same frames but the CPU was busy (a busy-wait, e.g. a CUDA sync spin);
    * ``progressing``: the frames changed;
    * ``unknown``: a sample is missing.
    """
    out: dict[str, Any] = {"pid": s1.pid, **where(s1)}
    if not s1.ok:
        out["state"] = "unknown"
        out["error"] = s1.error
        return out
    if s2 is None or not s2.ok:
        out["state"] = "unknown"
        return out
    same = signature(s1) == signature(s2) and bool(signature(s1))
    cpu = None
    if s1.cpu_times is not None and s2.cpu_times is not None and s2.t > s1.t:
        cpu = max(0.0, (s2.cpu_times - s1.cpu_times) / (s2.t - s1.t))
        out["cpu_fraction"] = round(cpu, 3)
    if same:
        out["state"] = "spinning" if (cpu is not None and cpu > 0.5) else "blocked"
    else:
        out["state"] = "progressing"
    return out
