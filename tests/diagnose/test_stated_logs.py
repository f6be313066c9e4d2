"""A log that states a failure is never answered exit 0; one that states none stays exit 0.

tests/data/stated-logs holds real excerpts (``source_url`` in its manifest) whose failure line
is in a shape the line prefixes do not read: SGLang's level-less launcher line (its source logs
it at error level: the message index), a TGI JSON record at level ERROR, kubectl's
CrashLoopBackOff, the docker CLI's "Error response from daemon" and logrus ERRO record, uvicorn's
HTTP 500 access lines, a Rust panic, and a
huggingface_hub retry that never recovered. ``expected.line`` is a substring of the evidence
line the finding must quote and ``expected.rule`` the fallback that reports it, unless
``expected.named_by`` names the catalogue entry that knows the message (Ray's node-death line,
known-engines.toml).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sm120kit.diagnose.catalogue import load
from sm120kit.diagnose.engine import diagnose
from sm120kit.evidence.logs.analyze import LogAnalysis

DATA = Path(__file__).resolve().parents[1] / "data"
STATED = DATA / "stated-logs"
VLLM = DATA / "vllm-logs"


def _manifest() -> list[dict[str, Any]]:
    return list(json.loads((STATED / "manifest.json").read_text()))


@pytest.mark.parametrize("e", _manifest(), ids=lambda e: e["id"])
def test_a_stated_failure_is_exit_1_with_its_line(e: dict[str, Any]) -> None:
    res = diagnose([STATED / e["file"]])
    want = e["expected"]
    assert res.exit_code == want["exit"], res.verdict
    if want["exit"] == 0:
        assert not res.findings
        return
    top = res.findings[0]
    if want.get("named_by"):  # a catalogue entry knows the message now: it names the line
        assert top.rule == want["named_by"], (top.rule, top.summary)
    else:
        assert top.category == "unknown" and top.confidence <= 0.35, (top.rule, top.summary)
        assert top.rule == want["rule"], (top.rule, top.summary)
    assert any(want["line"] in ev.text for ev in top.evidence), [ev.text for ev in top.evidence]


def test_the_corpus_is_sourced_and_disjoint() -> None:
    from tests.diagnose.corpus_checks import thread, urls

    mine = {thread(e["source_url"]) for e in _manifest()}
    assert None not in mine and len(mine) == len(_manifest())
    others = set().union(*(urls(json.loads(m.read_text())) for m in DATA.glob("*/manifest.json")
                           if m.parent != STATED))
    assert not mine & others, mine & others


def test_the_index_names_where_a_stated_line_comes_from() -> None:
    res = diagnose([STATED / "sglang-3576.txt"])
    assert "sglang/srt/entrypoints/engine.py" in res.findings[0].summary, res.findings[0].summary


def _healthy_with(tmp_path: Path, inserted: list[str]) -> Path:
    """vllm-logs/log01 (a vLLM start that reaches serving) with real lines inserted before its
    'Application startup complete.' line."""
    lines = (VLLM / "log01.txt").read_text().splitlines()
    at = next(i for i, x in enumerate(lines) if "Application startup complete" in x)
    p = tmp_path / "start.log"
    p.write_text("\n".join(lines[:at] + inserted + lines[at:]) + "\n")
    return p


# https://github.com/vllm-project/vllm-omni/issues/2616: huggingface_hub's retry of a HEAD request
HF_RETRY = [
    "(Worker pid=8142) '(ReadTimeoutError(\"HTTPSConnectionPool(host='huggingface.co', port=443): "
    "Read timed out. (read timeout=10)\"), '(Request ID: 3db76891-256c-45d0-852a-00fa75dd3dbf)')' "
    "thrown while requesting HEAD https://huggingface.co/Qwen/Qwen3-Omni-30B-A3B-Instruct/resolve/"
    "main/chat_template.json",
    "(Worker pid=8142) Retrying in 1s [Retry 1/5].",
]


def test_a_retried_failure_that_recovers_to_serving_stays_exit_0(tmp_path: Path) -> None:
    """The retry lines of a real thread, put into a real start that reaches serving (the
    combination is ours): the program said it retries and the run got ready."""
    assert diagnose([VLLM / "log01.txt"]).exit_code == 0
    res = diagnose([_healthy_with(tmp_path, HF_RETRY)])
    assert res.exit_code == 0 and res.state == "healthy", res.verdict


def test_the_same_failure_without_its_retry_line_is_exit_1(tmp_path: Path) -> None:
    res = diagnose([_healthy_with(tmp_path, HF_RETRY[:1])])
    assert res.exit_code == 1 and res.state != "healthy", res.verdict


@pytest.mark.parametrize("line", [
    # https://github.com/sgl-project/sglang/issues/4127: SGLang says to ignore an error message
    "[2025-03-06 06:14:53 TP3] The following error message 'operation scheduled before its "
    "operands' can be ignored.",
    # tests/data/vllm-logs/log05 (LMCache): "level=critical" is a setting, not a record's level
    "[2026-08-12 07:50:52,652] LMCache INFO: Started PeriodicThread: lmcache-heartbeat "
    "(level=critical, interval=5.0s, init_wait=0.0s) (periodic_thread.py:244:lmcache.v1.periodic_thread)",
    # https://github.com/vllm-project/vllm/issues/9193: a healthy serving vLLM's access line
    '2024-10-23T17:57:06.849293249Z INFO:     127.0.0.6:60701 - "GET /health HTTP/1.1" 200 OK',
])
def test_lines_that_state_no_failure_keep_a_serving_start_exit_0(tmp_path: Path,
                                                                  line: str) -> None:
    res = diagnose([_healthy_with(tmp_path, [line])])
    assert res.exit_code == 0, (res.verdict, [f.summary for f in res.findings])


def test_what_counts_as_a_stated_failure_is_catalogue_data() -> None:
    """Without the cues the analysis records none of these shapes; with them, each one."""
    lines = [(STATED / f).read_text().splitlines()[-1] for f in
             ("tgi-3317.txt", "production-stack-454.txt", "vllm-40856.txt", "femtogpt-23.txt")]
    lines[-1] = (STATED / "femtogpt-23.txt").read_text().splitlines()[0]
    bare = LogAnalysis()
    bare.feed_lines("x", lines)
    assert bare.fails.failures == []
    read = LogAnalysis(cues=load().prose_cues())
    read.feed_lines("x", lines)
    assert [e.line for e in read.fails.failures] == [1, 2, 3, 4]


def test_a_request_body_is_data_not_a_failure_statement(tmp_path: Path) -> None:
    """vLLM's request logger line (vllm/entrypoints/logger.py; the line of
    https://github.com/vllm-project/vllm/issues/9193) with a prompt that says "died" and "timed
    out" (the prompt's words are ours): an INFO record of user data, no failure."""
    line = ("INFO 10-23 10:57:08 logger.py:37] Received request chat-c63fb2801fdd47bf95478436ef4fbd06: "
            "prompt: \"why the worker died and the request timed out\", params: SamplingParams(n=1, "
            "presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, temperature=0.7)")
    res = diagnose([_healthy_with(tmp_path, [line])])
    assert res.exit_code == 0, (res.verdict, [f.summary for f in res.findings])


