"""Messages vLLM's engine and serving layer print by name (LoRA adapters, multimodal limits, chat
templates, memory profiling, model folders, the API server's start-up wrapper) and the tokenizers
library's refusal of a newer tokenizer.json, each in a two-line log as a user's engine start
shows it: the top finding names the cause an engineer who knows the software reads in the
message (issue 29).

Each line is worded as the software prints it (source file in the comment, at a release tag) and
seen in the public thread named beside it. Every answer here comes from an entry of
``catalogue/known-vllm-engine.toml``: without that file these logs were answered
``rank-crashed`` (the first failed process, no cause named) or a wrong category from the message
index's module mapping, so the test fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose.engine import diagnose

HEAD = "ERROR 01-01 00:00:00 [core.py:1] EngineCore failed to start.\n"

# (message line as printed, expected top category, catalogue entry that must name it)
FIXED = [
    # vllm/lora/peft_helper.py (v0.11.0); vllm-project/vllm#2847 (before: rank-crashed)
    ("ValueError: LoRA rank 64 is greater than max_lora_rank 16.", "config-invalid",
     "vllm-lora-rank-over-max"),
    # the V1 multiproc executor's re-raise of it; hiyouga/LlamaFactory#9512 (before: rank-crashed)
    ("RuntimeError: Worker failed with error 'LoRA rank 32 is greater than max_lora_rank 16.', "
     "please check the stack trace above for the root cause", "config-invalid",
     "vllm-lora-rank-over-max"),
    # vllm/lora/worker_manager.py (v0.8.4); vllm-project/vllm#30690 (before: rank-crashed)
    ("ValueError: Loading lora sql-lora failed: No adapter found for /adapters/sql-lora",
     "config-invalid", "vllm-lora-adapter-not-found"),
    # vllm/v1/engine/processor.py (v0.11.0); vllm-project/vllm#16676 (before: rank-crashed)
    ("ValueError: Got lora_request LoRARequest(lora_name='sql', lora_int_id=1, "
     "lora_path='/adapters/sql') but LoRA is not enabled!", "config-invalid",
     "vllm-lora-not-enabled"),
    # vllm/multimodal/registry.py (v0.6.3); vllm-project/vllm#11842 (before: rank-crashed)
    ("ValueError: You set image=1 (or defaulted to 1) in `--limit-mm-per-prompt`, but found 2 "
     "items in the same prompt.", "config-invalid", "vllm-mm-limit-per-prompt"),
    # vllm/multimodal/processing.py (v0.11.0) (before: rank-crashed)
    ("ValueError: At most 1 image(s) may be provided in one prompt. Set `--limit-mm-per-prompt` "
     "to increase this limit.", "config-invalid", "vllm-mm-limit-per-prompt"),
    # vllm/multimodal/utils.py (v0.11.0); runpod-workers/worker-vllm#205 (before: rank-crashed)
    ("RuntimeError: Cannot load local files without `--allowed-local-media-path`.",
     "config-invalid", "vllm-local-media-path-not-allowed"),
    # vllm/v1/core/encoder_cache_manager.py (v0.11.0); RBLN-SW/vllm-rbln#527 (before: rank-crashed)
    ("ValueError: Chunked MM input disabled but max_tokens_per_mm_item (16384) is larger than "
     "max_num_batched_tokens (8192). Please increase max_num_batched_tokens.", "config-invalid",
     "vllm-mm-item-over-batch-budget"),
    # vllm/entrypoints/chat_utils.py (v0.11.0); vllm-project/vllm#7978 (before: rank-crashed)
    ("ValueError: As of transformers v4.44, default chat template is no longer allowed, so you "
     "must provide a chat template if the tokenizer does not define one.", "checkpoint-config",
     "vllm-no-chat-template"),
    # tokenizers src/models/mod.rs (v0.19.1), serde's untagged-enum error; unslothai/unsloth#1059
    # (before: unknown)
    ("Exception: data did not match any variant of untagged enum ModelWrapper at line 757443 "
     "column 3", "library-version", "tokenizers-json-too-new"),
    # vllm/v1/worker/gpu_worker.py (v0.11.0); modelscope/ms-swift#3241 (before: out-of-memory from
    # the message index's module mapping, with no cause named)
    ("AssertionError: Error in memory profiling. Initial free memory 21.3 GiB, current free memory "
     "22.1 GiB. This happens when other processes sharing the same container release GPU memory "
     "while vLLM is profiling during initialization.", "out-of-memory",
     "vllm-memory-profiling-free-memory-rose"),
    # vllm/transformers_utils/config.py (v0.11.0); vllm-project/vllm#12092 (before: rank-crashed)
    ("ValueError: Could not detect config format for no config file found. With config_format "
     "'auto', ensure your model has either config.json (HF format) or params.json (Mistral "
     "format).", "checkpoint-config", "vllm-model-config-not-found"),
    # csrc/quantization/cutlass_w8a8/scaled_mm_entry.cu (v0.10.2), the grouped MoE GEMM with
    # kernels for SM90/SM100 only, on an SM120 card; vllm-project/vllm#24921 (before: rank-crashed)
    ("NotImplementedError: No compiled get_cutlass_moe_mm_data: no cutlass_scaled_mm kernel for "
     "CUDA device capability: 120. Required capability: 90 or 100", "library-version",
     "vllm-cutlass-kernel-not-compiled-for-arch"),
    # the same entry point (v0.6.3), a wheel without kernels for the card; vllm-project/vllm#9419
    # (before: rank-crashed)
    ("NotImplementedError: Error in calling custom op cutlass_scaled_mm: No compiled "
     "cutlass_scaled_mm for a compute capability less than CUDA device capability: 120",
     "library-version", "vllm-cutlass-kernel-not-compiled-for-arch"),
    # vllm/v1/engine/utils.py (v0.11.0); ray-project/kuberay#4366 (before: rank-crashed)
    ("ValueError: Not enough resources to allocate 2 placement groups, only created 1 placement "
     "groups. Available resources: {'CPU': 8.0, 'GPU': 1.0}", "config-invalid",
     "vllm-dp-placement-groups-short"),
    # vllm/lora/worker_manager.py (v0.6.3); vllm-project/vllm#3374 (before: rank-crashed)
    ("RuntimeError: Number of requested LoRAs (5) is greater than the number of GPU LoRA slots "
     "(4).", "config-invalid", "vllm-lora-slots-exceeded"),
]


def _findings(tmp_path: Path, line: str) -> list[tuple[str, str]]:
    log = tmp_path / "engine.log"
    log.write_text(HEAD + "ERROR 01-01 00:00:00 [core.py:1] " + line + "\n", encoding="utf-8")
    return [(f.category, f.rule) for f in diagnose([log]).findings]


@pytest.mark.parametrize(("line", "category", "rule"), FIXED, ids=[r for _, _, r in FIXED])
def test_a_message_the_software_prints_names_its_cause(tmp_path: Path, line: str, category: str,
                                                       rule: str) -> None:
    assert _findings(tmp_path, line)[0] == (category, rule)


def test_the_api_servers_start_wrapper_is_not_read_as_a_rejected_setting(tmp_path: Path) -> None:
    """vllm/entrypoints/openai/api_server.py (v0.6.3-v0.10.2); vllm-project/vllm#11994. The line
    only says the engine process is gone: without the entry the message index's module mapping
    (api_server.py: arguments) answered config-invalid; it is a crashed process whose cause is
    above it, and the entry names it as an effect."""
    found = _findings(tmp_path, "RuntimeError: Engine process failed to start. See stack trace "
                                "for the root cause.")
    assert found[0][0] == "rank-crashed"
    assert ("rank-crashed", "vllm-engine-process-failed-to-start") in found
    assert all(c != "config-invalid" for c, _ in found)


def test_a_cause_above_the_wrapper_wins(tmp_path: Path) -> None:
    """The wrapper is an effect: the LoRA rank refusal printed before it stays the answer."""
    log = tmp_path / "engine.log"
    log.write_text("ERROR 01-01 00:00:00 [core.py:1] ValueError: LoRA rank 64 is greater than "
                   "max_lora_rank 16.\nRuntimeError: Engine process failed to start. See stack "
                   "trace for the root cause.\n", encoding="utf-8")
    f = diagnose([log]).findings[0]
    assert (f.category, f.rule) == ("config-invalid", "vllm-lora-rank-over-max")
