"""tests/data/field-logs-b: a second tuning corpus of real public logs (sources in its manifest).

Checked here, without running ``diagnose``:
* every entry has exactly the fields of the first field-log corpus (tests/data/field-logs), with
  values of the documented kinds; a category is one of ``sm120kit.diagnose.rules.base.CATEGORIES``
  (plus the benign ``healthy`` / ``progressing``);
* every log file exists, is non-empty UTF-8, and every .txt in the folder is in the manifest;
* no thread is shared with another corpus (field-logs*, vllm-logs), compared as
  ``https://github.com/owner/repo/issues/N``;
* the split rule with the held-out corpus holds: sha1(normalized source_url) is odd for every entry;
* the corpus keeps its size (floors below).

The scores of ``diagnose`` on this corpus come from tests/diagnose/test_field_corpus.py with
``SM120KIT_FIELD_LOGS=tests/data/field-logs-b/manifest.json``.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from sm120kit.diagnose.rules.base import CATEGORIES, FIELD_PHASES

DATA = Path(__file__).resolve().parents[1] / "data"
CORPUS = DATA / "field-logs-b"
MANIFEST = CORPUS / "manifest.json"
REFERENCE = DATA / "field-logs" / "manifest.json"
BENIGN = ("healthy", "progressing")
OUTCOMES = ("failure", *BENIGN)
QUOTE_BY = ("maintainer", "reporter", "contributor")
CAUSE_KEYS = {"summary", "category", "fix", "quote", "quote_url", "quote_by"}
CONFIG_KEYS = {"tp", "dcp", "mtp", "model"}
MIN_LOGS, MIN_CAUSE, MIN_BENIGN = 90, 48, 20  # floors: the corpus only grows
_THREAD = re.compile(r"^https://github\.com/([^/\s]+/[^/\s#?]+)/(?:issues|pull|discussions)/(\d+)")


def _entries(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data, list), f"{path}: a JSON list"
    return data


def normalize(url: str) -> str:
    """A thread URL as ``https://github.com/owner/repo/issues/N`` (no fragment, no query)."""
    m = _THREAD.match(url)
    return f"https://github.com/{m.group(1)}/issues/{m.group(2)}" if m else url.split("#")[0]


def in_our_half(url: str) -> bool:
    return int(hashlib.sha1(normalize(url).encode()).hexdigest(), 16) % 2 == 1


@pytest.fixture(scope="module")
def entries() -> list[dict[str, Any]]:
    return _entries(MANIFEST)


def _check_cause(eid: str, cause: dict[str, Any]) -> None:
    assert set(cause) == CAUSE_KEYS, (eid, sorted(cause))
    assert cause["category"] in CATEGORIES + BENIGN, (eid, cause["category"])
    assert cause["quote_by"] in QUOTE_BY, (eid, cause["quote_by"])
    for key in ("summary", "fix", "quote"):
        assert isinstance(cause[key], str) and cause[key].strip(), (eid, key)
    assert _THREAD.match(cause["quote_url"]), (eid, cause["quote_url"])


def _check_entry(e: dict[str, Any], keys: set[str]) -> None:
    eid = e.get("id")
    assert set(e) == keys, (eid, sorted(set(e) ^ keys))
    assert e["file"] == f"{eid}.txt", eid
    assert _THREAD.match(e["source_url"]) and e["source_url"] == normalize(e["source_url"]), eid
    assert e["repo"] == _THREAD.match(e["source_url"]).group(1), eid  # type: ignore[union-attr]
    assert isinstance(e["title"], str) and isinstance(e["excerpt"], str) and e["excerpt"], eid
    assert e["posted"] is None or re.fullmatch(r"\d{4}-\d\d-\d\d", e["posted"]), eid
    assert e["outcome"] in OUTCOMES, (eid, e["outcome"])
    assert e["phase"] is None or e["phase"] in FIELD_PHASES, (eid, e["phase"])
    assert isinstance(e["config"], dict) and CONFIG_KEYS <= set(e["config"]), eid
    cats = e["expected_categories"]
    assert cats and all(c in CATEGORIES + BENIGN for c in cats), (eid, cats)
    if e["outcome"] in BENIGN:
        assert cats[0] == e["outcome"], (eid, "a benign log expects its outcome first")
    if e["established_cause"] is not None:
        _check_cause(eid, e["established_cause"])
        assert e["established_cause"]["category"] in cats, (eid, "the cause is expected")
    assert isinstance(e["notes"], str) and e["notes"], eid


def test_schema_matches_the_first_corpus(entries: list[dict[str, Any]]) -> None:
    keys = set(_entries(REFERENCE)[0])
    for e in entries:
        _check_entry(e, keys)
    ids = [e["id"] for e in entries]
    assert len(ids) == len(set(ids)), "ids are unique"
    urls = [e["source_url"] for e in entries]
    assert len(urls) == len(set(urls)), "one log per thread"


def test_files_exist_and_are_text(entries: list[dict[str, Any]]) -> None:
    for e in entries:
        path = CORPUS / e["file"]
        assert path.is_file(), path
        text = path.read_bytes().decode("utf-8")  # raises on non-UTF-8
        assert text.strip(), f"{path} is empty"
        assert "\r\n" not in text, f"{path}: LF line ends"
    listed = {e["file"] for e in entries}
    present = {p.name for p in CORPUS.glob("*.txt")}
    assert present == listed, sorted(present ^ listed)


def _other_urls() -> set[str]:
    urls: set[str] = set()
    for mf in DATA.glob("field-logs*/manifest.json"):
        if mf.parent == CORPUS:
            continue
        for e in _entries(mf):
            urls.add(normalize(e["source_url"]))
            if e.get("established_cause"):
                urls.add(normalize(e["established_cause"]["quote_url"]))
    for e in _entries(DATA / "vllm-logs" / "manifest.json"):
        urls.add(normalize(e["source"]))
    return urls


def test_no_thread_shared_with_other_corpora(entries: list[dict[str, Any]]) -> None:
    others = _other_urls()
    assert len(others) > 100, "the other manifests were read"
    shared = sorted({normalize(e["source_url"]) for e in entries} & others)
    assert not shared, shared


def test_split_rule_with_the_held_out_corpus(entries: list[dict[str, Any]]) -> None:
    wrong = [e["source_url"] for e in entries if not in_our_half(e["source_url"])]
    assert not wrong, wrong
    # the rule splits: a URL in the other half is refused
    assert not all(in_our_half(f"https://github.com/vllm-project/vllm/issues/{n}") for n in range(8))


def test_corpus_size(entries: list[dict[str, Any]]) -> None:
    with_cause = [e for e in entries if e["established_cause"] is not None]
    benign = [e for e in entries if e["outcome"] in BENIGN]
    assert len(entries) >= MIN_LOGS, len(entries)
    assert len(with_cause) >= MIN_CAUSE, len(with_cause)
    assert len(benign) >= MIN_BENIGN, len(benign)
