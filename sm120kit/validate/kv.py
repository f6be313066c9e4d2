"""KV-capacity figures shown beside the verdict (the seam for the shared ``kv_capacity`` reader).

Until the project's shared reader exists this module reads the few lines validate needs: vLLM's
``Available KV cache memory: X GiB`` / ``GPU KV cache size: N tokens`` / ``Maximum concurrency for
L tokens per request: C x`` from a launch log, and ``vllm:cache_config_info`` (``block_size``,
``num_gpu_blocks``) from Prometheus ``/metrics``. Swap :func:`kv_capacity` for the shared reader
when it lands; the rest of validate only calls this one function.
"""

from __future__ import annotations

import re

from sm120kit.validate.model import KvCapacity

_AVAIL = re.compile(r"Available KV cache memory:\s*([\d.]+)\s*GiB")
_SIZE = re.compile(r"GPU KV cache size:\s*([\d,]+)\s*tokens")
_CONC = re.compile(r"Maximum concurrency for\s*([\d,]+)\s*tokens per request:\s*([\d.]+)\s*x")
_INFO = re.compile(r"^vllm:cache_config_info\{([^}]*)\}", re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _int(s: str) -> int:
    return int(s.replace(",", ""))


def from_log(text: str) -> KvCapacity | None:
    """The last figures a vLLM launch log printed (a relaunch prints them again)."""
    avail = _AVAIL.findall(text)
    size = _SIZE.findall(text)
    conc = _CONC.findall(text)
    if not (avail or size or conc):
        return None
    return KvCapacity(
        source="log",
        available_kv_gib=float(avail[-1]) if avail else None,
        gpu_kv_cache_tokens=_int(size[-1]) if size else None,
        max_concurrency_len=_int(conc[-1][0]) if conc else None,
        max_concurrency=float(conc[-1][1]) if conc else None,
    )


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
