"""``validate -- <launch line>``: servers launched under collect's supervisor (real processes).

The launch line runs ``fake_server.py`` with vLLM's option names (an SM120 vLLM cannot run here);
validate reads DCP size and interleave from it, relaunches it with DCP 1 as the reference, takes
the KV figures from its startup log, and bundles a server that stops answering.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from sm120kit.cli import run
from sm120kit.validate.launch import reference_argv, serve_url

SERVER = str(Path(__file__).with_name("fake_server.py"))
SMALL = ["--prompt-lengths", "300", "--lengths", "700", "--max-tokens", "8"]


def _port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def test_launch_line_parsing() -> None:
    line = ["vllm", "serve", "zai-org/GLM-5.2", "-tp", "4", "--decode-context-parallel-size", "4",
            "--cp-kv-cache-interleave-size=64", "--host", "0.0.0.0", "--port", "8011"]
    assert serve_url(line) == "http://127.0.0.1:8011"
    assert reference_argv(line) == ["vllm", "serve", "zai-org/GLM-5.2", "-tp", "4", "--host",
                                    "0.0.0.0", "--port", "8011",
                                    "--decode-context-parallel-size", "1"]
    assert serve_url(["vllm", "serve", "m", "-dcp", "2"]) == "http://127.0.0.1:8000"
    assert reference_argv(["vllm", "serve", "m", "-dcp", "2"])[-2:] == [
        "--decode-context-parallel-size", "1"]


@pytest.mark.slow
def test_launch_relaunches_dcp1_reference_and_fails_base_e(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = _port()
    rc = run(["validate", "--json", *SMALL, "-o", str(tmp_path), "--", sys.executable, SERVER,
              "--decode-context-parallel-size", "4", "--cp-kv-cache-interleave-size", "64",
              "--port", port, "--merge-base", "e"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 3 and res["verdict"] == "fail", res["summary"]
    assert res["layout"] == {"dcp": 4, "interleave": 64, "block_size": 64,
                             "source": "launch line"}
    assert res["launch"]["reference_argv"][-2:] == ["--decode-context-parallel-size", "1"]
    assert "relaunched with DCP 1" in " ".join(res["notes"])
    # the KV figures come from the DCP server's startup log (4 ranks x 1000 blocks x 64)
    assert res["kv_capacity"]["source"] == "log"
    assert res["kv_capacity"]["gpu_kv_cache_tokens"] == 256000
    assert list(tmp_path.iterdir()) == []  # both servers stopped cleanly: no bundle


@pytest.mark.slow
def test_server_hanging_during_validation_is_bundled(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = _port()
    rc = run(["validate", *SMALL, "--timeout", "2", "-o", str(tmp_path), "--", sys.executable,
              SERVER, "--decode-context-parallel-size", "4", "--cp-kv-cache-interleave-size", "64",
              "--port", port, "--hang-after", "2"])
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith(("error: ", "hint: "))]
    assert rc == 2
    assert lines[0].startswith("error: the DCP server stalled during validation: DCP server "
                               f"stopped answering validate: server http://127.0.0.1:{port}"
                               "/v1/completions: no answer within 2 s")
    bundles = sorted(tmp_path.glob("sm120kit-bundle-*.tar.gz"))
    assert len(bundles) == 1 and lines[1] == (
        f"hint: bundle: {bundles[0]}; name the cause with: sm120kit diagnose {bundles[0]}")


def test_server_dying_before_ready_is_bundled(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    # the launch line has an option the server rejects: it exits 2 at once, as vLLM does
    rc = run(["validate", *SMALL, "-o", str(tmp_path), "--", sys.executable, SERVER,
              "--decode-context-parallel-size", "2", "--port", _port(), "--no-such-option"])
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith(("error: ", "hint: "))]
    assert rc == 2
    assert err[0] == ("error: the DCP server crashed before it was ready: the command exited "
                      "with code 2")
    bundles = sorted(tmp_path.glob("sm120kit-bundle-*.tar.gz"))
    assert len(bundles) == 1 and err[1].startswith(f"hint: bundle: {bundles[0]}")


@pytest.mark.slow
def test_launch_with_reference_url_passes_a_correct_server(
        servers: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = run(["validate", "--json", *SMALL, "--reference-url", servers["reference"], "-o",
              str(tmp_path), "--", sys.executable, SERVER, "--decode-context-parallel-size", "4",
              "--cp-kv-cache-interleave-size", "64", "--port", _port()])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0 and res["verdict"] == "pass", res["summary"]
    assert res["reference"]["url"] == servers["reference"]
    assert res["launch"]["reference_argv"] is None
    assert not any("relaunched" in n for n in res["notes"])
    assert list(tmp_path.iterdir()) == []


def test_launch_crash_is_one_json_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = run(["validate", "--json", "-o", str(tmp_path), "--", sys.executable, "-c",
              "import sys; print('boom', file=sys.stderr); sys.exit(3)"])
    out = capsys.readouterr().out
    res = json.loads(out)  # one object, nothing else on stdout
    assert rc == 2 and res["status"] == "error" and res["command"] == "validate"
    assert res["error"] == "the DCP server crashed before it was ready: the command exited with code 3"
    assert "sm120kit diagnose" in res["hint"] and res["exit_code"] == 2
