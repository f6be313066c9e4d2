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
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

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


def refuse_same(server_url: str, ref_url: str, server_metrics: str | None,
                ref_metrics: str | None, server_dcp: int | None,
                same_process: Callable[[], bool | None] | None = None) -> None:
    """UserError when the reference is the server under test, or is not a DCP-1 server.
    ``same_process`` settles a shared start time (see ``one_process``); without it, or when it
    cannot tell, the shared start time is taken as one process."""
    if server_url == ref_url:
        raise UserError(f"--url and --reference-url are the same server ({server_url}): it "
                        "would be compared with itself", hint="the reference is a DCP-1 server "
                        "of the same model on another port")
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
