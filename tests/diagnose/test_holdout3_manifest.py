"""The third held-out corpus (tests/data/field-logs-holdout-3) is well formed and frozen.

It checks the data, not ``diagnose``: the schema of every entry (the fields of
tests/data/field-logs/manifest.json), that every file is there and non-empty, that no source
thread is shared with any other corpus of this repository (field-logs, field-logs-b, both retired
held-out sets, vllm-logs: every GitHub thread URL their manifests and READMEs name), and that
FROZEN.sha256 still matches every file, so the set cannot change without that file (and the
commit that changes it) saying so. No URL hash split: this set was collected alone.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
HERE = DATA / "field-logs-holdout-3"
MANIFEST: list[dict[str, Any]] = json.loads((HERE / "manifest.json").read_text(encoding="utf-8"))

FIELDS = ("id", "file", "source_url", "repo", "title", "posted", "excerpt", "hardware",
          "vllm_version", "config", "outcome", "phase", "established_cause",
          "expected_categories", "notes")
CAUSE_FIELDS = ("summary", "category", "fix", "quote", "quote_url", "quote_by")
# the fixed category list of tests/data/field-logs/README.md (plus dcp-not-engaged, which
# diagnose also names); `healthy` / `progressing` are what a benign log should get
CATEGORIES = frozenset((
    "p2p-transport", "autotune-deadlock", "dcp-unsupported", "config-invalid",
    "library-version", "checkpoint-config", "kv-cache-insufficient", "out-of-memory",
    "cold-start-timeout", "serving-stall", "cudagraph-capture", "collective-desync",
    "kernel-hang", "rank-crashed", "shared-memory", "timeout-too-short", "interposer",
    "dcp-warmup", "dcp-not-engaged", "unknown", "healthy", "progressing"))
OUTCOMES = frozenset(("failure", "healthy", "progressing"))
PHASES = frozenset(("startup", "weight-load", "compile", "autotune", "warmup", "capture",
                    "serving"))
REQUIRED = ("field-logs", "field-logs-b", "field-logs-holdout", "field-logs-holdout-2",
            "vllm-logs")
THREAD = re.compile(r"https://github\.com/([^/\s]+/[^/\s]+)/(?:issues|pull|discussions)/(\d+)")


def _thread(url: str) -> str | None:
    """``https://github.com/o/r/issues/N`` for any issue / PR / discussion URL, else None."""
    m = THREAD.match(url)
    return f"https://github.com/{m[1]}/issues/{m[2]}" if m else None


def _urls(obj: Any) -> set[str]:
    """Every GitHub thread URL anywhere in a manifest (source_url, source, quote_url, ...)."""
    if isinstance(obj, dict):
        return set().union(*(_urls(v) for v in obj.values())) if obj else set()
    if isinstance(obj, list):
        return set().union(*(_urls(v) for v in obj)) if obj else set()
    if isinstance(obj, str):
        return {t for t in (_thread(u) for u in re.findall(r"https://\S+", obj)) if t}
    return set()


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["id"] for e in MANIFEST])
def test_entry_schema(entry: dict[str, Any]) -> None:
    assert tuple(entry) == FIELDS
    assert entry["file"] == f"{entry['id']}.txt"
    number = entry["source_url"].rsplit("/", 1)[1]
    assert entry["id"].endswith(f"-{number}")
    # `vllm-<n>` names only vllm-project/vllm threads (forks and other repos named vllm differ)
    assert entry["id"].startswith("vllm-") == (entry["repo"] == "vllm-project/vllm")
    assert entry["source_url"] == _thread(entry["source_url"]), "normalised thread URL"
    assert entry["source_url"].split("/")[3:5] == entry["repo"].split("/")
    assert isinstance(entry["title"], str) and entry["title"]
    assert isinstance(entry["excerpt"], str) and entry["excerpt"]
    assert isinstance(entry["config"], dict)
    assert entry["outcome"] in OUTCOMES
    assert entry["phase"] is None or entry["phase"] in PHASES
    cats = entry["expected_categories"]
    assert cats and set(cats) <= CATEGORIES, cats
    if entry["outcome"] != "failure":
        assert cats[0] == entry["outcome"], "a benign log expects its own outcome first"
    cause = entry["established_cause"]
    if cause is not None:
        assert tuple(cause) == CAUSE_FIELDS
        assert cause["category"] in CATEGORIES - {"healthy", "progressing", "unknown"}
        assert cause["quote_by"] in ("maintainer", "reporter", "contributor")
        assert cause["quote"].strip() and cause["summary"] and cause["fix"]
        assert _thread(cause["quote_url"]) is not None
        assert cats[0] == cause["category"], "the established cause comes first"
        assert entry["outcome"] == "failure"


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["id"] for e in MANIFEST])
def test_file_present_and_utf8(entry: dict[str, Any]) -> None:
    raw = (HERE / entry["file"]).read_bytes()
    assert raw.strip(), "empty excerpt"
    assert b"\r\n" not in raw
    raw.decode("utf-8")


def test_ids_unique_and_every_file_listed() -> None:
    ids = [e["id"] for e in MANIFEST]
    assert len(ids) == len(set(ids))
    on_disk = {p.name for p in HERE.glob("*.txt")}
    assert on_disk == {e["file"] for e in MANIFEST}


def test_no_thread_shared_with_another_corpus() -> None:
    ours = {e["source_url"] for e in MANIFEST}
    others: set[str] = set()
    for path in DATA.rglob("*.json"):
        if path.parent != HERE:
            others |= _urls(json.loads(path.read_text(encoding="utf-8")))
    for path in DATA.rglob("README.md"):
        if path.parent != HERE:
            others |= _urls(path.read_text(encoding="utf-8"))
    assert others, "the other corpora were not found"
    for name in REQUIRED:  # every corpus this set must be disjoint from was read
        assert (DATA / name).is_dir(), name
        assert any(p.parent == DATA / name for p in DATA.rglob("manifest.json")), name
    assert not ours & others, sorted(ours & others)


def test_frozen_hashes_match() -> None:
    frozen: dict[str, str] = {}
    for line in (HERE / "FROZEN.sha256").read_text(encoding="utf-8").splitlines():
        digest, name = line.split("  ", 1)
        frozen[name] = digest
    want = {e["file"] for e in MANIFEST} | {"manifest.json", "README.md"}
    assert set(frozen) == want
    for name, digest in frozen.items():
        assert hashlib.sha256((HERE / name).read_bytes()).hexdigest() == digest, name


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
