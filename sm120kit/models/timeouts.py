"""Timeouts shared by every command that supervises a process (one value, one place)."""

from __future__ import annotations

#: seconds without output or phase change that count as a stall (collect, warmup run, validate)
DEFAULT_STALL_TIMEOUT_S = 120.0

#: vLLM's VLLM_ENGINE_READY_TIMEOUT_S default (envs.py): how long the API server waits for the
#: engine to report ready before it gives up
VLLM_ENGINE_READY_TIMEOUT_S = 600
