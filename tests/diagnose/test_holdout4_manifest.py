"""The fourth held-out corpus (tests/data/field-logs-holdout-4) is well formed and frozen.

It checks the data, not ``diagnose``: the schema of every entry (the fields of
tests/data/field-logs/manifest.json), that every file is there, non-empty UTF-8 with LF line
ends, that no source thread is shared with any other corpus of this repository (field-logs,
field-logs-b, the three earlier held-out sets, vllm-logs: every GitHub thread URL their
manifests and READMEs name), that FROZEN.sha256 still matches every file, and that the set
keeps the mix it was collected for (issue 29): benign starts beside failures, the engines and
launchers besides vLLM, and logs with container/journald prefixes or quote markers.
"""

from __future__ import annotations

import re
from collections import Counter

from tests.diagnose.corpus_checks import (
    DATA,
    frozen_corpus_tests,
    manifest,
    slug_id,
)

HERE = DATA / "field-logs-holdout-4"
MANIFEST = manifest(HERE)
REQUIRED = ("field-logs", "field-logs-b", "field-logs-holdout", "field-logs-holdout-2",
            "field-logs-holdout-3", "vllm-logs")
# a line that starts with a container / journald / logger wall-clock prefix, or a quote marker
PREFIXED = re.compile(
    r"^(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[.,]\d+(?:Z|[+-]\d\d:\d\d)?[ \t]"  # RFC 3339 / ISO 8601
    r"|\S+ +\| "                                                          # compose service
    r"|[^\s:]+ \d\d? \d\d:\d\d:\d\d \S+ \S+\[\d+\]: "                     # journald / syslog
    r"|kserve-container "                                                 # container name
    r"|> )")                                                              # quote marker


(test_entry_schema, test_file_present_and_utf8, test_ids_unique_and_every_file_listed,
 test_no_thread_shared_with_another_corpus, test_frozen_hashes_match) = frozen_corpus_tests(
    HERE, MANIFEST, REQUIRED, slug_id)


def test_size_and_mix_of_outcomes_and_causes() -> None:
    assert len(MANIFEST) >= 64
    benign = [e for e in MANIFEST if e["outcome"] != "failure"]
    # the first blind pass (78 logs) held 7 benign starts, a tenth of it; the second pass added
    # only failures with an established cause, so the floor is the first pass's count
    assert len(benign) >= 7, "a held-out set needs healthy / progressing starts"
    assert {e["outcome"] for e in benign} == {"healthy", "progressing"}
    # the first pass held 7 established causes, the second blind pass (2026-12-07) added 31 logs
    # that all carry one (README "Second blind pass"); the floor keeps a later change from
    # quietly dropping any of them, and no cause category may dominate the established ones
    causes = [e["established_cause"]["category"] for e in MANIFEST if e["established_cause"]]
    assert len(causes) >= 38
    assert len(set(causes)) >= 10, "established causes spread over the categories"
    assert max(causes.count(c) for c in set(causes)) <= len(causes) // 3


def test_not_all_one_category() -> None:
    firsts = [e["expected_categories"][0] for e in MANIFEST]
    assert max(firsts.count(c) for c in set(firsts)) <= len(firsts) // 3


def test_engines_and_launchers_besides_vllm() -> None:
    repos = Counter(e["repo"] for e in MANIFEST)
    assert repos["vllm-project/vllm"] >= 20
    for repo in ("sgl-project/sglang", "huggingface/text-generation-inference",
                 "pytorch/pytorch", "ray-project/ray"):
        assert repos[repo] >= 2, repo
    assert repos["NVIDIA/nccl"] + repos["NVIDIA/nccl-tests"] >= 4
    assert len(repos) >= 15, "launchers that wrap the engines (GPUStack, KServe, llm-d, ...)"
    texts = [(HERE / e["file"]).read_text(encoding="utf-8") for e in MANIFEST]
    elastic = sum("Root Cause (first observed failure)" in t
                  or "torch/distributed/elastic/multiprocessing" in t for t in texts)
    assert elastic >= 4, "torchrun / torch elastic agent output"


def test_prefixed_and_quoted_logs_are_included() -> None:
    prefixed = [e["id"] for e in MANIFEST
                if any(PREFIXED.match(line) for line in
                       (HERE / e["file"]).read_text(encoding="utf-8").splitlines())]
    assert len(prefixed) >= 8, prefixed
