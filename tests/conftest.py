"""Shared fixtures and markers.

* ``home``: every test runs with HOME pointing at a tmp dir (git config, caches never touch ~).
* ``SM120KIT_CACHE``: the tool's own cache (``sm120kit.paths.cache_dir``: ``$SM120KIT_CACHE``, else
  ``$XDG_CACHE_HOME/sm120kit``, else ``~/.cache/sm120kit``), so the tool and the tests download
  each release wheel once. ``SM120KIT_TEST_CACHE`` overrides it for the tests (CI puts it in its
  clone). Read once, before ``home`` points HOME at a tmp dir.
* temporary files: the session runs with ``TMPDIR`` (and :mod:`tempfile`) pointed at one
  directory of its own, removed when the session ends, so nothing the tests or the tool under
  test make is left in ``/tmp`` (pytest's ``tmp_path`` dirs live there too and are removed after
  each test: ``tmp_path_retention_policy = "none"``; Ray's session dirs too: Ray honours
  ``TMPDIR``). ``RAY_ADDRESS`` is unset: a Ray cluster already running on the box is never used.
* markers ``gpu``, ``sm120`` (skip with a reason where the hardware is missing), ``network``
  (needs release wheels from PyPI on a cold cache: set here for every test that uses a release
  fixture, by hand for tests that build releases themselves) and ``slow`` (> 30 s).
  ``pytest -m "not network and not slow"`` is the fast offline lane.
* hypothesis runs derandomized (the same examples every run), so a property test cannot pass
  on one run of CI and fail the next; ``HYPOTHESIS_PROFILE=explore`` draws fresh examples (and
  found the stream reader's chatter case that way).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("deterministic", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))

def _tool_cache() -> str:
    from sm120kit.paths import cache_dir

    return str(cache_dir())


_SESSION_CACHE = os.environ.get("SM120KIT_TEST_CACHE") or _tool_cache()
_SESSION_TMP: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _SESSION_TMP
    Path(_SESSION_CACHE).mkdir(parents=True, exist_ok=True)
    os.environ["SM120KIT_CACHE"] = _SESSION_CACHE
    # a short path: Ray's Unix sockets live below it (107-byte limit)
    _SESSION_TMP = tempfile.mkdtemp(prefix="sm120kit-tests-")
    os.environ["TMPDIR"] = _SESSION_TMP
    tempfile.tempdir = _SESSION_TMP
    os.environ.pop("RAY_ADDRESS", None)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _SESSION_TMP:
        shutil.rmtree(_SESSION_TMP, ignore_errors=True)


def _has_cuda() -> str | None:
    try:
        import torch
    except Exception:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU visible"
    return None


def _has_sm120() -> str | None:
    why = _has_cuda()
    if why:
        return why
    import torch

    cap = torch.cuda.get_device_capability(0)
    if cap[0] != 12:
        return f"GPU 0 is SM{cap[0]}{cap[1]}, not SM120"
    try:
        import flashinfer  # noqa: F401
    except Exception:
        return "flashinfer is not installed"
    return None


#: fixtures that build release wheels/trees/repositories (PyPI downloads on a cold cache): a test
#: using one, directly or through another fixture, is marked ``network``
RELEASE_FIXTURES = frozenset({
    "release34", "mini_series_master", "mini_series", "checkout",  # patchset: vLLM 0.34.0 repo
    "envs",  # installed: vLLM 0.33.0/0.34.0 pip-installed in venvs
    "fi_trees", "vllm_tree", "vllm_patched",  # doctor: FlashInfer and vLLM release trees
    "applied",  # patches: every covered release with its variant applied
    "runtime_results",  # runtime: patched release trees run in subprocesses
    "vllm033",  # collect: vLLM 0.33.0 tree
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _mark(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    """With network tests selected, fetch the release wheels once, up front, with a progress
    line per file (a cold cache is ~4.8 GB; without this the first tests that need a wheel sit
    silent for minutes). ``SM120KIT_NO_PREFETCH=1`` leaves it to the tests."""
    if os.environ.get("SM120KIT_NO_PREFETCH") or session.config.option.collectonly:
        return
    if not any(it.get_closest_marker("network") for it in session.items):
        return
    from tests.support.releases import prefetch

    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    lock = threading.Lock()

    def say(line: str) -> None:
        with lock:
            if tr is not None:
                tr.write_line(line)
            else:
                print(line, flush=True)

    prefetch(say)


def _mark(items: list[pytest.Item]) -> None:
    gpu_why = None
    sm_why = None
    for item in items:
        if RELEASE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.network)
        if "gpu" in item.keywords:
            gpu_why = gpu_why if gpu_why is not None else (_has_cuda() or "")
            if gpu_why:
                item.add_marker(pytest.mark.skip(reason=f"gpu: {gpu_why}"))
        if "sm120" in item.keywords:
            sm_why = sm_why if sm_why is not None else (_has_sm120() or "")
            if sm_why:
                item.add_marker(pytest.mark.skip(reason=f"sm120: {sm_why}"))


@pytest.fixture(autouse=True)
def home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("SM120KIT_CACHE", _SESSION_CACHE)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(var, raising=False)
    return h


@pytest.fixture()
def sm120kit_cache() -> Path:
    return Path(_SESSION_CACHE)


def git_available() -> bool:
    return shutil.which("git") is not None
