"""The third tuning corpus (tests/data/field-logs-c) is well formed, frozen and disjoint.

It checks the data, not ``diagnose`` (the corpus was collected blind, README "How it was
drawn"): the schema of every entry (the fields of tests/data/field-logs/manifest.json), that
every file is there, non-empty UTF-8 with LF line ends, that no source thread is shared with
any other corpus of this repository (the other tuning sets, vllm-logs and every held-out set:
each GitHub thread URL their manifests and READMEs name), that FROZEN.sha256 still matches
every file, and the mix it was collected for.
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

HERE = DATA / "field-logs-c"
MANIFEST = manifest(HERE)
REQUIRED = ("field-logs", "field-logs-b", "field-logs-holdout", "field-logs-holdout-2",
            "field-logs-holdout-3", "field-logs-holdout-4", "vllm-logs")


(test_entry_schema, test_file_present_and_utf8, test_ids_unique_and_every_file_listed,
 test_no_thread_shared_with_another_corpus, test_frozen_hashes_match) = frozen_corpus_tests(
    HERE, MANIFEST, REQUIRED, slug_id)


# entries whose quote comes from the excerpt's own post (the others quote a later post)
QUOTED_IN_EXCERPT = ("adaptthink-1", "recipes-183", "sgl-project.github.io-5", "torchtune-392",
                     "vllm-20682")


def test_quotes_name_the_source_thread_and_match_the_excerpt() -> None:
    check_quotes(HERE, MANIFEST, QUOTED_IN_EXCERPT)


def test_mix_of_outcomes_engines_and_causes() -> None:
    assert len(MANIFEST) >= 22
    benign = [e for e in MANIFEST if e["outcome"] != "failure"]
    assert len(benign) >= 5, "healthy starts beside the failures"
    causes = [e["established_cause"]["category"] for e in MANIFEST if e["established_cause"]]
    assert len(causes) >= 8
    assert len(set(causes)) >= 6, "established causes spread over the categories"
    firsts = [e["expected_categories"][0] for e in MANIFEST]
    assert max(firsts.count(c) for c in set(firsts)) <= len(firsts) // 3
    repos = Counter(e["repo"] for e in MANIFEST)
    assert repos["vllm-project/vllm"] >= 5
    assert repos["huggingface/text-generation-inference"] >= 2
    assert repos["NVIDIA/nccl"] + repos["NVIDIA/nccl-tests"] >= 2
    assert len(repos) >= 12
    texts = [(HERE / e["file"]).read_text(encoding="utf-8") for e in MANIFEST]
    elastic = sum("Root Cause (first observed failure)" in t
                  or "torch.distributed.elastic.multiprocessing" in t for t in texts)
    assert elastic >= 3, "torchrun / torch elastic agent output"
    quoted = sum(any(line.startswith("> ") for line in t.splitlines()) for t in texts)
    assert quoted >= 2, "logs with '> ' markers"
