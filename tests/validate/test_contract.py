"""Contract: what validate sends is what vLLM's own request models accept, and what it parses is
what vLLM's own response models produce, for the 0.34.0 and 0.25.1 release trees.

The requests are the real ones: a full ``validate`` run against two test-server processes that
record every POST body. vLLM's protocol modules are imported from the release trees in a separate
interpreter (``vllm_contract.py``) with the packages the suite already has; no stand-in models.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sm120kit.cli import run
from sm120kit.errors import UserError
from sm120kit.validate.client import error_text, parse_completion, parse_count, parse_models
from tests.support import releases
from tests.validate.conftest import SERVER, _port

CONTRACT = Path(__file__).with_name("vllm_contract.py")
VERSIONS = ("0.34.0", "0.25.1")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The POST bodies of one validate run (server and reference), as JSON lines."""
    d = tmp_path_factory.mktemp("contract")
    rec = d / "requests.jsonl"
    procs = [subprocess.Popen([sys.executable, str(SERVER), "--port", "0", "--record", str(rec),
                               *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for args in (["--dcp", "4", "--cp-kv-cache-interleave-size", "64"], ["--dcp", "1"],
                          ["--dcp", "4", "--cp-kv-cache-interleave-size", "64",
                           "--read-interleave", "1"])]
    try:
        url, ref, wrong = (f"http://127.0.0.1:{_port(p)}" for p in procs)
        common = ["--reference-url", ref, "--dcp", "4", "--interleave", "64", "--prompt-lengths",
                  "200", "--lengths", "700", "--max-tokens", "4", "--json"]
        assert run(["validate", "--url", url, *common]) == 0
        # a diverging server: the teacher-forced scoring requests are sent (and recorded) too
        assert run(["validate", "--url", wrong, *common]) == 3
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=10)
    return rec


@pytest.fixture(scope="module")
def contracts(recorded: Path) -> dict[str, dict[str, Any]]:
    trees = {v: releases.tree("vllm", v) for v in VERSIONS}
    procs = {v: subprocess.Popen([sys.executable, str(CONTRACT), str(t), str(recorded)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for v, t in trees.items()}
    out = {}
    for v, p in procs.items():
        so, se = p.communicate(timeout=600)
        assert p.returncode == 0, se[-3000:]
        out[v] = json.loads(so.strip().splitlines()[-1])
    return out


@pytest.mark.network
@pytest.mark.parametrize("version", VERSIONS)
def test_requests_accepted_by_vllm_models(recorded: Path, contracts: dict[str, dict[str, Any]],
                                          version: str) -> None:
    paths = {json.loads(x)["path"] for x in recorded.read_text().splitlines()}
    assert paths == {"/tokenize", "/v1/completions"}
    bodies = [json.loads(x)["body"] for x in recorded.read_text().splitlines()]
    assert any(b.get("echo") and isinstance(b["prompt"][0], int) for b in bodies)  # scoring
    res = contracts[version]
    assert res["checked"] == len(recorded.read_text().splitlines()) > 10
    assert res["problems"] == []


@pytest.mark.network
@pytest.mark.parametrize("version", VERSIONS)
def test_vllm_responses_parse(contracts: dict[str, dict[str, Any]], version: str) -> None:
    r = contracts[version]["responses"]
    assert parse_models(r["models"], "w", None, "server") == ("m", 4096)
    assert parse_models(r["models"], "w", "m", "server") == ("m", 4096)
    with pytest.raises(UserError, match="serves no model 'x'"):
        parse_models(r["models"], "w", "x", "server")
    assert parse_count(r["tokenize"], "w") == 3
    c = parse_completion(r["completion"], "w")
    assert c.tokens == ["token_id:65", "token_id:66"] and c.logprobs == [-0.25, -1.5]
    assert c.top[1] == {"token_id:66": -1.5, "token_id:65": -1.75}
    assert c.text == "AB" and c.finish_reason == "length"
    assert error_text(json.dumps(r["error"])) == ("This model's maximum context length is 4096 "
                                                  "tokens. (type BadRequestError, param prompt)")
    # the API-key middleware's 401 body, as its source writes it
    assert contracts[version]["unauthorized"] == ['{"error": "Unauthorized"}']
    assert error_text(contracts[version]["unauthorized"][0].replace("'", '"')) == "Unauthorized"


def test_unknown_field_is_a_problem() -> None:
    """The checker itself can fail: a field vLLM does not declare is reported."""
    sys.path.insert(0, str(CONTRACT.parent))
    try:
        import vllm_contract
    finally:
        sys.path.remove(str(CONTRACT.parent))

    class Model:
        model_fields = {"prompt": type("F", (), {"alias": None})()}

        @staticmethod
        def model_validate(body: dict[str, Any]) -> None:
            if "prompt" not in body:
                raise ValueError("prompt missing")

    problems, n = vllm_contract.check({"/x": Model}, [{"path": "/x", "body": {"promt": 1}}])
    assert n == 1 and len(problems) == 2 and "['promt']" in problems[0]
