"""The shared real logs through ``diagnose``: versions/config/outcome against manifest.json.

Where an excerpt does not contain a value (the manifest took it from elsewhere in the source
file), the extractor must not invent one; ``EXPECT_FOUND`` lists what each excerpt does print.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sm120kit.diagnose.engine import diagnose

from .conftest import manifest

MANIFEST = manifest()
# fields each excerpt prints itself (checked by reading the excerpts)
EXPECT_FOUND: dict[str, set[str]] = {
    "log01": {"vllm", "tp", "dcp", "pp", "dp", "mtp", "attention_backend", "kv_cache_dtype", "model"},
    "log02": {"tp", "dcp", "attention_backend"},
    "log03": {"vllm", "tp", "dcp", "pp", "dp", "mtp", "attention_backend", "kv_cache_dtype", "model"},
    "log05": {"vllm", "tp", "dcp", "pp", "dp", "mtp", "attention_backend", "kv_cache_dtype", "model"},
    "log06": {"vllm", "tp", "dcp", "pp", "dp", "attention_backend", "kv_cache_dtype", "model"},
    "log07": {"vllm", "tp", "dcp", "pp", "dp", "kv_cache_dtype", "model"},
    "log09": {"tp"},
    "log10": {"tp"},
    "log11": {"vllm", "tp", "pp", "attention_backend", "kv_cache_dtype", "model"},
    "log12": {"vllm", "tp"},
}


def _agrees(key: str, got: Any, want: Any) -> bool:
    if want is None:
        return got is None or key in ("pp", "dp", "dcp", "mtp")  # defaults the log prints
    if key in ("kv_cache_dtype", "model"):
        return str(want).startswith(str(got))
    return bool(got == want)


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["id"] for e in MANIFEST])
def test_log_facts(entry: dict[str, Any], log_dir: Path) -> None:
    res = diagnose([log_dir / f"{entry['id']}.txt"])
    got = {"vllm": res.versions.get("vllm"), **{k: res.config.get(k) for k in entry["config"]}}
    want = {"vllm": entry["vllm_version"], **entry["config"]}
    for key in EXPECT_FOUND.get(entry["id"], set()):
        assert got[key] is not None, f"{key} not extracted"
    for key, value in got.items():
        if value is not None:
            assert _agrees(key, value, want.get(key)), (key, value, want.get(key))
    # outcome: only the crashed log has findings; healthy startups exit 0
    if entry["outcome"] == "crashed":
        assert res.exit_code == 1
        assert res.findings[0].category in ("rank-crashed", "config-invalid")
        assert any(r["exception"] for r in res.ranks)
    else:
        assert res.findings == [], [f.summary for f in res.findings]
        assert res.exit_code == 0
    assert [p["phase"] for p in res.phases] == entry["phases_seen"]


def test_two_sides_of_one_failed_run(log_dir: Path) -> None:
    """log09 (worker node, crashed) + log13 (head node, still loading): the dead rank is rank 1."""
    res = diagnose([log_dir / "log13.txt", log_dir / "log09.txt"])
    # first-dead-rank, or the cause it was folded into (sm120kit.diagnose.rules.fold)
    dead = next(f for f in res.findings if "failed first" in f.summary)
    assert dead.ranks == [1] and "Worker_TP1" in dead.summary
    assert any(e.source == "log09.txt" for e in dead.evidence)
    by_rank = {r["rank"]: r for r in res.ranks if r["rank"] is not None}
    assert by_rank[0]["phase"] == "model-load" and by_rank[1]["exception"].startswith("ValueError")


def test_nccl_transport_and_ranks_from_nccl_lines(log_dir: Path) -> None:
    res = diagnose([log_dir / "log08.txt"])
    assert res.stalls["nccl_transports"] and all(
        t == ["NET/IB"] for t in res.stalls["nccl_transports"].values())
    assert res.stalls["nccl_env"].get("NCCL_IB_ADDR_FAMILY") == "AF_INET"
