"""KV-capacity figures shown beside the verdict.

From a launch log through the shared reader (``sm120kit.models.kv``: vLLM's ``Available KV
cache memory`` / ``GPU KV cache size`` / ``Maximum concurrency`` lines in the one-line 0.28+ and
the older two-line forms), else from ``vllm:cache_config_info`` (``block_size``,
``num_gpu_blocks``) in Prometheus ``/metrics``.
"""

from __future__ import annotations

import re

from sm120kit.models.kv import read_kv_lines
from sm120kit.validate.model import KvCapacity

_INFO = re.compile(r"^vllm:cache_config_info\{([^}]*)\}", re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def from_log(text: str) -> KvCapacity | None:
    """The last figures a vLLM launch log printed (a relaunch prints them again)."""
    kv = read_kv_lines(text.splitlines())
    if not kv.found:
        return None
    cap = KvCapacity(source="log", available_kv_gib=kv.available_gib,
                     gpu_kv_cache_tokens=kv.tokens, max_concurrency_len=kv.max_model_len,
                     max_concurrency=kv.max_concurrency)
    if kv.needed_gib is not None:
        cap.notes.append(f"vLLM could not fit one request: {kv.needed_gib} GiB needed, "
                         f"{kv.available_gib} GiB available")
    return cap


def from_metrics(text: str) -> KvCapacity | None:
    m = _INFO.search(text)
    if not m:
        return None
    labels = dict(_LABEL.findall(m.group(1)))
    bs = labels.get("block_size")
    nb = labels.get("num_gpu_blocks")
    cap = KvCapacity(
        source="metrics",
        block_size=int(bs) if bs and bs.isdigit() else None,
        num_gpu_blocks=int(nb) if nb and nb.isdigit() else None,
    )
    if cap.block_size and cap.num_gpu_blocks:
        cap.notes.append("num_gpu_blocks is per rank; with DCP N the server holds about N× "
                         "block_size×num_gpu_blocks tokens")
    return cap


def kv_capacity(log_text: str | None = None, metrics_text: str | None = None) -> KvCapacity | None:
    """Figures from the launch log when there is one, else from ``/metrics``; None if neither."""
    if log_text:
        cap = from_log(log_text)
        if cap is not None:
            return cap
    if metrics_text:
        return from_metrics(metrics_text)
    return None
