"""``apply --installed`` on vLLM 0.25.1 judges the FlashInfer installed beside it, not the pin.

A real venv with the vLLM 0.25.1 wheel pip-installed, then the real flashinfer-python wheels:
0.6.13 (vLLM 0.25's pin, no SM120 API) and 0.6.14 installed over it, as users do.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sm120kit.cli import run
from sm120kit.patchset.release import fetch_wheel
from tests.installed.conftest import Env, make_env

pytestmark = pytest.mark.network


def _pip_install(env: Env, project: str, version: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(env.python), "install", "-q", "--no-deps",
         "--no-compile", "--no-index", "--disable-pip-version-check",
         str(fetch_wheel(project, version))],
        check=True,
    )


def test_flashinfer_requirement_checked_on_the_installed_wheel(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = make_env(tmp_path, "0.25.1")
    _pip_install(env, "flashinfer-python", "0.6.13")
    capsys.readouterr()
    rc = run(["apply", "--installed", "--python", str(env.python), "--json"])
    doc = json.loads(capsys.readouterr().out)
    # the series is applied, and the run reports the FlashInfer that cannot run it (exit 1)
    assert rc == 1 and doc["status"] == "applied" and doc["variant"] == "v0.25"
    req = doc["requirement"]
    assert req["status"] == "unmet" and req["installed"] == "0.6.13"
    assert req["missing"] == ["kv_scale_format", "mla/_sparse_mla_sm120"]
    assert req["fix"].startswith("pip install flashinfer-python==0.6.14")

    _pip_install(env, "flashinfer-python", "0.6.14")  # over the pin, as users do
    rc = run(["apply", "--installed", "--python", str(env.python)])
    out = " ".join(capsys.readouterr().out.split())
    assert rc == 0
    assert "already-applied" in out
    assert "vllm-0.25.1 needs flashinfer-python >= 0.6.14 (the SM120 sparse-MLA API): " \
           "installed 0.6.14 has it" in out
    rc = run(["revert", "--installed", "--python", str(env.python)])
    assert rc == 0
