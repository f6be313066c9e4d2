"""The fifth corpus (tests/data/field-logs-e) is well formed, frozen and disjoint.

It checks the data, not ``diagnose`` (the corpus was collected blind to measure how diagnose
generalizes, README "Rules of blindness"): the schema of every entry (the fields of
tests/data/field-logs/manifest.json), that every file is there, non-empty UTF-8 with LF line
ends, that no source thread is shared with any other corpus of this repository (the tuning
sets, vllm-logs and every held-out set: each GitHub thread URL their manifests and READMEs
name), that FROZEN.sha256 still matches every file, and the mix it was collected for.
"""

from __future__ import annotations

from collections import Counter

from tests.diagnose.corpus_checks import (
    DATA,
    check_quotes,
    frozen_corpus_tests,
    manifest,
    slug_id,
)

HERE = DATA / "field-logs-e"
MANIFEST = manifest(HERE)
REQUIRED = ("field-logs", "field-logs-b", "field-logs-c", "field-logs-d", "field-logs-holdout",
            "field-logs-holdout-2", "field-logs-holdout-3", "field-logs-holdout-4", "vllm-logs")


(test_entry_schema, test_file_present_and_utf8, test_ids_unique_and_every_file_listed,
 test_no_thread_shared_with_another_corpus, test_frozen_hashes_match) = frozen_corpus_tests(
    HERE, MANIFEST, REQUIRED, slug_id)


# entries whose quote comes from the excerpt's own post (the others quote a later post)
QUOTED_IN_EXCERPT = ("freetoken-168", "nccl-1837", "vllm-50747")


def test_quotes_name_the_source_thread_and_match_the_excerpt() -> None:
    check_quotes(HERE, MANIFEST, QUOTED_IN_EXCERPT, strict=True)


def test_mix_of_outcomes_engines_and_causes() -> None:
    assert len(MANIFEST) >= 60
    benign = [e for e in MANIFEST if e["outcome"] != "failure"]
    assert len(benign) >= 8, "healthy or progressing logs whose thread is about something else"
    causes = [e["established_cause"]["category"] for e in MANIFEST if e["established_cause"]]
    assert len(causes) >= 6
    assert len(set(causes)) >= 4, "established causes spread over the categories"
    assert len(MANIFEST) - len(causes) >= 40, "logs whose thread or excerpt states no cause"
    firsts = [e["expected_categories"][0] for e in MANIFEST]
    assert max(firsts.count(c) for c in set(firsts)) <= len(firsts) // 5
    assert len(set(firsts)) >= 12
    repos = Counter(e["repo"] for e in MANIFEST)
    assert repos["vllm-project/vllm"] >= 15
    assert repos["huggingface/text-generation-inference"] >= 4
    assert repos["sgl-project/sglang"] >= 6
    assert repos["NVIDIA/nccl"] + repos["NVIDIA/nccl-tests"] >= 6
    assert repos["deepspeedai/DeepSpeed"] >= 2
    assert len(repos) >= 25
    texts = [(HERE / e["file"]).read_text(encoding="utf-8") for e in MANIFEST]
    elastic = sum("Root Cause (first observed failure)" in t or "torch.distributed.elastic" in t
                  or "torch/distributed/elastic" in t for t in texts)
    assert elastic >= 3, "torchrun / torch elastic agent output"
    ray = sum("across cluster]" in t or "RayWorkerWrapper" in t or "The actor is dead" in t
              for t in texts)
    assert ray >= 3, "vLLM under Ray"
    v1 = sum(any(p in t for p in ("(EngineCore_DP0 pid=", "(EngineCore pid=", "(EngineCore_0 pid=",
                                   "(Worker_TP0 pid=", "(VllmWorker rank=", "(VllmWorker PP0_TP0"))
             for t in texts)
    assert v1 >= 6, "vLLM V1 engine-core / worker prefixes"
    watchdog = sum("Watchdog caught collective operation timeout" in t for t in texts)
    assert watchdog >= 2, "torch NCCL watchdog timeouts"
    nccl_tests = sum("busbw" in t for t in texts)
    assert nccl_tests >= 2, "nccl-tests result tables"
