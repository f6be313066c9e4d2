"""API keys, vLLM's limits and error bodies, same-server refusal and output shapes, against the
project's test server processes (``fake_server.py``: vLLM's --api-key middleware, ErrorResponse
bodies and max_logprobs 20 as vLLM 0.34.0 has them)."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from sm120kit.cli import run
from sm120kit.errors import UserError
from sm120kit.validate.client import ServerClient, error_text
from sm120kit.validate.identity import (
    counters_tell,
    one_process,
    process_start,
    reported_dcp,
    traffic,
)

KEY = "s3cret-key"
SMALL = ["--dcp", "4", "--interleave", "64", "--prompt-lengths", "200", "--lengths", "700",
         "--max-tokens", "4"]


def _err(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Exit code, the one ``error:`` line (with its hint) and stdout."""
    rc = run(["validate", *args])
    cap = capsys.readouterr()
    lines = cap.err.splitlines()
    idx = [i for i, x in enumerate(lines) if x.startswith("error: ")]
    assert len(idx) == 1 and "Traceback" not in cap.err, cap.err
    return rc, "\n".join(lines[idx[0]:]), cap.out


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    rc = run(["validate", "--json", *args])
    out = capsys.readouterr().out
    return rc, json.loads(out)  # exactly one object: json.loads rejects trailing data


