"""``kv_capacity`` of a launch from its log lines (and its argv), shared by collect (at ready),
diagnose and doctor --log: vLLM's KV lines + the requested DCP / model / KV dtype the log (or
the command line) names + the density model of the model's local config.json."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sm120kit.errors import UserError
from sm120kit.evidence.logs.versions import VersionScan
from sm120kit.facts.modelconfig import find_model_config, load_config
from sm120kit.models.kv import (
    KvCapacity,
    KvDensity,
    KvLines,
    UnsupportedModel,
    capacity_from_lines,
    density_from_config,
    feed_kv_line,
)
from sm120kit.models.serve_args import parse_serve_args


def density_for(cfg: dict[str, Any] | None, kv_dtype: str | None, block: int | None,
                mtp: int) -> KvDensity | None:
    if cfg is None:
        return None
    try:
        return density_from_config(cfg, kv_cache_dtype=kv_dtype, block_size=block, mtp_tokens=mtp)
    except UnsupportedModel:
        return None


def scan_lines(lines: Iterable[str]) -> tuple[KvLines, VersionScan]:
    kv, scan = KvLines(), VersionScan()
    for line in lines:
        feed_kv_line(kv, line)
        scan.feed(line)
    return kv, scan


def capacity(kv: KvLines, conf: Mapping[str, Any], env: Mapping[str, str], *,
             cfg: dict[str, Any] | None = None, requested_dcp: int | None = None,
             kv_dtype: str | None = None, block: int | None = None) -> KvCapacity | None:
    """Combine the KV lines with the launch's settings; the model config is looked up locally
    (model dir or HF cache) when not given."""
    if not kv.found:
        return None
    if cfg is None:
        found = find_model_config(conf.get("model"), env)
        if found is not None:
            try:
                cfg = load_config(found)
            except (OSError, ValueError):
                cfg = None
    want = requested_dcp if requested_dcp is not None else conf.get("dcp")
    dens = density_for(cfg, kv_dtype or conf.get("kv_cache_dtype"), block,
                       int(conf.get("mtp") or 0))
    return capacity_from_lines(kv, dens, int(want) if want is not None else None)


def capacity_from_launch(lines: Iterable[str], argv: list[str],
                         env: Mapping[str, str]) -> KvCapacity | None:
    """collect at ready: the log lines plus the supervised command line (which wins)."""
    kv, scan = scan_lines(lines)
    conf = dict(scan.config)
    try:
        sa = parse_serve_args(argv)
    except UserError:
        sa = None
    if sa is not None:
        if sa.model:
            conf["model"] = sa.model
        if "decode_context_parallel_size" in sa.given:
            conf["dcp"] = sa.dcp
        if "kv_cache_dtype" in sa.given:
            conf["kv_cache_dtype"] = sa.kv_cache_dtype
        if sa.num_speculative_tokens and (sa.speculative_method or "mtp").endswith("mtp"):
            conf["mtp"] = sa.num_speculative_tokens
    return capacity(kv, conf, env, block=sa.block_size if sa is not None else None)
