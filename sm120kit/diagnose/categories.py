"""The fixed list of causes a finding (or a catalogue entry) may name, and the field phases."""

from __future__ import annotations

CATEGORIES: tuple[str, ...] = (
    "rank-crashed", "collective-desync", "p2p-transport", "shared-memory", "library-version",
    "interposer", "dcp-warmup", "dcp-unsupported", "kernel-hang", "out-of-memory",
    "timeout-too-short", "config-invalid", "dcp-not-engaged", "autotune-deadlock",
    "checkpoint-config",
    "kv-cache-insufficient", "cold-start-timeout", "serving-stall", "cudagraph-capture", "unknown",
)
# the phases a finding names (the field's words); the analysis' finer phases map onto them
FIELD_PHASES: tuple[str, ...] = ("startup", "weight-load", "compile", "autotune", "warmup",
                                 "capture", "serving")
