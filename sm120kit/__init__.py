"""sm120kit: decode context parallelism for vLLM's FlashInfer sparse-MLA SM120 backend."""

__version__ = "0.1.0"
