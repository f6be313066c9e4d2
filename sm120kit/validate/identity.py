"""Refuse to compare a server with itself, and options vLLM would reject, before any prompt.

Two URLs name the same server when they normalize to the same address, or when one process
answers behind both (e.g. ``localhost`` and ``127.0.0.1``). A shared Prometheus
``process_start_time_seconds`` only raises the question: it has a resolution of one clock tick
(10 ms), so two servers started together by one script can share it. vLLM's request counters
answer it: one greedy 1-token request is sent to the server under test, and one process is the
one whose ``vllm:request_success_total`` / ``vllm:prompt_tokens_total`` then read the same from
both addresses (a second process's counters do not move with it). Without those counters the
shared start time stands as the evidence. A ``decode_context_parallel_size`` label on a
``vllm:*_config_info`` gauge, where a build exports one (vLLM 0.34.0's ``cache_config_info`` does
not), must say DCP 1 for the reference and differ from the server under test.

Before any of that, the addresses themselves (:func:`address_identity`): both host names are
resolved (``localhost`` and ``127.0.0.1`` land on the same address) and, for addresses of this
machine, the listening socket that would take each connection is looked up (one socket bound to
``0.0.0.0:P`` serves ``127.0.0.1:P`` and the host's LAN address alike). The same listening
address is one server. Two listening addresses are not yet two servers (a proxy or a second
port can front one process), so a pass needs them proven distinct (:func:`decide`): by
different ``process_start_time_seconds`` or by request counters that do not move together. Otherwise the
result says "identity unproven" and is held at suspicious unless ``--assume-distinct``. vLLM's
model card ``created`` is not an identity: vLLM stamps it with the time of each ``/v1/models``
request (``ModelCard.created``'s default factory), so it differs between two calls to one server.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from sm120kit.errors import UserError
from sm120kit.validate.client import ServerClient

#: vLLM's default ``--max-logprobs``: more top-k than this per token is a 400 from the server
MAX_LOGPROBS = 20

_START = re.compile(r"^process_start_time_seconds(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.M)
_TRAFFIC = re.compile(r"^(vllm:(?:request_success|prompt_tokens)_total)(?:\{[^}]*\})?\s+"
                      r"([0-9.eE+-]+)\s*$", re.M)
_DCP = re.compile(r'^vllm:\w*_config_info\{[^}]*\bdecode_context_parallel_size="(\d+)"', re.M)


def process_start(metrics: str | None) -> float | None:
    m = _START.search(metrics or "")
    return float(m.group(1)) if m else None


def traffic(metrics: str | None) -> tuple[float, float] | None:
    """(finished requests, prompt tokens) summed over engines and labels; None without them."""
    sums: dict[str, float] = {}
    for name, value in _TRAFFIC.findall(metrics or ""):
        sums[name] = sums.get(name, 0.0) + float(value)
    if not sums:
        return None
    return (sums.get("vllm:request_success_total", 0.0),
            sums.get("vllm:prompt_tokens_total", 0.0))


#: how long the probe request's count may take to show in /metrics (vLLM records it on the
#: engine's output loop, right around the response)
COUNTER_WAIT_S = 5.0


def one_process(ping: Callable[[], None], server_metrics: Callable[[], str | None],
                ref_metrics: Callable[[], str | None], *,
                wait_s: float = COUNTER_WAIT_S) -> bool | None:
    """Whether one process answers behind both addresses, told by its counters: after one
    request to the server under test, its counters moved and the reference reads the same.
    None when the counters are missing or do not move within ``wait_s`` (cannot tell)."""
    before = traffic(server_metrics())
    if before is None or traffic(ref_metrics()) is None:
        return None
    ping()
    deadline = time.monotonic() + wait_s
    while True:
        now = traffic(server_metrics())
        if now is not None and now[0] > before[0]:
            # back to back: one process reads the same (an idle server), two do not
            return traffic(ref_metrics()) in (now, traffic(server_metrics()))
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)


def counters_tell(server: ServerClient, ref: ServerClient) -> Callable[[], bool | None]:
    """``one_process`` for two clients: the probe is one greedy 1-token completion."""
    def ping() -> None:
        server.complete("Hello", max_tokens=1, top_logprobs=1)
    return lambda: one_process(ping, server.metrics, ref.metrics)


def reported_dcp(metrics: str | None) -> int | None:
    m = _DCP.search(metrics or "")
    return int(m.group(1)) if m else None


def check_options(*, top_logprobs: int, max_tokens: int, answer_tokens: int, dcp: int | None,
                  interleave: int | None, block_size: int | None) -> None:
    """Values vLLM rejects or that mean nothing, as one error line each, before any request."""
    if not 1 <= top_logprobs <= MAX_LOGPROBS:
        raise UserError(f"--top-logprobs {top_logprobs} is outside 1..{MAX_LOGPROBS}",
                        hint=f"vLLM answers 400 above its --max-logprobs ({MAX_LOGPROBS} by "
                             "default); validate needs at least the top-1")
    for name, n in (("--max-tokens", max_tokens), ("answer tokens", answer_tokens)):
        if n < 1:
            raise UserError(f"{name} {n}: at least 1 token must be generated")
    sizes: tuple[tuple[str, int | None], ...] = (
        ("--dcp", dcp), ("--interleave", interleave), ("--block-size", block_size))
    for name, v in sizes:
        if v is not None and v < 1:
            raise UserError(f"{name} {v} is not a positive size",
                            hint="give the value of your launch line (DCP 1 means no DCP)")


SAME_HINT = "the reference is a DCP-1 server of the same model on another port"


def refuse_same(server_url: str, ref_url: str, server_metrics: str | None,
                ref_metrics: str | None, server_dcp: int | None,
                same_process: Callable[[], bool | None] | None = None,
                by_address: Identity | None = None) -> bool | None:
    """UserError when the reference is the server under test, or is not a DCP-1 server.
    ``same_process`` settles a shared start time (see ``one_process``); without it, or when it
    cannot tell, the shared start time is taken as one process. ``by_address``: what
    :func:`address_identity` found. Returns what the counters told (None: not asked)."""
    if server_url == ref_url:
        raise UserError(f"--url and --reference-url are the same server ({server_url}): it "
                        "would be compared with itself", hint=SAME_HINT)
    if by_address is not None and by_address.status == "same":
        raise UserError(f"--url {server_url} and --reference-url {ref_url} are the same server "
                        f"({by_address.how}): it would be compared with itself", hint=SAME_HINT)
    a, b = process_start(server_metrics), process_start(ref_metrics)
    shared = a is not None and a == b
    told = same_process() if shared and same_process is not None else None
    if shared and told is not False:
        how = ("and request counters that move together" if told else "; no request counters "
               "to tell two processes apart")
        raise UserError(f"{server_url} and {ref_url} are one server process (same "
                        f"process_start_time_seconds {a:.3f} in /metrics {how})",
                        hint="start a DCP-1 reference of the same model on another port")
    rd = reported_dcp(ref_metrics)
    sd = reported_dcp(server_metrics) or server_dcp
    if rd is not None and (rd > 1 or rd == sd):
        raise UserError(f"reference {ref_url} reports DCP {rd} in /metrics"
                        + (", the same as the server under test" if rd == sd else "")
                        + ": the reference must run DCP 1",
                        hint="launch it with --decode-context-parallel-size 1")
    return told


# --- identity of the two addresses -------------------------------------------------------------
IdentityStatus = Literal["same", "distinct", "unproven"]
RESOLVE_TIMEOUT_S = 5.0


@dataclass
class Identity:
    """Whether the reference is another server than the one under test, and how that is known."""

    status: IdentityStatus
    how: str

    def to_dict(self) -> dict[str, str]:
        return {"status": self.status, "how": self.how}


def endpoint(url: str) -> tuple[str, int]:
    """(host, port) of a normalized ``http(s)://host[:port]`` URL (80 / 443 when not given)."""
    u = urlsplit(url)
    port = u.port or (443 if u.scheme == "https" else 80)
    return (u.hostname or "").lower(), port


