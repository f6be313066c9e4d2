"""Low-level readers of facts: procfs/sysfs, NVML, installed packages' metadata and source text.

Each reader is small, reads only what it needs, never imports torch / vllm / flashinfer, and is
bounded by a timeout where it could block (subprocesses, NVML). ``sm120kit.doctor`` judges these
facts; ``sm120kit.collect`` records them.
"""
