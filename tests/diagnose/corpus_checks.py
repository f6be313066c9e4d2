"""Checks shared by the frozen corpora's manifest tests (field-logs-holdout-2, -3, -4,
field-logs-c, -d): the checks, and the five tests every such corpus has (``frozen_corpus_tests``).

Data only, never ``diagnose``: the entry schema (the fields of tests/data/field-logs/
manifest.json), files present, the folder listing, disjointness from every other corpus of this
repository (GitHub thread URLs, normalised), and the FROZEN.sha256 freeze.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"

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
THREAD = re.compile(r"https://github\.com/([^/\s]+/[^/\s]+)/(?:issues|pull|discussions)/(\d+)")


def manifest(here: Path) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads((here / "manifest.json").read_text(encoding="utf-8"))
    return data


def thread(url: str) -> str | None:
    """``https://github.com/o/r/issues/N`` for any issue / PR / discussion URL, else None."""
    m = THREAD.match(url)
    return f"https://github.com/{m[1]}/issues/{m[2]}" if m else None


def urls(obj: Any) -> set[str]:
    """Every GitHub thread URL anywhere in a manifest (source_url, source, quote_url, ...)."""
    if isinstance(obj, dict):
        return set().union(*(urls(v) for v in obj.values())) if obj else set()
    if isinstance(obj, list):
        return set().union(*(urls(v) for v in obj)) if obj else set()
    if isinstance(obj, str):
        return {t for t in (thread(u) for u in re.findall(r"https://\S+", obj)) if t}
    return set()


def check_entry(entry: dict[str, Any]) -> None:
    assert tuple(entry) == FIELDS
    assert entry["file"] == f"{entry['id']}.txt"
    assert entry["source_url"] == thread(entry["source_url"]), "normalised thread URL"
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
        assert thread(cause["quote_url"]) is not None
        assert cats[0] == cause["category"], "the established cause comes first"
        assert entry["outcome"] == "failure"


def check_file(path: Path) -> None:
    raw = path.read_bytes()
    assert raw.strip(), "empty excerpt"
    assert b"\r\n" not in raw
    raw.decode("utf-8")


def check_listing(here: Path, entries: list[dict[str, Any]]) -> None:
    ids = [e["id"] for e in entries]
    assert len(ids) == len(set(ids))
    assert {p.name for p in here.glob("*.txt")} == {e["file"] for e in entries}


def check_disjoint(here: Path, entries: list[dict[str, Any]],
                   required: tuple[str, ...] = ()) -> None:
    """No source thread shared with any other corpus under tests/data (manifests, READMEs)."""
    ours = {e["source_url"] for e in entries}
    others: set[str] = set()
    for path in DATA.rglob("*.json"):
        if path.parent != here:
            others |= urls(json.loads(path.read_text(encoding="utf-8")))
    for path in DATA.rglob("README.md"):
        if path.parent != here:
            others |= urls(path.read_text(encoding="utf-8"))
    assert others, "the other corpora were not found"
    for name in required:  # every corpus this set must be disjoint from was read
        assert (DATA / name).is_dir(), name
        assert any(p.parent == DATA / name for p in DATA.rglob("manifest.json")), name
    assert not ours & others, sorted(ours & others)


def check_frozen(here: Path, entries: list[dict[str, Any]]) -> None:
    frozen: dict[str, str] = {}
    for line in (here / "FROZEN.sha256").read_text(encoding="utf-8").splitlines():
        digest, name = line.split("  ", 1)
        frozen[name] = digest
    assert set(frozen) == {e["file"] for e in entries} | {"manifest.json", "README.md"}
    for name, digest in frozen.items():
        assert hashlib.sha256((here / name).read_bytes()).hexdigest() == digest, name


def slug_id(entry: dict[str, Any]) -> None:
    """The id is `<repo name>-<thread number>` (`vllm-<n>` for vllm-project/vllm)."""
    repo = entry["repo"]
    slug = "vllm" if repo == "vllm-project/vllm" else repo.split("/")[1].lower()
    assert entry["id"] == f"{slug}-{entry['source_url'].rsplit('/', 1)[1]}"


def frozen_corpus_tests(here: Path, entries: list[dict[str, Any]], required: tuple[str, ...] = (),
                        id_check: Callable[[dict[str, Any]], None] | None = None
                        ) -> tuple[Callable[..., None], ...]:
    """The five tests of a frozen corpus, for its test module to bind under their names:
    schema (and ``id_check``), files, listing, disjointness from ``required`` and the freeze."""
    ids = [e["id"] for e in entries]

    @pytest.mark.parametrize("entry", entries, ids=ids)
    def test_entry_schema(entry: dict[str, Any]) -> None:
        check_entry(entry)
        if id_check is not None:
            id_check(entry)

    @pytest.mark.parametrize("entry", entries, ids=ids)
    def test_file_present_and_utf8(entry: dict[str, Any]) -> None:
        check_file(here / entry["file"])

    def test_ids_unique_and_every_file_listed() -> None:
        check_listing(here, entries)

    def test_no_thread_shared_with_another_corpus() -> None:
        check_disjoint(here, entries, required)

    def test_frozen_hashes_match() -> None:
        check_frozen(here, entries)

    return (test_entry_schema, test_file_present_and_utf8, test_ids_unique_and_every_file_listed,
            test_no_thread_shared_with_another_corpus, test_frozen_hashes_match)


def check_quotes(here: Path, entries: list[dict[str, Any]], in_excerpt: tuple[str, ...],
                 strict: bool = False) -> None:
    """Every established cause quotes its own thread; the quotes of ``in_excerpt`` come from the
    excerpt's own post and are in its text; with ``strict`` every other quote (from a later
    post) is not in the excerpt (not silently copied from it)."""
    for entry in entries:
        cause = entry["established_cause"]
        if cause is not None:
            assert cause["quote_url"] == entry["source_url"], entry["id"]
    by_id = {e["id"]: e for e in entries}
    for name in in_excerpt:
        text = (here / by_id[name]["file"]).read_text(encoding="utf-8")
        assert by_id[name]["established_cause"]["quote"] in text, name
    others = [e for e in entries if e["established_cause"] and e["id"] not in in_excerpt]
    for entry in others if strict else ():
        text = (here / entry["file"]).read_text(encoding="utf-8")
        assert entry["established_cause"]["quote"] not in text, entry["id"]