def resolve(host: str, port: int, timeout: float = RESOLVE_TIMEOUT_S) -> set[str]:
    """The addresses ``host`` resolves to (empty when it does not resolve within ``timeout``:
    ``getaddrinfo`` has no timeout of its own, so it runs in a thread given up on)."""
    box: list[set[str]] = []

    def run() -> None:
        try:
            box.append({str(ai[4][0]).split("%", 1)[0]
                        for ai in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)})
        except OSError:
            box.append(set())

    th = threading.Thread(target=run, name="resolve", daemon=True)
    th.start()
    th.join(timeout)
    return box[0] if box else set()


def _local_addresses() -> set[str]:
    import psutil

    out = set()
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family in (socket.AF_INET, socket.AF_INET6):
                out.add(str(a.address).split("%", 1)[0])
    return out


def is_local(ip: str, local: set[str]) -> bool:
    try:
        return ipaddress.ip_address(ip).is_loopback or ip in local
    except ValueError:
        return False


def listeners(port: int) -> list[tuple[str, int]]:
    """(listening address, family) of every TCP socket listening on ``port`` on this machine."""
    import psutil

    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return []
    return sorted({(str(c.laddr.ip), int(c.family)) for c in conns
                   if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port})


def listener_for(ip: str, socks: list[tuple[str, int]]) -> str | None:
    """The listening socket (``ip``) a connection to ``ip`` lands on: the exact address, else the
    wildcard of its family, else a dual-stack ``::`` (Linux's default for IPv4 too)."""
    fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
    v4mapped = f"::ffff:{ip}" if fam == socket.AF_INET else None
    names = [s for s, _ in socks]
    for cand in (ip, v4mapped, "0.0.0.0" if fam == socket.AF_INET else "::"):
        if cand and cand in names:
            return cand
    if fam == socket.AF_INET and "::" in names:
        return "::"
    return None


