"""Is ``HOST:PORT`` a Ray GCS?  Answered within a deadline, before ``ray.init`` is ever called.

``ray.init(address=...)`` has no time limit of its own: against a TCP listener that never speaks
it blocks for minutes, against a dashboard (HTTP) port or another gRPC server (the node agent's)
it retries for tens of seconds to minutes while Ray's C++ core prints warnings. So ``collect
--ray`` asks the address one question first: the GCS's ``NodeInfoGcsService/GetClusterId`` RPC
(an empty request; every GCS since Ray 2.7 answers it), over plain gRPC with a call deadline.

* a reply → a GCS (the reply bytes are not interpreted);
* ``UNIMPLEMENTED`` → a gRPC server that is not a GCS (e.g. a raylet or the dashboard agent);
* no answer by the deadline, or a peer that does not speak HTTP/2 (a silent listener, an HTTP/1
  dashboard port) → not a GCS; silence is told first, in this process: no byte within
  :data:`SILENT_AFTER_S` of an HTTP/2 preface (a gRPC server answers with its SETTINGS frame at
  once), so it costs no child start;
* too little of ``--deadline`` left to ask (the child not started, or the question out for less
  than :data:`MIN_SILENCE_S`) → ``late``: collect's own limit, never called a silent peer.

The probe runs in a child process (``python -m sm120kit.collect.ray_probe HOST:PORT SECONDS``)
killed at the deadline, so neither a stuck gRPC channel nor gRPC's own log lines reach the
collecting process; with ``--debug`` the child's stderr is passed through. Nothing here imports
``ray``: only ``grpc`` (a dependency of Ray), and only in the child.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from sm120kit.errors import UserError

GCS_METHOD = "/ray.rpc.NodeInfoGcsService/GetClusterId"
ADDRESS_HINT = ("pass the head's GCS address (`ray status` on the head shows it; the GCS port is "
                "6379 by default, not the dashboard's 8265), e.g. sm120kit collect --ray HEAD_IP:6379")

PROBE_CAP_S = 8.0
#: a live GCS answers in milliseconds: a question out this long without an answer is silence;
#: a shorter wait cut by ``--deadline`` proves nothing about the peer
MIN_SILENCE_S = 1.0


class NotInTime(UserError):
    """Our ``--deadline`` ran out before a step could finish: our limit, not the system's."""
#: environment that keeps Ray's and gRPC's C++ cores quiet (set unless --debug)
QUIET_ENV = {"RAY_BACKEND_LOG_LEVEL": "fatal", "GRPC_VERBOSITY": "NONE", "GLOG_minloglevel": "3",
             "RAY_LOG_TO_STDERR": "0"}


@dataclass
class ProbeResult:
    ok: bool
    kind: str  # gcs | refused | silent | not-grpc | not-gcs | error | late
    detail: str
    seconds: float


def split_address(address: str) -> tuple[str, int] | None:
    """``HOST:PORT`` (``[v6]:PORT`` too) → (host, port); ``None`` for anything else
    (``ray://``, ``auto``, a bare host)."""
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _grpc_ask(target: str, timeout: float) -> tuple[str, str]:
    """In the child: one GCS RPC; (kind, detail)."""
    import grpc

    ident = lambda b: b  # noqa: E731  (raw bytes both ways: no Ray protobufs needed)
    with grpc.insecure_channel(target, options=[("grpc.enable_retries", 0)]) as ch:
        call = ch.unary_unary(GCS_METHOD, request_serializer=ident, response_deserializer=ident)
        try:
            call(b"", timeout=timeout, wait_for_ready=False)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            text = (exc.details() if hasattr(exc, "details") else "") or ""
            if code == grpc.StatusCode.UNIMPLEMENTED:
                return "not-gcs", "a gRPC server that does not serve the Ray GCS API"
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return "silent", f"no gRPC answer within {timeout:.0f}s"
            return "not-grpc", f"{code.name if code else 'error'}: {text[:160]}"
    return "gcs", "answered the GCS GetClusterId call"


def _main(argv: list[str]) -> int:
    target, timeout = argv[0], float(argv[1])
    try:
        import grpc  # noqa: F401  (started: the parent times the question from here)

        sys.stdout.write("asking\n")
        sys.stdout.flush()
        kind, detail = _grpc_ask(target, timeout)
    except ImportError as exc:
        kind, detail = "error", f"grpc is not importable: {exc}"
    sys.stdout.write(f"{kind}\t{detail}\n")
    return 0


#: HTTP/2's client connection preface and an empty SETTINGS frame (RFC 9113 §3.4): a gRPC server
#: answers with its own SETTINGS frame at once; an HTTP/1 server answers with an error page
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
#: how long a peer may stay silent after the preface before it is called silent
SILENT_AFTER_S = 2.0


