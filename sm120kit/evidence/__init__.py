"""Evidence readers shared by ``collect`` (live) and ``diagnose`` (offline).

* :mod:`.phases` — vLLM phases from single log lines and the ONE table of stall messages;
* :mod:`.logs` — log streams, prefixes, parsers, versions (the named signals they count are
  catalogue data, ``diagnose/catalogue/signals.toml``, handed in as a scanner);
* :mod:`.stacks` — py-spy / faulthandler samples and the ONE classifier of a blocked stack;
* :mod:`.flight` — NCCL Flight Recorder dumps; :mod:`.ras` — NCCL RAS client;
* :mod:`.gpu` — NVML snapshot and host facts; :mod:`.procs` — the vLLM process tree;
* :mod:`.redact` — secrets and host names; :mod:`.bundle_reader` — a support bundle, read safely.

Nothing here imports torch, vLLM or NVML at module level, and nothing here imports a capability
(``collect``, ``diagnose``, ``doctor``, ``warmup``, ``patchset``).
"""