def address_identity(server_url: str, ref_url: str) -> Identity:
    """Same / distinct / unproven from the addresses alone (no request is sent)."""
    (h1, p1), (h2, p2) = endpoint(server_url), endpoint(ref_url)
    a1, a2 = resolve(h1, p1), resolve(h2, p2)
    if p1 == p2 and a1 & a2:
        return Identity("same", f"{h1} and {h2} both resolve to {sorted(a1 & a2)[0]}:{p1}")
    local = _local_addresses()
    if a1 and a2 and all(is_local(ip, local) for ip in a1 | a2):
        l1 = {x for x in (listener_for(ip, listeners(p1)) for ip in a1) if x is not None}
        l2 = {x for x in (listener_for(ip, listeners(p2)) for ip in a2) if x is not None}
        if p1 == p2 and l1 & l2:
            return Identity("same", f"one socket listening on {sorted(l1 & l2)[0]}:{p1} of this "
                                    f"machine takes both {h1}:{p1} and {h2}:{p2}")
    return Identity("unproven", "the addresses alone do not tell")


def decide(by_address: Identity, server_metrics: str | None, ref_metrics: str | None,
           told: bool | None) -> Identity:
    """The identity after the address and /metrics checks (``refuse_same`` has refused the
    proven-same cases): distinct when the servers' own state says two, else unproven."""
    if by_address.status != "unproven":
        return by_address
    a, b = process_start(server_metrics), process_start(ref_metrics)
    if a is not None and b is not None and a != b:
        return Identity("distinct", f"different process_start_time_seconds ({a:.2f} vs {b:.2f})")
    if told is False:
        return Identity("distinct", "the reference's request counters did not move with the "
                                    "server's")
    if a is None or b is None:
        why = "no process_start_time_seconds in /metrics of " + (
            "either server" if a is None and b is None else "one server")
    else:
        why = "the same process start time and no request counters to tell them apart"
    return Identity("unproven", f"different addresses, but {why}")