@pytest.mark.parametrize(("record", "failure"), [
    # tracing-subscriber's JSON format as the TGI launcher writes it (the fields are ours)
    ('{"timestamp":"2024-05-01T12:00:00.123Z","level":"INFO","fields":{"message":"Args { '
     'model_id: \\"Error: x\\" }"},"target":"text_generation_launcher"}', False),
    ('{"timestamp":"2024-05-01T12:00:00.123Z","level":"ERROR","fields":{"message":"Shard '
     'complete standard error output","level":"info"},"target":"text_generation_launcher"}', True),
])
def test_a_structured_record_is_judged_by_its_own_level(record: str, failure: bool) -> None:
    an = LogAnalysis(cues=load().prose_cues())
    an.feed_lines("x", [record])
    assert bool(an.fails.failures) is failure


@pytest.mark.parametrize(("head", "line", "read"), [
    # https://github.com/vllm-project/vllm/issues/15766: vLLM under docker compose (the stored
    # excerpt cuts the CRITICAL line after "MQLLM"; its rest is vLLM 0.8 launcher.py's message)
    ("vllm-llm-1  | ERROR 03-30 02:15:01 [engine.py:160] AssertionError",
     "vllm-llm-1  | CRITICAL 03-30 02:15:01 [launcher.py:116] MQLLMEngine is already dead, "
     "terminating server process",
     "CRITICAL 03-30 02:15:01 [launcher.py:116] MQLLMEngine is already dead, terminating server "
     "process"),
    # https://github.com/kubernetes-sigs/gateway-api-inference-extension/issues/550 (k9s's border)
    ("\u2502 INFO 03-21 20:15:44 [monitor.py:33] torch.compile takes 28.77 s in total",
     "\u2502 INFO 03-21 20:15:45 [worker.py:267] Memory profiling takes 34.26 seconds",
     "INFO 03-21 20:15:45 [worker.py:267] Memory profiling takes 34.26 seconds"),
])
def test_compose_and_box_borders_are_envelopes(head: str, line: str, read: str) -> None:
    """A collector's column before a vLLM record is stripped, so its level is read."""
    from sm120kit.evidence.logs.envelope import Envelope

    env = Envelope.detect(head.encode())
    assert env is not None and env.strip(line) == read


@pytest.mark.parametrize("line", [
    # CPython Lib/asyncio (logged at error level by the loop's exception handler) and threading
    "Task exception was never retrieved",
    "Exception in thread Thread-3 (_serve):",
    # torch c10d, older releases (the wording of the NCCL result code)
    "NCCL Error 2: unhandled system error",
])
def test_python_and_nccl_statements_without_a_level_are_failures(line: str) -> None:
    an = LogAnalysis(cues=load().prose_cues())
    an.feed_lines("x", [line])
    assert [e.text for e in an.fails.failures] == [line]