def speaks(host: str, port: int, wait: float) -> bool:
    """Whether the peer sends any byte within ``wait`` s of our HTTP/2 preface (in-process: no
    child to start, so a silent listener is told in ``wait`` s whatever the box's load)."""
    try:
        with socket.create_connection((host, port), timeout=wait) as s:
            s.settimeout(wait)
            s.sendall(H2_PREFACE)
            return bool(s.recv(1))
    except TimeoutError:
        return False
    except OSError:
        return True  # reset / closed: not silent (the child's question says what it is)


def _tcp(host: str, port: int, timeout: float) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return str(exc.strerror or exc)


def probe(address: str, deadline_s: float, *, debug: bool = False) -> ProbeResult:
    """Ask ``address`` whether it is a Ray GCS, all within ``deadline_s`` seconds."""
    t0 = time.monotonic()
    hp = split_address(address)
    if hp is None:
        return ProbeResult(True, "gcs", "not a HOST:PORT address: left to Ray", 0.0)
    host, port = hp
    err = _tcp(host, port, min(5.0, deadline_s))
    if err is not None:
        return ProbeResult(False, "refused", err, round(time.monotonic() - t0, 3))
    # checking the address is checking the input: a silent peer is refused even when the
    # deadline is (nearly) spent, at the cost of at most MIN_SILENCE_S (a GCS answers at once)
    wait = max(MIN_SILENCE_S, min(SILENT_AFTER_S, deadline_s - (time.monotonic() - t0)))
    if not speaks(host, port, wait):
        return ProbeResult(False, "silent", f"no byte within {wait:.0f}s of an HTTP/2 preface "
                           "(a Ray GCS answers in milliseconds)", round(time.monotonic() - t0, 3))
    # a live GCS answers in milliseconds: a silent peer is refused in seconds, not at --deadline
    left = min(PROBE_CAP_S, max(0.5, deadline_s - (time.monotonic() - t0)))
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    kind, detail = _ask_in_child(target, left, debug)
    return ProbeResult(kind == "gcs", kind, detail, round(time.monotonic() - t0, 3))


def _ask_in_child(target: str, left: float, debug: bool) -> tuple[str, str]:
    """Run the question in a child killed at ``left`` s; ``late`` when it was out too briefly
    (or never asked) to call the peer silent."""
    env = dict(os.environ) if debug else {**os.environ, **QUIET_ENV}
    end = time.monotonic() + left
    cmd = [sys.executable, "-m", "sm120kit.collect.ray_probe", target, f"{max(0.5, left - 0.5):.2f}"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=None if debug else subprocess.DEVNULL,
                         text=True, env=env)
    lines: list[str] = []
    asked: list[float] = []

    def read() -> None:
        assert p.stdout is not None
        for ln in p.stdout:
            if ln.strip() == "asking":
                asked.append(time.monotonic())
            elif ln.strip():
                lines.append(ln.strip())

    th = threading.Thread(target=read, daemon=True)
    th.start()
    th.join(max(0.0, end - time.monotonic()))
    if th.is_alive():
        p.kill()
    p.wait()
    th.join(1.0)
    if lines:
        kind, _, detail = lines[0].partition("\t")
        if kind != "silent" or not asked or time.monotonic() - asked[0] >= MIN_SILENCE_S:
            return kind, detail
    if not asked:
        return "late", f"the question could not be asked within the {left:.1f}s left"
    out = time.monotonic() - asked[0]
    if out < MIN_SILENCE_S:
        return "late", f"the question was out only {out:.1f}s when the deadline came"
    return "silent", f"no answer within {out:.0f}s"


def require_gcs(address: str, deadline_s: float, *, debug: bool = False,
                named_s: float | None = None) -> ProbeResult:
    """:func:`probe`, raising one :class:`UserError` (exit 2) when the answer is not a GCS."""
    res = probe(address, deadline_s, debug=debug)
    if res.ok:
        return res
    if res.kind == "refused":
        raise UserError(f"cannot reach the Ray GCS at {address}: {res.detail}", hint=ADDRESS_HINT)
    if res.kind == "late":
        raise NotInTime(f"not collected in time: too little of --deadline {named_s or deadline_s:g}s "
                        f"was left ({deadline_s:.1f}s) to ask {address} whether it is a Ray GCS "
                        f"({res.detail})",
                        hint="raise --deadline (a few seconds more than the cluster needs)")
    raise UserError(f"{address} is not a Ray GCS ({res.kind}: {res.detail}; "
                    f"checked in {res.seconds:.1f}s)", hint=ADDRESS_HINT)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
