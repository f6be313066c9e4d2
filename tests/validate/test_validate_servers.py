"""validate against real server processes: the correct DCP server passes, each injected silent
error of field-notes §5 fails and is named (exit 3), and every HTTP failure is one ``error:`` line, exit 2.

The servers are ``fake_server.py`` processes (tiny model on the reference DCP math: 4 ranks,
interleave 64, real LSE merge); the reference is the same model with DCP 1.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest

from sm120kit.cli import run

# small enough for a fast suite, long enough that the tiny model's top-k (256) is sparse
FAST = ["--prompt-lengths", "400", "--lengths", "1024", "--max-tokens", "16"]


def _validate(capsys: pytest.CaptureFixture[str], url: str, ref: str | None,
              *extra: str) -> tuple[int, dict[str, Any]]:
    args = ["validate", "--url", url, "--dcp", "4", "--interleave", "64", *FAST, "--json", *extra]
    if ref:
        args += ["--reference-url", ref]
    rc = run(args)
    res = json.loads(capsys.readouterr().out)
    assert "verdict" in res, res  # an error object instead of a verdict: show it
    return rc, res


def _by_name(res: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in res["checks"]}


def test_correct_dcp_server_passes(servers: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    rc, res = _validate(capsys, servers["correct"], servers["reference"])
    assert rc == 0, res["summary"]
    assert res["verdict"] == "pass" and res["status"] == "pass"
    checks = _by_name(res)
    # one needle per rank, each really on that rank, each found
    needles = [c for c in res["checks"] if c["kind"] == "needle"]
    # + the tail probe: the end of rank 0's last chunk (its newest rows)
    assert [c["needle"]["ranks"] for c in needles] == [[0], [1], [2], [3], [0]]
    assert needles[-1]["name"] == "needle@1024 tail rank 0"
    assert all(c["needle_found"] and c["reference_needle_found"] for c in needles)
    assert all(c["first_divergence"] is None for c in res["checks"])
    # BF16 rounding of the rank partials is the only difference: far below the pass line
    worst_mean = max(c["mean_abs_diff"] for c in checks.values())
    assert 0 < worst_mean < res["thresholds"]["pass_mean"] / 5
    # the reference answers batched exactly as alone (the tiny model is batch-invariant)
    nf = res["noise_floor"]
    assert nf["prompts"] == 3 and nf["compared"] == 48 and nf["max_abs"] == 0.0
    assert nf["flips"] == 0 and nf["widened"] is False
    assert res["kv_capacity"]["source"] == "metrics"
    assert res["layout"] == {"dcp": 4, "interleave": 64, "block_size": 64, "source": "options"}


def test_lse_base_e_merge_fails(servers: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    rc, res = _validate(capsys, servers["lse_base_e"], servers["reference"])
    assert rc == 3 and res["verdict"] == "fail"
    failed = [c for c in res["checks"] if c["verdict"] == "fail"]
    assert failed
    # the wrong base re-weights ranks: logprobs move beyond noise on the long-context probes
    assert any(c["kind"] == "needle" for c in failed)
    assert all(c["mean_abs_diff"] > res["thresholds"]["fail_mean"] or c["first_divergence"]
               is not None for c in failed)
    assert res["summary"].startswith("FAIL:") and failed[0]["name"] in res["summary"]


def test_interleave_1_mapping_fails(servers: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    rc, res = _validate(capsys, servers["interleave_1"], servers["reference"])
    assert rc == 3 and res["verdict"] == "fail"
    checks = _by_name(res)
    # the mis-mapped top-k reads other tokens' KV: the needle is lost on every rank
    for r in range(4):
        c = checks[f"needle@1024 rank {r}"]
        assert c["verdict"] == "fail"
        assert c["needle_found"] is False and c["reference_needle_found"] is True
        assert "the reference retrieves it, DCP does not" in c["reasons"][0]
        assert c["first_divergence"] is not None and c["divergence_margin"] > 0
        # the reference's whole continuation scored on both (teacher forcing), by token id
        assert c["forced_positions"] == 12 and c["compared_positions"] == 12
        assert any(r.startswith("teacher-forced over the reference's 12 tokens: ")
                   for r in c["reasons"])
    # a 400-token prompt is sparse too (top-k 256): the wrong mapping moves it as well; the
    # summary names the first failed check
    first = next(c for c in res["checks"] if c["verdict"] == "fail")
    assert res["summary"].startswith("FAIL: ") and f"first: {first['name']}:" in res["summary"]


def test_markdown_and_human_render(servers: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    rc = run(["validate", "--url", servers["interleave_1"], "--reference-url",
              servers["reference"], "--dcp", "4", "--interleave", "64", "--prompt-lengths", "200",
              "--lengths", "700", "--max-tokens", "4", "--markdown"])
    out = capsys.readouterr().out
    assert rc == 3  # numerically wrong (2 is a refusal to run)
    assert out.startswith("**sm120kit validate: fail**")
    assert "| needle@700 rank 2 |" in out and "the reference retrieves it, DCP does not" in out
    assert "thresholds (nats)" in out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _error(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Exit code and stderr from the ``error:`` line on (progress lines come before it)."""
    rc = run(["validate", *args])
    err = capsys.readouterr().err
    lines = err.splitlines()
    errs = [i for i, x in enumerate(lines) if x.startswith("error: ")]
    assert len(errs) == 1, err
    assert "Traceback" not in err
    return rc, "\n".join(lines[errs[0]:])


