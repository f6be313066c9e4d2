"""`sm120kit diagnose` over the field corpus: real logs and excerpts people pasted in public
threads (tests/data/field-logs/, sources in its manifest.json), read exactly as posted.

Measured, per the corpus manifest:
* hit rate: the cause the thread established (``established_cause.category``) is among the top 3
  findings; printed per category; fails below 80 % of the known-cause cases;
* no false all-clear: a log whose outcome is ``failure`` never exits 0 (nor 2: there is text);
* healthy / progressing logs exit 0 and the verdict says which.

``SM120KIT_FIELD_LOGS`` may name other manifest.json files (os.pathsep-separated) to run the
same measurement on a different corpus. The rules are general: none of them knows these files.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from sm120kit.diagnose.engine import diagnose
from sm120kit.errors import UserError

DEFAULT = Path(__file__).resolve().parents[1] / "data" / "field-logs" / "manifest.json"
BENIGN = ("progressing", "healthy")
TARGET = 0.80


def _manifests() -> list[Path]:
    env = os.environ.get("SM120KIT_FIELD_LOGS")
    return [Path(p) for p in env.split(os.pathsep) if p] if env else [DEFAULT]


def _entries() -> list[dict[str, Any]]:
    out = []
    for mf in _manifests():
        assert mf.is_file(), f"field-log manifest missing: {mf}"
        for e in json.loads(mf.read_text()):
            e = dict(e)
            e["_path"] = mf.parent / e["file"]
            out.append(e)
    return out


def _run(e: dict[str, Any]) -> dict[str, Any]:
    try:
        res = diagnose([e["_path"]])
    except UserError as exc:
        return {"exit": 2, "top": [], "verdict": f"error: {exc.message}"}
    return {"exit": res.exit_code, "top": [f.category for f in res.findings[:3]],
            "verdict": res.verdict, "state": res.state}


@pytest.fixture(scope="module")
def results() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    entries = _entries()
    assert len(entries) >= 40, "the field corpus has at least 40 logs"
    return [(e, _run(e)) for e in entries]


def _cause(e: dict[str, Any]) -> str | None:
    c = (e.get("established_cause") or {}).get("category")
    return c if c and c not in BENIGN else None


def test_hit_rate_per_category(results: list[tuple[dict[str, Any], dict[str, Any]]],
                               capsys: pytest.CaptureFixture[str]) -> None:
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    rows = []
    for e, r in results:
        cause = _cause(e)
        if cause is None:
            continue
        hit = cause in r["top"]
        per[cause][0] += hit
        per[cause][1] += 1
        rows.append(f"  {'HIT ' if hit else 'MISS'} {e['id']:<40} expected {cause:<22} got {r['top']}")
    hits = sum(h for h, _n in per.values())
    total = sum(n for _h, n in per.values())
    with capsys.disabled():
        print(f"\nfield corpus: {len(results)} logs, {total} with an established cause")
        print("\n".join(rows))
        for cat in sorted(per):
            h, n = per[cat]
            print(f"  {cat:<24} {h}/{n}")
        print(f"  top-3 hit rate: {hits}/{total} = {hits / max(total, 1):.0%} (target {TARGET:.0%})")
    assert total >= 15
    assert hits / total >= TARGET, f"top-3 hit rate {hits}/{total} below {TARGET:.0%}"


def test_no_false_all_clear(results: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    bad = [(e["id"], r["exit"], r["verdict"][:120]) for e, r in results
           if e["outcome"] == "failure" and r["exit"] != 1]
    assert not bad, f"logs that record a failure answered without a finding: {bad}"


def test_benign_logs_exit_zero_and_say_which(
        results: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """Healthy and slow-but-progressing runs are answered 0 with a verdict that says which."""
    bad = []
    for e, r in results:
        if e["outcome"] not in BENIGN:
            continue
        if r["exit"] != 0 or not r["verdict"].startswith(("healthy", "progressing",
                                                         "no failure recorded")):
            bad.append((e["id"], e["outcome"], r["exit"], r["verdict"][:120]))
    assert not bad, bad
    prog = [r for e, r in results if e["outcome"] == "progressing"]
    assert prog and all(r["verdict"].startswith("progressing") for r in prog), prog


def test_every_corpus_file_is_text_evidence(
        results: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """Exit 2 is for empty or binary input only: no pasted excerpt is refused."""
    refused = [e["id"] for e, r in results if r["exit"] == 2]
    assert not refused, refused