def test_api_key_server_passes_with_key(servers: dict[str, str],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    rc, res = _json(capsys, "--url", servers["keyed"], "--reference-url", servers["reference"],
                    "--api-key", KEY, *SMALL)
    assert rc == 0 and res["verdict"] == "pass", res["summary"]
    # the cost said up front is the cost paid: 7 completions each (no divergence to force),
    # the reference's /v1/models + /metrics + one batched noise-floor request
    req = res["requests"]
    assert req["planned_completions_per_server"] == 8  # 3 prompts, 4 rank needles, 1 tail
    assert req["server"] == req["planning"] + 8 and req["reference"] == 8 + 3


def test_api_key_from_environment(servers: dict[str, str], capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("VLLM_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv("VLLM_API_KEY", raising=False)
        monkeypatch.setenv(var, KEY)
        rc, res = _json(capsys, "--url", servers["keyed"], "--lengths", "700", "--dcp", "4",
                        "--interleave", "64")
        assert rc == 1 and all(c["needle_found"] for c in res["checks"]), var
        monkeypatch.delenv(var)


def test_401_is_one_line_naming_server_and_option(servers: dict[str, str],
                                                  capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    url = servers["keyed"]
    rc, err, _ = _err(capsys, "--url", url, *SMALL)
    assert rc == 2
    assert err.splitlines()[0] == (f"error: server {url}/v1/models: HTTP 401 Unauthorized: the "
                                   "server requires an API key; pass it with --api-key (or set "
                                   "VLLM_API_KEY)")
    rc, err, _ = _err(capsys, "--url", url, "--api-key", "wrong", *SMALL)
    assert rc == 2 and "rejects the API key given" in err.splitlines()[0]
    # the reference is named when it is the one that refuses
    rc, err, _ = _err(capsys, "--url", servers["reference"], "--reference-url", url, *SMALL)
    assert rc == 2 and err.startswith(f"error: reference {url}/v1/models: HTTP 401")
    # --json: the same failure is one JSON object on stdout
    rc, res = _json(capsys, "--url", url, *SMALL)
    assert rc == 2 and res["status"] == "error" and res["exit_code"] == 2
    assert "HTTP 401" in res["error"] and "--api-key" in res["error"] and res["hint"]


@pytest.mark.slow
def test_launch_mode_passes_its_key_and_fails_fast_on_a_wrong_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    server = str(Path(__file__).with_name("fake_server.py"))
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    line = [sys.executable, server, "--decode-context-parallel-size", "4",
            "--cp-kv-cache-interleave-size", "64", "--port", _port()]
    rc, res = _json(capsys, "--prompt-lengths", "200", "--lengths", "700", "--max-tokens", "4",
                    "-o", str(tmp_path), "--", *line, "--api-key", KEY)
    assert rc == 0 and res["verdict"] == "pass", res["summary"]
    # the server takes its key from the environment; validate is given a wrong one: the
    # readiness probe reports the 401 at once instead of waiting out --ready-timeout
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    rc, err, _ = _err(capsys, "--api-key", "wrong", "--ready-timeout", "120", "-o",
                      str(tmp_path), "--", *line)
    assert rc == 2 and "HTTP 401 Unauthorized: the server rejects the API key" in err
    assert list(tmp_path.iterdir()) == []  # no bundle: the server was fine


def _port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def test_limits_checked_before_any_request(capsys: pytest.CaptureFixture[str]) -> None:
    dead = f"http://127.0.0.1:{_port()}"  # nothing listens: an error here means no request
    for args, msg in ((["--top-logprobs", "21"], "--top-logprobs 21 is outside 1..20"),
                      (["--top-logprobs", "0"], "--top-logprobs 0 is outside 1..20")):
        rc, err, _ = _err(capsys, "--url", dead, *args)
        assert rc == 2 and err.startswith(f"error: {msg}"), err
    # --dcp / --interleave are the shared options (cli/options.py): 0 is a usage error, exit 2
    for opt in ("--dcp", "--interleave"):
        rc = run(["validate", "--url", dead, opt, "0"])
        cap = capsys.readouterr()
        assert rc == 2 and f"Invalid value for '{opt}': 0 is not in the range x>=1" in cap.err


def test_reference_max_model_len_limits_the_plan(servers: dict[str, str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    rc, err, _ = _err(capsys, "--url", servers["correct"], "--reference-url",
                      servers["short_reference"], "--dcp", "4", "--interleave", "64",
                      "--lengths", "1500")
    assert rc == 2 and "exceeds max_model_len 1024" in err


def test_vllm_error_body_shown_in_full(servers: dict[str, str]) -> None:
    with ServerClient(servers["reference"], model="tiny-induction") as c:
        with pytest.raises(UserError) as exc:
            c.complete("x" * 3000, max_tokens=4, top_logprobs=5)
    msg = exc.value.message
    assert msg.startswith(f"server {servers['reference']}/v1/completions: HTTP 400: This "
                          "model's maximum context length is 2048 tokens.")
    assert msg.endswith("Please reduce the length of the input messages. "
                        "(type BadRequestError, param prompt)")
    assert error_text('{"error": "Unauthorized"}') == "Unauthorized"
    assert error_text('{"object": "error", "message": "m", "type": "T", "code": 400}') == "m (type T)"
    assert error_text("<html>" + "x" * 200) .endswith("…")


def test_connect_timeout_is_not_a_read_timeout() -> None:
    # a listener whose accept queue is full: the SYN is dropped, the connect times out
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(0)
    fill = []
    try:
        for _ in range(4):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(lst.getsockname())
            fill.append(s)
        url = f"http://127.0.0.1:{lst.getsockname()[1]}"
        with ServerClient(url, connect_timeout=0.5, timeout=600) as c:
            with pytest.raises(UserError) as exc:
                c.models()
        assert exc.value.message == f"server {url}/v1/models: no connection within 0.5 s"
        assert exc.value.hint and "--timeout does not change this" in exc.value.hint
    finally:
        for s in fill:
            s.close()
        lst.close()


def test_same_server_twice_is_refused(servers: dict[str, str],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    url = servers["correct"]
    rc, err, _ = _err(capsys, "--url", url, "--reference-url", url + "/v1/", *SMALL)
    assert rc == 2 and "are the same server" in err
    alias = url.replace("127.0.0.1", "localhost")
    rc, err, _ = _err(capsys, "--url", url, "--reference-url", alias, *SMALL)
    # the addresses decide first: localhost resolves to the same 127.0.0.1:PORT (issue 31)
    assert rc == 2 and "are the same server" in err and "resolve to 127.0.0.1" in err
    # where the addresses cannot tell (a proxy, another host name), the shared start time and
    # the request counters do: the same server seen through two clients
    from sm120kit.errors import UserError
    from sm120kit.validate.client import ServerClient
    from sm120kit.validate.identity import Identity, counters_tell, refuse_same

    with ServerClient(url) as a, ServerClient(alias) as b:
        a.models()
        with pytest.raises(UserError) as exc:
            refuse_same(a.url, b.url, a.metrics(), b.metrics(), 4, counters_tell(a, b),
                        Identity("unproven", "a proxy"))
    assert "are one server process (same process_start_time_seconds" in exc.value.message
    assert "request counters that move together" in exc.value.message
    assert reported_dcp('vllm:parallel_config_info{decode_context_parallel_size="4"} 1.0') == 4
    assert reported_dcp('vllm:cache_config_info{block_size="64"} 1.0') is None


def test_markdown_table_cells_and_no_pass_without_reference(
        servers: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    rc = run(["validate", "--url", servers["correct"], "--dcp", "4", "--interleave", "64",
              "--lengths", "700", "--markdown"])
    out = capsys.readouterr().out
    assert rc == 1 and out.startswith("**sm120kit validate: suspicious** — SUSPICIOUS: ")
    assert "PASS" not in out.splitlines()[0]
    rows = [x for x in out.splitlines() if x.startswith("|")]

    def cells(row: str) -> int:
        return len(row.replace("\\|", "").strip().strip("|").split("|"))

    assert len(rows) == 2 + 5 and cells(rows[0]) == cells(rows[1]) == 8
    assert all(cells(r) == 8 for r in rows)


def test_json_on_ctrl_c(servers: dict[str, str], capsys: pytest.CaptureFixture[str],
                        monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt(*_a: Any, **_k: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(ServerClient, "token_ids", interrupt)
    rc = run(["validate", "--url", servers["correct"], "--lengths", "700", "--json"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 130 and res["status"] == "error" and res["error"] == "interrupted"
    assert res["exit_code"] == 130


def test_two_servers_started_in_one_tick_are_not_one_process(
        servers: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """The reference and the correct server report the same process_start_time_seconds (as two
    servers a script starts together can: 10 ms resolution); their counters tell them apart."""
    url, ref = servers["correct"], servers["reference"]
    alias = url.replace("127.0.0.1", "localhost")
    with ServerClient(url) as a, ServerClient(ref) as b, ServerClient(alias) as same:
        assert process_start(a.metrics()) == process_start(b.metrics())
        a.models()
        assert counters_tell(a, b)() is False
        before = traffic(b.metrics())
        assert counters_tell(a, same)() is True
        assert traffic(b.metrics()) == before  # the probes went to the server under test only
    rc, res = _json(capsys, "--url", url, "--reference-url", ref, *SMALL)
    assert rc == 0 and res["verdict"] == "pass", res


def test_one_process_cannot_tell_without_moving_counters() -> None:
    metrics = 'vllm:request_success_total{engine="0",model_name="m"} 3.0\n'
    pings: list[int] = []
    # counters that never move within the wait: cannot tell (None), after one probe request
    assert one_process(lambda: pings.append(1), lambda: metrics, lambda: metrics,
                       wait_s=0.2) is None
    assert pings == [1]
    # no counters at all: no probe request is sent
    assert one_process(lambda: pings.append(2), lambda: "process_start_time_seconds 1.0\n",
                       lambda: metrics) is None
    assert pings == [1]
    assert traffic('vllm:prompt_tokens_total{engine="0",model_name="m"} 7.0\n'
                   'vllm:prompt_tokens_total{engine="1",model_name="m"} 5.0\n') == (0.0, 12.0)
