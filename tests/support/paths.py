"""Path constants of the repository and of the vLLM files the DCP series touches."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATCHES = ROOT / "patches"
#: the public vLLM log corpus (13 real logs with their sources: tests/data/vllm-logs/README.md)
VLLM_LOGS = ROOT / "tests" / "data" / "vllm-logs"

SM120 = "vllm/v1/attention/backends/mla/flashinfer_mla_sparse_sm120.py"
SPARSE = "vllm/v1/attention/backends/mla/flashinfer_mla_sparse.py"
SPARSE_UTILS = "vllm/v1/attention/backends/mla/sparse_utils.py"
WARMUP = "vllm/v1/worker/gpu/warmup.py"
# short names used throughout the series tests
SM, WS, WU = SM120, SPARSE, WARMUP
