"""Run the release's real ``run_mixed_prefill_decode_warmup`` with a minimal model runner.

The runner is not a ``GPUModelRunner`` (that needs a GPU, a model and weights); it carries only
the attributes the function reads, with real vLLM config objects behind them:

* ``vllm_config``: a real ``VllmConfig`` (``ParallelConfig`` with ``tensor_parallel_size =
  decode_context_parallel_size = N``, ``CacheConfig(block_size=B)``, ``SchedulerConfig``);
  ``scheduler_config`` is its scheduler config, as on the real runner;
* ``kv_cache_config``: a real ``KVCacheConfig`` with one ``MLAAttentionSpec`` group (fp8_ds_mla,
  656-byte rows, per-rank block size B);
* ``kv_connector``: vLLM's own no-op ``KVConnector`` subclassed only to record ``set_disabled``;
* ``model_config`` (0.34 only, for ``get_vocab_size``): a stand-in, because a real
  ``ModelConfig`` needs a Hugging Face model config from the hub, which is unreachable here;
* plain values for ``max_model_len``, ``max_num_reqs``, ``num_speculative_steps`` ... copied from
  the config exactly as ``GPUModelRunner.__init__`` derives them.

Every attribute read is recorded, so the tests can check that the patch reads nothing new beyond
``scheduler_config``/``vllm_config`` (and for DCP = 1 nothing new at all). The execute/sample
callbacks record deep copies of what they receive. On 0.34 ``torch.accelerator.synchronize()``
(called after every step) is replaced by a counter when no accelerator exists: it would raise
on a CPU-only machine, and it only waits for a device.
"""

from __future__ import annotations

import copy
from typing import Any

from rtworker.canon import canon

VOCAB_SIZE = 129280  # DeepSeek-V3.2's vocabulary (any value > the prompt lengths works)

# (dcp, block_size, max_model_len, max_num_batched_tokens, num_tokens)
MAIN_CASES = [(n, b, 8192, 8192, 16) for n in (1, 2, 4, 8) for b in (64, 128)]
CLAMP_CASES = [
    (4, 64, 200, 8192, 16),  # L = N*B = 256 clamped to max_model_len - 1 - 1 = 198
    (8, 128, 8192, 512, 16),  # L = 1024 clamped to max_num_batched_tokens = 512
    (2, 64, 8192, 100, 16),  # L = 128 clamped to 100
]


# (dcp, block_size, max_model_len, max_num_batched_tokens, num_tokens, mtp, draft_slots):
# speculative decoding with a small token budget. MTP adds no drafting slots beyond the query
# slot the scheduler already counts (SpeculativeConfig.max_num_new_slots_for_drafting = 0 for
# "mtp"); a draft model adds 1 per request, a parallel drafter k.
MTP_CASES = [
    (4, 64, 8192, 200, 16, 1, 0),  # MTP 1: L = min(256, 200) = 200, clamped -> one log line
    (4, 64, 8192, 200, 16, 3, 0),  # MTP 3
    (4, 64, 8192, 200, 16, 3, 3),  # a parallel drafter's 3 slots: L = 200 - 3 = 197
    (2, 64, 8192, 8192, 16, 3, 0),  # MTP 3, budget large enough: L = 128, nothing logged
]


class _SpecConfigStandIn:
    """The attributes of ``SpeculativeConfig`` the warmup reads. A real one needs the target and
    draft models' Hugging Face configs (unreachable here)."""

    def __init__(self, k: int, slots: int) -> None:
        self.num_speculative_tokens = k
        self.max_num_new_slots_for_drafting = slots
        self.method = "mtp"


class _ModelConfigStandIn:
    """Only ``get_vocab_size`` (read by 0.34's ``_warmup_token_ids``)."""

    def get_vocab_size(self) -> int:
        return VOCAB_SIZE


