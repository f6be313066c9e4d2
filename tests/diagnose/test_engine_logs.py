"""Every engine's log is read (issue 29 item 4): real SGLang, TGI, torchrun, nccl-tests and Ray
excerpts (tests/data/engine-logs, sources in its manifest) are never refused, the engine is
named, and collectors' line envelopes (journald, Kubernetes CRI files, kubectl --prefix, quote
markers) around a real vLLM log change nothing in the verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sm120kit import cli
from sm120kit.diagnose.engine import diagnose
from sm120kit.evidence.logs.elastic import ElasticSummary
from sm120kit.evidence.logs.records import Evidence

DATA = Path(__file__).resolve().parents[1] / "data"
ENGINE_LOGS = DATA / "engine-logs"


def _manifest() -> list[dict[str, Any]]:
    return list(json.loads((ENGINE_LOGS / "manifest.json").read_text()))


@pytest.mark.parametrize("e", _manifest(), ids=lambda e: e["id"])
def test_engine_log_read_not_refused_engine_named(e: dict[str, Any]) -> None:
    res = diagnose([ENGINE_LOGS / e["file"]])  # a UserError (exit 2) fails the test
    assert res.engine == e["engine"], (res.engine, res.verdict)
    assert res.state == e["expected"]["state"], res.verdict
    if e["expected"]["state"] == "failed":
        assert res.exit_code == 1 and res.findings


def test_engine_logs_corpus_is_disjoint_and_sourced() -> None:
    from tests.diagnose.corpus_checks import thread, urls

    mine = {thread(e["source_url"]) for e in _manifest()}
    assert None not in mine and len(mine) == len(_manifest())
    others = set().union(*(urls(json.loads(m.read_text())) for m in DATA.glob("*/manifest.json")
                           if m.parent != ENGINE_LOGS))
    assert not mine & others, mine & others
    for e in _manifest():
        assert (ENGINE_LOGS / e["file"]).read_text().strip()


def test_torchrun_root_cause_names_rank_exitcode_and_signal() -> None:
    res = diagnose([ENGINE_LOGS / "torchrun-minigpt4-237.txt"])
    top = res.findings[0]
    assert top.rule == "torchrun-failure" and top.ranks == [0]
    assert "rank 0" in top.summary and "exited with code 1" in top.summary
    assert top.evidence[0].text.strip() == "[0]:"  # the Root Cause entry, not rank 1's
    res = diagnose([ENGINE_LOGS / "torchrun-robomamba-10.txt"])
    top = next(f for f in res.findings if f.rule == "torchrun-failure")
    assert "local rank 5" in top.summary and "SIGKILL" in top.summary
    assert not any(f.rule == "first-dead-rank" and f.role != "effect" for f in res.findings)


def test_elastic_summary_facts() -> None:
    es = ElasticSummary()
    lines = (ENGINE_LOGS / "torchrun-minigpt4-237.txt").read_text().splitlines()
    for i, ln in enumerate(lines, 1):
        es.feed(ln, Evidence("x", i, ln))
    assert [(f.root, f.rank, f.local_rank, f.exitcode, f.pid) for f in es.failures] == [
        (False, 1, 1, 1, 78971), (True, 0, 0, 1, 78970)]
    assert es.root is not None and es.root.host == "n136-117-136.byted.org"
    assert es.root.error_file is None and es.root.signal is None
    # an entry whose exit code line is missing: the signal its traceback field names
    es = ElasticSummary()
    for i, ln in enumerate(("Root Cause (first observed failure):", "[0]:",
                            "  rank      : 0 (local_rank: 0)",
                            "  traceback : Signal 9 (SIGKILL) received by PID 8158"), 1):
        es.feed(ln, Evidence("x", i, ln))
    assert es.root is not None and (es.root.rank, es.root.signal) == (0, 9)


WRAPS = {
    "journald": lambda i, ln: f"May 16 13:{i // 60 % 60:02d}:{i % 60:02d} gpu-node-1 vllm[4242]: {ln}",
    "cri": lambda i, ln: f"2025-05-16T13:12:{i % 60:02d}.645123456Z stdout F {ln}",
    "kubectl-prefix": lambda i, ln: f"[pod/vllm-0/vllm] {ln}",
    "quoted": lambda i, ln: f"> {ln}",
    "quoted-twice": lambda i, ln: f">> {ln}",
}


@pytest.mark.parametrize("log", ["vllm-logs/log11.txt", "vllm-logs/log09.txt",
                                 "field-logs/vllm-14452-1.txt"])
@pytest.mark.parametrize("wrap", sorted(WRAPS))
def test_collector_envelopes_change_nothing(tmp_path: Path, log: str, wrap: str) -> None:
    """A real vLLM log (healthy: log11, whose start prints vLLM's 'If you are running out of
    memory, consider decreasing gpu_memory_utilization' hint; crashed: log09) read through a
    collector gets the same state, exit code and top category as the raw file."""
    src = DATA / log
    raw = diagnose([src])
    lines = src.read_text(encoding="utf-8", errors="replace").splitlines()
    wrapped = tmp_path / "wrapped.log"
    wrapped.write_text("\n".join(WRAPS[wrap](i, ln) for i, ln in enumerate(lines)) + "\n")
    res = diagnose([wrapped])
    assert (res.state, res.exit_code) == (raw.state, raw.exit_code), (res.verdict, raw.verdict)
    assert [f.category for f in res.findings[:1]] == [f.category for f in raw.findings[:1]]
    assert res.engine == raw.engine == "vllm"


def test_text_without_engine_lines_is_read_not_refused(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    prose = tmp_path / "notes.txt"
    prose.write_text("Shopping list\n- eggs\n- bread\n- call the plumber on Tuesday\n")
    assert cli.run(["diagnose", "--json", str(prose)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["state"] == "no-evidence" and out["engine"] == "unknown"
    assert out["verdict"].startswith("no failure recorded")


def test_advice_hint_without_its_prefix_stays_healthy(tmp_path: Path) -> None:
    """vllm-logs/log11 (a real start that reaches serving) prints vLLM's CUDA-graph hint ('If
    out-of-memory error occurs during cudagraph capture, consider decreasing
    `gpu_memory_utilization` ...'; older releases: 'If you are running out of memory, consider
    decreasing ...'); a paste that lost the hint lines' prefixes (or wrapped them in a logger's
    own) is still healthy, exit 0. Both wordings are tried."""
    src = DATA / "vllm-logs" / "log11.txt"
    assert diagnose([src]).exit_code == 0
    lines = src.read_text(encoding="utf-8").splitlines()
    hint = [i for i, ln in enumerate(lines) if "consider decreasing `gpu_memory_utilization`" in ln]
    assert hint
    old = ("CUDA graphs can take additional 1~3 GiB memory per GPU. If you are running out of "
           "memory, consider decreasing `gpu_memory_utilization` or enforcing eager mode.")
    for pre, text in (("", None), ("2024-07-23 20:49:35.123 | INFO | ", None), ("", old),
                      ("2024-07-23 20:49:35.123 | INFO | ", old)):
        out = list(lines)
        for i in hint:
            out[i] = pre + (text or out[i][out[i].index("Capturing cudagraphs"):])
        p = tmp_path / "log11-pasted.txt"
        p.write_text("\n".join(out) + "\n")
        res = diagnose([p])
        assert (res.exit_code, res.state) == (0, "healthy"), res.verdict


def test_score_corpora_script_one_json_object(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, str(root / "scripts" / "score_corpora.py"),
                        str(ENGINE_LOGS), "--json"], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    row = out["corpora"][0]
    assert (row["corpus"], row["logs"], row["refused"], row["benign_exit1"]) == (
        "engine-logs", len(_manifest()), 0, 0)
    bad = subprocess.run([sys.executable, str(root / "scripts" / "score_corpora.py"),
                          str(tmp_path / "nope"), "--json"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and json.loads(bad.stdout)["status"] == "error"
    from scripts.score_corpora import DEFAULT

    assert not any("holdout-3" in d or "holdout-4" in d for d in DEFAULT)


def test_envelope_forms() -> None:
    """Each envelope rewritten into a form prefix.attribute reads; vLLM's own level/time form
    after a container stamp is left to attribute (never taken for TGI's tracing form)."""
    from sm120kit.evidence.logs.envelope import Envelope
    from sm120kit.evidence.logs.prefix import attribute

    env = Envelope()
    cases = {
        "2025-05-16T13:12:16.645Z INFO 05-16 13:12:16 [api_server.py:1] vLLM API server":
            ("INFO", None, "vLLM API server"),
        "2024-03-06T17:53:31.052444Z ERROR shard-manager: text_generation_launcher: Shard 0":
            ("ERROR", None, "text_generation_launcher: Shard 0"),
        "2020-03-28 18:22:59,901\tWARNING worker.py:1072 -- A worker died":
            ("WARNING", None, "A worker died"),
        "[2021-09-14 10:11:20,566 E 2122527 2122927] core_worker.cc:382: Raylet failed.":
            ("ERROR", None, "Raylet failed."),
        "[2025-08-14 17:50:07 DP1 TP4 EP0] Scheduler hit an exception":
            (None, 4, "Scheduler hit an exception"),
        "May 16 13:12:16 gpu1 vllm[4242]: (APIServer pid=1) ERROR 05-16 13:12:16 [core.py:1] boom":
            ("ERROR", None, "boom"),
    }
    for line, (level, rank, msg) in cases.items():
        o = attribute(env.strip(line))
        assert (o.level, o.rank, o.message) == (level, rank, msg), (line, o)
    assert Envelope.detect(b"INFO 05-16 13:12:16 [core.py:1] plain vLLM\n") is None
