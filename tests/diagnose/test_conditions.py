"""Catalogue conditions (``[entry.when]``: with, with_any, without, phase, stalled, topology):
"X beside Y" is data, evaluated on the same input, with the partner's line as evidence.

Lines are real wordings: the stale expert count and the OOM at weight load are the lines of
tests/data/field-logs/hermia-glm52-bugs-oom-num-experts.txt (hermia-ai/glm-5.2-sm120-stock-vllm
docs/BUGS.md); the NCCL and topology lines are NCCL's INFO wording and `nvidia-smi topo -m`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose import catalogue as C
from sm120kit.diagnose.engine import diagnose

DATA = Path(__file__).resolve().parents[1] / "data"
EXPERTS = "(EngineCore_DP0 pid=10) INFO 01-01 00:00:01 [layer.py:1] [EP Rank 0/4] ... Local/global number of experts: 64/256"
OOM = ("(EngineCore_DP0 pid=10) ERROR 01-01 00:00:09 [core.py:1] torch.OutOfMemoryError: CUDA out of "
       "memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 94.97 GiB")
NCCL_INIT = "host:10:10 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM"
TOPO = ["        GPU0    GPU1    CPU Affinity", "GPU0     X      PHB     0-63", "GPU1    PHB      X      0-63"]


def _write(tmp_path: Path, rows: list[str]) -> Path:
    p = tmp_path / "x.log"
    p.write_text("\n".join(rows) + "\n")
    return p


def _mine(tmp_path: Path, when: str) -> Path:
    d = tmp_path / "cat"
    d.mkdir(exist_ok=True)
    (d / "mine.toml").write_text(f'''
[[entry]]
id = "mine"
category = "p2p-transport"
summary = "my pair: {{line}}"
confidence = 0.7
patterns = ['via P2P/CUMEM']
when = {when}
fix = "f"
sources = ["https://example.org/runbook"]
''')
    return d


def test_a_pair_entry_needs_its_partner_and_cites_it(tmp_path: Path) -> None:
    both = diagnose([_write(tmp_path, [EXPERTS, OOM])])
    f = next(f for f in both.findings if f.category == "checkpoint-config")
    assert f.rule == "stale-num-experts" and f.confidence == pytest.approx(0.92)
    assert "64/256" in f.summary and any("out of memory" in e.text for e in f.evidence)
    assert both.findings[0].category == "checkpoint-config"  # the pair over the OOM alone
    alone = diagnose([_write(tmp_path, [EXPERTS])])
    g = next(f for f in alone.findings if f.category == "checkpoint-config")
    assert g.rule == "moe-experts-count" and g.confidence == pytest.approx(0.55)


@pytest.mark.parametrize(("when", "rows", "named"), [
    ('{ with = ["cuda-oom"] }', [NCCL_INIT, OOM], True),
    ('{ with = ["cuda-oom"] }', [NCCL_INIT], False),
    ('{ without = ["cuda-oom"] }', [NCCL_INIT, OOM], False),
    ('{ topology = "pcie" }', [*TOPO, NCCL_INIT], True),
    ('{ topology = "nvlink" }', [*TOPO, NCCL_INIT], False),
    ('{ phase = ["nccl-init"] }', [NCCL_INIT], True),
    ('{ phase = ["serving"] }', [NCCL_INIT], False),
    ('{ stalled = false }', [NCCL_INIT], True),
    ('{ stalled = true }', [NCCL_INIT], False),
])
def test_each_condition_decides(tmp_path: Path, when: str, rows: list[str], named: bool) -> None:
    res = diagnose([_write(tmp_path, rows)], catalogue=[_mine(tmp_path, when)])
    assert ("mine" in {f.rule for f in res.findings}) is named, (when, res.findings)


@pytest.mark.parametrize(("when", "key"), [
    ('{ colour = 1 }', "'when.colour'"),
    ('{ with = "cuda-oom" }', "'when.with'"),
    ('{ phase = ["lunch"] }', "'when.phase'"),
    ('{ stalled = "yes" }', "'when.stalled'"),
    ('{ topology = "infiniband" }', "'when.topology'"),
    ('"stall"', "'when'"),
])
def test_a_malformed_condition_is_one_line_naming_the_key(tmp_path: Path, when: str, key: str) -> None:
    d = _mine(tmp_path, when)
    with pytest.raises(C.CatalogueError) as exc:
        C.load([d], environ={})
    assert key in str(exc.value) and "mine.toml" in str(exc.value), str(exc.value)


RULE_DIR = Path(C.__file__).resolve().parents[1] / "rules"
_NOT_YET = {"base.py"}


def test_rules_read_typed_facts_not_the_analysis() -> None:
    """Rules read ``ctx.facts`` (frozen dataclasses built once), not the analysis' facade."""
    readers = sorted(p.name for p in RULE_DIR.glob("*.py")
                     if p.name not in _NOT_YET and "ctx.logs" in p.read_text())
    assert readers == []


def test_log_facts_are_frozen(tmp_path: Path) -> None:
    import dataclasses

    from sm120kit.diagnose.rules.base import RuleContext
    from sm120kit.evidence.logs.analyze import LogAnalysis

    an = LogAnalysis()
    an.feed_lines("x.log", [EXPERTS, OOM])
    an.finish()
    f = RuleContext(logs=an).facts
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.failures = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        f.config["tp"] = 2  # type: ignore[index]
    assert f.failures and "error" in f.phases.first_seen


def test_failure_words_are_catalogue_cues(tmp_path: Path) -> None:
    """What makes a line a recorded failure is cues.toml data: without cues an analysis reads no
    words (levels and tracebacks still count); a user catalogue can replace a shipped cue."""
    from sm120kit.evidence.logs.analyze import LogAnalysis

    line = "Worker VllmWorkerProcess pid 1234 died, exit code: -6"  # vllm#6042's wording, no level
    bare = LogAnalysis()
    bare.feed_lines("x.log", [line])
    assert bare.fails.failures == []
    cat = C.load(environ={})
    read = LogAnalysis(scanner=cat.scan_line, cues=cat.prose_cues())
    read.feed_lines("x.log", [line])
    assert [e.line for e in read.fails.failures] == [1]
    d = tmp_path / "cat"
    d.mkdir()
    (d / "mine.toml").write_text("[[cue]]\nid = 'failure-words'\nlines = 'all'\ngate = ['never']\n"
                                 "pattern = 'never matches this'\nsources = ['our runbook']\n")
    mine = C.load([d], environ={})
    other = LogAnalysis(scanner=mine.scan_line, cues=mine.prose_cues())
    other.feed_lines("x.log", [line])
    assert other.fails.failures == []
