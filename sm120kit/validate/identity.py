"""Refuse to compare a server with itself, and options vLLM would reject, before any prompt.

Two URLs name the same server when they normalize to the same address, or when their Prometheus
``/metrics`` report the same ``process_start_time_seconds`` (one process behind two addresses,
e.g. ``localhost`` and ``127.0.0.1``). A ``decode_context_parallel_size`` label on a
``vllm:*_config_info`` gauge, where a build exports one (vLLM 0.34.0's ``cache_config_info`` does
not), must say DCP 1 for the reference and differ from the server under test.
"""

from __future__ import annotations

import re

from sm120kit.errors import UserError

#: vLLM's default ``--max-logprobs``: more top-k than this per token is a 400 from the server
MAX_LOGPROBS = 20

_START = re.compile(r"^process_start_time_seconds(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.M)
_DCP = re.compile(r'^vllm:\w*_config_info\{[^}]*\bdecode_context_parallel_size="(\d+)"', re.M)


def process_start(metrics: str | None) -> float | None:
    m = _START.search(metrics or "")
    return float(m.group(1)) if m else None


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
                ref_metrics: str | None, server_dcp: int | None) -> None:
    """UserError when the reference is the server under test, or is not a DCP-1 server."""
    if server_url == ref_url:
        raise UserError(f"--url and --reference-url are the same server ({server_url}): it "
                        "would be compared with itself", hint="the reference is a DCP-1 server "
                        "of the same model on another port")
    a, b = process_start(server_metrics), process_start(ref_metrics)
    if a is not None and a == b:
        raise UserError(f"{server_url} and {ref_url} are one server process (same "
                        f"process_start_time_seconds {a:.3f} in /metrics)",
                        hint="start a DCP-1 reference of the same model on another port")
    rd = reported_dcp(ref_metrics)
    sd = reported_dcp(server_metrics) or server_dcp
    if rd is not None and (rd > 1 or rd == sd):
        raise UserError(f"reference {ref_url} reports DCP {rd} in /metrics"
                        + (", the same as the server under test" if rd == sd else "")
                        + ": the reference must run DCP 1",
                        hint="launch it with --decode-context-parallel-size 1")
