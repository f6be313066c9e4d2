"""Reading what people paste (issue 12, item 3): the normalizer, described evidence, several
launches in one paste, binary input and the JSON envelope on errors.

Inputs are the field corpus's real excerpts (tests/data/field-logs/, sources in its manifest) or
real lines from it re-wrapped the way a browser or a thread index wraps them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sm120kit.diagnose.engine import diagnose
from sm120kit.errors import UserError
from sm120kit.evidence.logs.analyze import LogAnalysis
from sm120kit.evidence.logs.described import DescribedScan
from sm120kit.evidence.logs.paste import PasteProfile, PasteReader

FIELD = Path(__file__).resolve().parents[1] / "data" / "field-logs"


def _field(name: str) -> Path:
    p = FIELD / name
    assert p.is_file(), p
    return p


def _wrap(line: str, width: int) -> list[str]:
    return [line[i:i + width] for i in range(0, len(line), width)]


def _analyse(path: Path) -> LogAnalysis:
    an = LogAnalysis()
    with open(path, "rb") as f:
        an.feed_stream(path.name, f)
    an.finish()
    return an


def test_watchdog_record_wrapped_over_three_lines_is_one_record(tmp_path: Path) -> None:
    """A real torch watchdog line (llamafactory#7396), wrapped at 80 columns inside a fence, as
    a browser copy gives it: one record with its SeqNum, op, timeout and run time."""
    src = _field("llamafactory-7396.txt").read_text().splitlines()[0]
    assert "Watchdog caught collective operation timeout" in src and len(src) > 200
    parts = _wrap(src, 80)
    assert len(parts) >= 3
    p = tmp_path / "paste.md"
    p.write_text("The job hangs:\n\n```\n" + "\n".join(parts) + "\n```\n")
    an = _analyse(p)
    assert len(an.incidents.watchdog) == 1
    rec = an.incidents.watchdog[0][0]
    assert (rec.rank, rec.seq, rec.op, rec.timeout_ms) == (0, 1580, "ALLREDUCE", 600000)
    assert rec.ran_ms == 600060
    assert an.paste["paste.md"]["joined_lines"] == len(parts) - 1


def test_markdown_and_ansi_remnants_are_undone() -> None:
    prof = PasteProfile.detect(b"```\n[1;36m(EngineCore_DP0 pid=1880) [0;0m ERROR x\n> quoted "
                               b"line\n- bullet \\_text\nE       AssertionError: y\n", True)
    assert prof.markdown and prof.remnants and prof.pytest
    rd = PasteReader(prof)
    rows = list(rd.lines(enumerate(["```", "[1;36m(EngineCore_DP0 pid=1880) [0;0m ERROR x",
                                    "> quoted line", "- bullet \\_text",
                                    "E       AssertionError: y", "```"], 1)))
    texts = [t for _n, t in rows]
    assert texts[0].startswith("(EngineCore_DP0 pid=1880)") and "[0;0m" not in texts[0]
    assert "quoted line" in texts and "bullet _text" in texts
    assert "AssertionError: y" in texts
    assert rd.fenced == 2


def test_caret_notation_and_compose_prefixes_are_attributed() -> None:
    an = _analyse(_field("vllm-33155.txt"))  # ^[[0;36m(EngineCore_DP0 pid=70073)^[[0;0m
    assert "pid 70073" in an.proc_table.procs and an.proc_table.procs["pid 70073"].name == "EngineCore_DP0"
    an = _analyse(_field("vllm-6042.txt"))  # "  | " log-viewer prefix
    recs = [r for r, _e, _k in an.incidents.watchdog]
    assert any(r.seq == 2 and r.last_enqueued == 2 and r.last_completed == 1 for r in recs)
    assert any(d.exit_code == -6 for d, _e, _k in an.incidents.deaths)


def test_topology_table_and_described_gpu_state_are_evidence() -> None:
    d = DescribedScan()
    for i, line in enumerate(_field("rtx6kpro-15-topo.txt").read_text().splitlines(), 1):
        d.feed("topo", i, line)
    assert d.pcie_only() and d.link_kinds() == ["PHB"]
    d2 = DescribedScan()
    for i, line in enumerate(_field("rtx6kpro-15-workaround.txt").read_text().splitlines(), 1):
        d2.feed("w", i, line)
    spin = d2.spinning()
    assert spin and spin[0].util == 100 and spin[0].power_w == 120
    res = diagnose([_field("rtx6kpro-15-topo.txt")])
    assert res.exit_code == 1 and res.findings[0].category == "p2p-transport"
    assert any(e.text.startswith("GPU0") for e in res.findings[0].evidence)


def test_prose_with_quoted_lines_is_not_refused_and_not_an_all_clear() -> None:
    res = diagnose([_field("vllm-39774.txt")])  # the symptom is described, no log line
    assert res.exit_code == 1 and res.findings
    res = diagnose([_field("hermia-glm52-readme-cold-start.txt")])  # "not a hang": cold start
    assert res.exit_code == 0 and res.verdict.startswith("progressing")


def test_two_runs_in_one_paste_are_never_compared(tmp_path: Path) -> None:
    """Two real watchdog lines from two different reports (vLLM 0.3.1 after 7 days; another
    Ray deployment) pasted together: their SeqNums are unrelated, no rank is 'lagging'."""
    a = _field("vllm-3071.txt").read_text()
    b = _field("vllm-2734.txt").read_text()
    p = tmp_path / "two.md"
    p.write_text(a + "\n\nSame here on another box:\n\n" + b)
    res = diagnose([p])
    assert res.exit_code == 1
    assert not any(f.rule == "watchdog-desync" for f in res.findings), \
        [f.summary for f in res.findings]
    # and two launches split by their banners keep separate timelines
    log = tmp_path / "relaunch.log"
    banner = _field("vllm-49878.txt").read_text().splitlines()
    body = [ln for ln in banner if "(APIServer pid=1)" in ln]
    log.write_text("\n".join(body + ["(APIServer pid=1) INFO 07-26 12:45:00 [api_server.py:1] "
                                     "Starting vLLM API server 0 on http://0.0.0.0:8000"]
                             + body) + "\n")
    an = _analyse(log)
    assert an.runs.run == 1 and an.runs.earlier_runs[0].stage == "api-server-ready"
    assert an.runs.global_tracker.stage == "engine-init"


@pytest.mark.parametrize("data", [b"", b"\x00\x01\x02\x03" * 4000])
def test_exit_2_only_without_text_and_json_still_prints_the_envelope(tmp_path: Path,
                                                                     data: bytes) -> None:
    p = tmp_path / "input.log"
    p.write_bytes(data)
    with pytest.raises(UserError, match="no text evidence"):
        diagnose([p])
    r = subprocess.run([sys.executable, "-m", "sm120kit", "diagnose", "--json", str(p)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    env = json.loads(r.stdout)
    assert env["tool"] == "sm120kit" and env["status"] == "error" and env["error"]
    assert r.stderr.startswith("error: ")


def test_evidence_is_shortened_at_words_in_text_and_whole_in_json(tmp_path: Path) -> None:
    from sm120kit.report import clip_words

    long = "x " * 10 + "RuntimeError: Engine core initialization failed " + "y " * 300 + "the end"
    short = clip_words(long, 120)
    assert len(short) <= 124 and " … " in short and short.endswith("the end")
    assert all(w in long.split() for w in short.replace(" … ", " ").split())
    p = _field("vllm-37250-1.txt")
    r = subprocess.run([sys.executable, "-m", "sm120kit", "diagnose", "--json", str(p)],
                       capture_output=True, text=True, timeout=60)
    env = json.loads(r.stdout)
    texts = [e["text"] for f in env["findings"] for e in f["evidence"]]
    assert any(len(t) > 1000 and not t.endswith("...") for t in texts)