class MinimalRunner:
    """Attribute bag that records every attribute the warmup reads (missing -> AttributeError)."""

    def __init__(self, **attrs: Any) -> None:
        object.__setattr__(self, "_attrs", dict(attrs))
        object.__setattr__(self, "_reads", set())
        object.__setattr__(self, "_writes", [])

    def __getattr__(self, name: str) -> Any:
        attrs = object.__getattribute__(self, "_attrs")
        if name in attrs:
            object.__getattribute__(self, "_reads").add(name)
            return attrs[name]
        raise AttributeError(f"minimal runner has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        object.__getattribute__(self, "_writes").append(name)
        object.__getattribute__(self, "_attrs")[name] = value


def _connector() -> Any:
    from vllm.v1.worker.gpu.kv_connector import KVConnector

    class RecordingConnector(KVConnector):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[bool] = []

        def set_disabled(self, disabled: bool) -> None:
            self.calls.append(disabled)
            super().set_disabled(disabled)

    return RecordingConnector()


def build_runner(dcp: int, block: int, max_model_len: int, mnbt: int) -> tuple[Any, Any]:
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ParallelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, MLAAttentionSpec

    sched_kwargs: dict[str, Any] = dict(
        max_num_batched_tokens=mnbt,
        max_num_seqs=8,
        max_model_len=max_model_len,
        is_encoder_decoder=False,
    )
    if mnbt < max_model_len:
        sched_kwargs["enable_chunked_prefill"] = True
    vc = VllmConfig(
        parallel_config=ParallelConfig(
            tensor_parallel_size=dcp, decode_context_parallel_size=dcp
        ),
        cache_config=CacheConfig(block_size=block),
        scheduler_config=SchedulerConfig(**sched_kwargs),
        device_config=DeviceConfig(device="cpu"),
    )
    spec = MLAAttentionSpec(
        block_size=block,
        num_kv_heads=1,
        head_size=656,
        dtype=torch.uint8,
        cache_dtype_str="fp8_ds_mla",
    )
    kcc = KVCacheConfig(
        num_blocks=4096,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["model.layers.0.self_attn.attn"], spec)],
    )
    connector = _connector()
    runner = MinimalRunner(
        vllm_config=vc,
        scheduler_config=vc.scheduler_config,
        kv_cache_config=kcc,
        max_model_len=max_model_len,
        max_num_reqs=vc.scheduler_config.max_num_seqs,
        max_num_tokens=vc.scheduler_config.max_num_batched_tokens,
        is_pooling_model=False,
        num_speculative_steps=0,
        decode_query_len=1,
        speculative_config=None,
        model_state=object(),
        model_config=_ModelConfigStandIn(),
        kv_connector=connector,
    )
    return runner, connector


def _install_sync_counter() -> list[int]:
    import torch

    counter = [0]
    acc = getattr(torch, "accelerator", None)
    if acc is not None and not acc.is_available():

        def synchronize(device: Any = None) -> None:
            counter[0] += 1

        acc.synchronize = synchronize
    return counter


class _Lines:
    """Collects the warmup module's log records (the worker runs vLLM at level ERROR)."""

    def __init__(self) -> None:
        import logging

        self.lines: list[str] = []
        outer = self

        class Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                outer.lines.append(record.getMessage())

        self.handler = Handler(level=logging.WARNING)


def run_case(dcp: int, block: int, max_model_len: int, mnbt: int, num_tokens: int,
             mtp: int = 0, draft_slots: int = 0) -> dict[str, Any]:
    import logging

    from vllm.v1.kv_cache_interface import AttentionSpec
    from vllm.v1.worker.gpu import warmup

    runner, connector = build_runner(dcp, block, max_model_len, mnbt)
    if mtp:
        spec_cfg = _SpecConfigStandIn(mtp, draft_slots)
        attrs = object.__getattribute__(runner, "_attrs")
        attrs.update(num_speculative_steps=mtp, decode_query_len=1 + mtp,
                     speculative_config=spec_cfg,
                     # 0.34 pins fixed draft counts around a speculative warmup
                     adaptive_verification=None, rejection_sampler=None)
    log = _Lines()
    wlog = logging.getLogger(warmup.__name__)
    old_level = wlog.level
    wlog.setLevel(logging.WARNING)
    wlog.addHandler(log.handler)
    counter = _install_sync_counter()
    counter[0] = 0
    calls: list[dict[str, Any]] = []

    def execute_model(scheduler_output: Any) -> None:
        calls.append({"call": "execute_model", "arg": canon(copy.deepcopy(scheduler_output))})

    def sample_tokens(grammar_output: Any) -> None:
        calls.append({"call": "sample_tokens", "arg": canon(grammar_output)})

    try:
        ret = warmup.run_mixed_prefill_decode_warmup(runner, execute_model, sample_tokens,
                                                     num_tokens)
    finally:
        wlog.removeHandler(log.handler)
        wlog.setLevel(old_level)
    spec = runner.kv_cache_config.kv_cache_groups[0].kv_cache_spec
    return {
        "case": {
            "dcp": dcp,
            "block_size": block,
            "max_model_len": max_model_len,
            "max_num_batched_tokens": mnbt,
            "num_tokens": num_tokens,
            **({"mtp": mtp, "draft_slots": draft_slots} if mtp else {}),
        },
        "log": log.lines,
        "returned": ret,
        "calls": calls,
        "runner_reads": sorted(object.__getattribute__(runner, "_reads")),
        "runner_writes": object.__getattribute__(runner, "_writes"),
        "connector_calls": connector.calls,
        "accelerator_syncs": counter[0],
        "num_blocks": runner.kv_cache_config.num_blocks,
        "num_lookahead_tokens": runner.vllm_config.num_lookahead_tokens,
        # vLLM < 0.31 has no dcp_sharded field: every attention cache was DCP-sharded then
        "spec_dcp_sharded": bool(getattr(spec, "dcp_sharded", isinstance(spec, AttentionSpec))),
        "spec_has_dcp_sharded_field": hasattr(spec, "dcp_sharded"),
        "has_dcp_decode_prompt_len": hasattr(warmup, "dcp_decode_prompt_len"),
    }


def run_all() -> list[dict[str, Any]]:
    return [run_case(*c) for c in MAIN_CASES + CLAMP_CASES]


def run_mtp() -> list[dict[str, Any]]:
    return [run_case(*c) for c in MTP_CASES]
