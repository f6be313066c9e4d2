"""A client for NCCL's RAS (reliability, availability, serviceability) text socket.

NCCL >= 2.24 runs a RAS listener in every process (``NCCL_RAS_ENABLE=1`` by default) on
``NCCL_RAS_ADDR`` (default ``localhost:28028``). The protocol is line based: the client may send
``CLIENT PROTOCOL 2`` (answer ``SERVER PROTOCOL 2``), ``TIMEOUT <s>`` (``OK``), ``SET FORMAT json``
(``OK``, NCCL >= 2.28.7), then ``STATUS`` or ``VERBOSE STATUS``; the server writes the report and
closes the connection. No ``ncclras`` binary is needed.

Every call is bounded by a socket timeout and an overall deadline.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

DEFAULT_ADDR = "localhost:28028"


def parse_addr(addr: str | None) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or ``host`` (port 28028)."""
    addr = (addr or DEFAULT_ADDR).strip()
    if addr.startswith("["):
        host, _, rest = addr[1:].partition("]")
        port = rest.lstrip(":")
        return host, int(port) if port else 28028
    if addr.count(":") == 1:
        host, port = addr.split(":")
        return host or "localhost", int(port)
    return addr, 28028


@dataclass
class RasReply:
    ok: bool
    text: str
    error: str | None = None
    seconds: float = 0.0
    listening: bool = True


def _readline(sock: socket.socket, buf: bytearray, deadline: float) -> str:
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("RAS server did not answer in time")
        sock.settimeout(min(left, 2.0))
        chunk = sock.recv(4096)
        if not chunk:
            break
        buf.extend(chunk)
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line.decode("utf-8", "replace").strip()


def query(
    addr: str | None = None,
    *,
    verbose: bool = True,
    fmt: str | None = None,
    timeout: float = 10.0,
    server_timeout: int = 5,
    max_bytes: int = 8 * 1024 * 1024,
) -> RasReply:
    """One RAS report. ``fmt='json'`` asks for JSON (older NCCL answers an error: ``ok=False``)."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    host, port = parse_addr(addr)
    try:
        sock = socket.create_connection((host, port), timeout=min(2.0, timeout))
    except ConnectionRefusedError:
        return RasReply(False, "", f"nothing listening on {host}:{port}", listening=False,
                        seconds=time.monotonic() - t0)
    except OSError as exc:
        return RasReply(False, "", f"cannot connect to {host}:{port}: {exc}", listening=False,
                        seconds=time.monotonic() - t0)
    buf = bytearray()
    try:
        with sock:
            sock.sendall(b"CLIENT PROTOCOL 2\n")
            hello = _readline(sock, buf, deadline)
            if not hello.startswith("SERVER PROTOCOL"):
                return RasReply(False, hello, f"unexpected RAS greeting: {hello[:120]!r}",
                                seconds=time.monotonic() - t0)
            sock.sendall(f"TIMEOUT {int(server_timeout)}\n".encode())
            ans = _readline(sock, buf, deadline)
            if ans != "OK":
                return RasReply(False, ans, f"TIMEOUT refused: {ans[:120]!r}",
                                seconds=time.monotonic() - t0)
            if fmt:
                sock.sendall(f"SET FORMAT {fmt}\n".encode())
                ans = _readline(sock, buf, deadline)
                if ans != "OK":
                    return RasReply(False, ans, f"SET FORMAT {fmt} not supported: {ans[:120]!r}",
                                    seconds=time.monotonic() - t0)
            sock.sendall(b"VERBOSE STATUS\n" if verbose else b"STATUS\n")
            out = bytearray(buf)
            while len(out) < max_bytes:
                left = deadline - time.monotonic()
                if left <= 0:
                    return RasReply(False, out.decode("utf-8", "replace"),
                                    "RAS report incomplete: deadline hit (a silent RAS during a "
                                    "stall is itself a signal)", seconds=time.monotonic() - t0)
                sock.settimeout(min(left, 2.0))
                try:
                    chunk = sock.recv(65536)
                except TimeoutError:
                    continue
                if not chunk:
                    break
                out.extend(chunk)
            return RasReply(True, out.decode("utf-8", "replace"), seconds=time.monotonic() - t0)
    except (OSError, TimeoutError) as exc:
        return RasReply(False, "", f"RAS query failed: {exc}", seconds=time.monotonic() - t0)
