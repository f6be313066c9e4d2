"""A launch line quoted in a vLLM log is read by the one serve-line parser (models/serve_args):
``evidence/logs/versions.py`` keeps no alias table of its own (issue 22, "one concept")."""

from __future__ import annotations

from sm120kit.evidence.logs.versions import VersionScan, serve_line_config
from tests.support.paths import ROOT


def test_log_launch_line_uses_the_serve_parser_aliases() -> None:
    line = ("(APIServer pid=7) INFO 05-01 12:00:00 [api_server.py:1] Command: vllm serve "
            "/models/GLM-5 -tp 8 -dcp 4 --kv-cache-dtype=fp8 --enable-expert-parallel "
            "--attention-backend FLASHINFER_MLA_SPARSE")
    assert serve_line_config(line) == {
        "tp": 8, "dcp": 4, "kv_cache_dtype": "fp8", "ep": True,
        "attention_backend": "FLASHINFER_MLA_SPARSE", "model": "/models/GLM-5"}
    scan = VersionScan()
    scan.feed(line)
    assert scan.config["dcp"] == 4 and scan.config["tp"] == 8


def test_api_server_form_and_a_value_vllm_rejects() -> None:
    assert serve_line_config("python -m vllm.entrypoints.openai.api_server --model m "
                             "--tensor-parallel-size 2 --decode-context-parallel-size 2") == {
        "tp": 2, "dcp": 2, "model": "m"}
    assert serve_line_config("Command: vllm serve m -tp eight") == {}


def test_versions_has_no_option_alias_table() -> None:
    src = (ROOT / "sm120kit" / "evidence" / "logs" / "versions.py").read_text()
    for alias in ("tensor-parallel-size", "decode-context-parallel-size", '"dcp": "dcp"'):
        assert alias not in src
