"""Hang diagnostics: live phase tracking (``phases``), offline log/bundle analysis (``diagnose``).

The package is split between two areas:

* ``collect`` side (supervise, stacks, gpu, ras, flight, bundle writing, redact, collect): runs a
  vLLM launch, catches a stall and writes a support bundle.
* ``diagnose`` side (``phases``, ``logs/``, ``rules/``, ``diagnose``, ``bundle_read``): reads a log,
  a directory of per-rank logs or a bundle and names the phase, the diverging rank and the cause.

Nothing here imports torch, vLLM or NVML at module level.
"""

from __future__ import annotations

from sm120kit.diag.phases import PHASES, PhaseTracker, classify_line, stall_signal

__all__ = ["PHASES", "PhaseTracker", "classify_line", "stall_signal"]