def test_server_down(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    rc, err = _error(capsys, "--url", url)
    assert rc == 2
    first = err.splitlines()[0]
    assert first.startswith(f"error: server {url}/v1/models: cannot connect")


def test_reference_down(servers: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    rc, err = _error(capsys, "--url", servers["correct"], "--reference-url", url)
    assert rc == 2 and err.startswith(f"error: reference {url}/v1/models: cannot connect")


def test_timeout(servers: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _error(capsys, "--url", servers["reference"] + "/slow", "--timeout", "0.5")
    assert rc == 2
    assert err.splitlines()[0].startswith("error: server ") and "no answer within 0.5 s" in err
    assert "hint: " in err


def test_server_without_logprobs(servers: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _error(capsys, "--url", servers["correct"] + "/nologprobs", "--reference-url",
                     servers["reference"], "--prompt-lengths", "256", "--lengths", "1024")
    assert rc == 2
    assert err.splitlines()[0].endswith("/v1/completions: answer carries no logprobs")


def test_non_json_answer(servers: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _error(capsys, "--url", servers["correct"] + "/notjson")
    assert rc == 2
    line = err.splitlines()[0]
    assert line.startswith("error: server ") and "answer is not JSON (text/html)" in line


def test_bad_layout_is_bad_input(servers: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _error(capsys, "--url", servers["correct"], "--dcp", "4", "--interleave", "48")
    assert rc == 2 and "block size 64 is not a multiple of interleave 48" in err
    rc, err = _error(capsys, "--url", servers["correct"], "--lengths", "4096")
    assert rc == 2 and "exceeds max_model_len 2048" in err


def test_no_url(capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _error(capsys)
    assert rc == 2 and err.startswith("error: no server to validate")


def test_no_reference_judges_retrieval_only_and_says_suspicious(
        servers: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    rc = run(["validate", "--url", servers["correct"], "--dcp", "4", "--interleave", "64",
              "--lengths", "700", "--json"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 1 and res["verdict"] == "suspicious"
    assert [c["kind"] for c in res["checks"]] == ["needle"] * 5
    assert all(c["needle_found"] and c["verdict"] == "pass" for c in res["checks"])
    assert res["reference"] is None and res["noise_floor"] is None
    assert any("without a reference the numerics are unproven" in n for n in res["notes"])
    assert res["thresholds"]["rule"].startswith("pass: mean|Δ| ≤ 0.02")
