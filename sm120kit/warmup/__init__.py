"""DCP warmup: planning (pure Python) and the multi-rank sparse-MLA decode warmup run (torch).

* :mod:`sm120kit.models.dcp` (shared with doctor) — ownership ``(t // I) % N``, local
  index/length, the fixed warmup prompt length (``N * B`` clamped; 2 without DCP) and per-rank
  tables; :mod:`sm120kit.models.serve_args` — the ``vllm serve`` command line;
* :mod:`sm120kit.models.fp8ds` — the 656/528-byte fp8_ds_mla rows; :mod:`.reference` — index conversion,
  sparse MLA decode with LSE, the FlashInfer SM120 stand-in and the ag_rs/a2a merges;
* :mod:`.config`, :mod:`.runner` (supervisor, watchdog), :mod:`.launcher`, :mod:`.rank`,
  :mod:`.workload`, :mod:`.collectives`, :mod:`.fi_backend`, :mod:`.render` — ``warmup run``.

Only the torch-needing modules import torch, and only inside functions.
"""
