"""A real virtual environment per vLLM release with the release wheel really pip-installed.

``python -m venv --without-pip`` makes the environment; ``pip --python <venv> install --no-deps
--no-compile <cached wheel>`` installs vLLM exactly as a user's container has it (RECORD,
INSTALLER, the ``.so`` files and all), ~8-15 s per release. One environment per release is
shared by the tests of a module; every test starts from a verified pristine install (the
``pristine`` helper re-checks every touched file against RECORD and removes leftover state)."""

from __future__ import annotations

import pytest

from tests.support.venvs import Env, make_env


@pytest.fixture(scope="session")
def envs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Env]:
    base = tmp_path_factory.mktemp("venvs")
    return {v: make_env(base, v) for v in ("0.33.0", "0.34.0")}
