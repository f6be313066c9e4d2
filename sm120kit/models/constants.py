"""Small facts of the SM120 sparse-MLA backend that options and models share (no imports, so the
CLI's option table can name them without loading the KV model)."""

from __future__ import annotations

#: the first of FLASHINFER_MLA_SPARSE_SM120's kernel block sizes (vLLM's --block-size default there)
DEFAULT_BLOCK_SIZE = 64

#: FlashInfer aborts at import when flashinfer-cubin's version differs from its own, unless set
FLASHINFER_VERSION_CHECK_ENV = "FLASHINFER_DISABLE_VERSION_CHECK"
