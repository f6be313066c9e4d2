"""The third held-out corpus (tests/data/field-logs-holdout-3) is well formed and frozen.

It checks the data, not ``diagnose``: the schema of every entry (the fields of
tests/data/field-logs/manifest.json), that every file is there and non-empty, that no source
thread is shared with any other corpus of this repository (field-logs, field-logs-b, both retired
held-out sets, vllm-logs: every GitHub thread URL their manifests and READMEs name), and that
FROZEN.sha256 still matches every file, so the set cannot change without that file (and the
commit that changes it) saying so. No URL hash split: this set was collected alone.
"""

from __future__ import annotations

from typing import Any

from tests.diagnose.corpus_checks import (
    DATA,
    frozen_corpus_tests,
    manifest,
)

HERE = DATA / "field-logs-holdout-3"
MANIFEST = manifest(HERE)
REQUIRED = ("field-logs", "field-logs-b", "field-logs-holdout", "field-logs-holdout-2",
            "vllm-logs")


def _id_names_its_thread(entry: dict[str, Any]) -> None:
    assert entry["id"].endswith(f"-{entry['source_url'].rsplit('/', 1)[1]}")
    # `vllm-<n>` names only vllm-project/vllm threads (forks and other repos named vllm differ)
    assert entry["id"].startswith("vllm-") == (entry["repo"] == "vllm-project/vllm")


(test_entry_schema, test_file_present_and_utf8, test_ids_unique_and_every_file_listed,
 test_no_thread_shared_with_another_corpus, test_frozen_hashes_match) = frozen_corpus_tests(
    HERE, MANIFEST, REQUIRED, _id_names_its_thread)


def test_mix_of_outcomes_and_causes() -> None:
    benign = sum(e["outcome"] != "failure" for e in MANIFEST)
    assert benign >= len(MANIFEST) // 10, "a held-out set needs healthy / progressing starts"
    assert len(MANIFEST) >= 40
    # the target was 20 established causes; the frozen set holds 12 (README "Shortfall"); the
    # floor keeps a later change from quietly dropping any of them
    assert sum(e["established_cause"] is not None for e in MANIFEST) >= 12


def test_not_all_one_category() -> None:
    firsts = [e["expected_categories"][0] for e in MANIFEST]
    assert max(firsts.count(c) for c in set(firsts)) <= len(firsts) // 3
