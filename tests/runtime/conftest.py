"""Per-release CPU environments for running the patched vLLM modules (tests/runtime).

Each vLLM release X is run from its own directory, never installed into the test interpreter:

* ``<cache>/trees/vllm-X`` (``release_tree``): the PyPI wheel's ``.py`` files + dist-info, i.e.
  what ``pip install --no-deps --target`` would leave minus the compiled extensions (``vllm._C``
  is missing anyway on a CPU-only machine, vLLM only warns). Used as is for the *upstream* runs.
* ``<cache>/runtime/vllm-X-patched``: a copy of that tree with the release's variant of the
  series applied by plain ``git apply`` (one patch at a time, in series order). Rebuilt when the
  patch files change (their sha256s are the cache key).
* ``<cache>/runtime/nodeps``: ``xgrammar`` installed with ``--no-deps`` (its ``triton``
  requirement is a 1 GB GPU compiler that is useless here; see tests/requirements.txt).

The third-party import chain (numpy, pydantic, transformers, ...) comes from
``tests/requirements.txt``, installed by the README's test command.

A run is ``python -m rtworker <mode> ...`` in a subprocess whose ``PYTHONPATH`` starts with the
tree, so every release (and patched vs. upstream) lives in its own process. Bytecode goes to
``<cache>/runtime/pycache`` (``PYTHONPYCACHEPREFIX``) so the shared release trees stay pristine.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
XGRAMMAR_PIN = "xgrammar==0.2.8"  # vLLM 0.32-0.34 pin it exactly; 0.31 pins 0.2.7, 0.30 >=0.2.1
WORKER_TIMEOUT_S = 600


from sm120kit.patchset.release import locked  # noqa: E402


def cache_root() -> Path:
    from sm120kit.paths import cache_dir

    return cache_dir() / "runtime"


def variant_for(release: str) -> Any:
    from sm120kit.models.series import load_series

    series = load_series()
    alias = series.alias_for_release(release)
    assert alias is not None, f"manifest has no target for vllm {release}"
    _target, variant = series.variant_for(alias)
    variant.check_checksums()
    return variant


def upstream_tree(release: str) -> Path:
    from sm120kit.patchset.release import release_tree

    return release_tree("vllm", release)


def patched_tree(release: str) -> Path:
    """The release tree with its variant applied by ``git apply`` (cached, rebuilt on change)."""
    variant = variant_for(release)
    key = hashlib.sha256(
        "\n".join([release, variant.name, *(p.sha256 for p in variant.patches)]).encode()
    ).hexdigest()
    # one directory per series state: sessions testing different series never rebuild each other's
    dest = cache_root() / f"vllm-{release}-patched-{key[:12]}"
    stamp = dest / ".sm120kit-patched"
    if stamp.is_file() and stamp.read_text().strip() == key:
        return dest
    src = upstream_tree(release)
    with locked(dest):
        if stamp.is_file() and stamp.read_text().strip() == key:
            return dest
        tmp = dest.with_name(dest.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp)
        for patch in variant.patches:
            proc = subprocess.run(
                ["git", "apply", "--whitespace=nowarn", str(variant.patch_path(patch))],
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=120,
                # the cache may lie inside a git checkout (CI keeps it in .ci/cache): without a
                # ceiling, git apply works relative to that repo and silently skips every file
                env={**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp.parent)},
            )
            if proc.returncode != 0:
                shutil.rmtree(tmp, ignore_errors=True)
                raise AssertionError(
                    f"git apply {patch.file} ({variant.name}) failed on vllm {release}: "
                    f"{proc.stderr.strip()[:800]}"
                )
        (tmp / ".sm120kit-patched").write_text(key + "\n")
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
    return dest


def nodeps_dir() -> Path:
    """``xgrammar`` without its triton requirement (installed once into the cache)."""
    dest = cache_root() / "nodeps"
    stamp = dest / ".complete"
    if stamp.is_file() and stamp.read_text().strip() == XGRAMMAR_PIN:
        return dest
    with locked(dest):
        if stamp.is_file() and stamp.read_text().strip() == XGRAMMAR_PIN:
            return dest
        tmp = dest.with_name(dest.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        proc = subprocess.run(
            [
                sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                "--disable-pip-version-check", "--target", str(tmp), XGRAMMAR_PIN,
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise AssertionError(f"pip install --no-deps {XGRAMMAR_PIN} failed: {proc.stderr[-800:]}")
        (tmp / ".complete").write_text(XGRAMMAR_PIN + "\n")
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
    return dest


def worker_env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    parts = [str(tree), str(nodeps_dir()), str(HERE)]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env["PYTHONPYCACHEPREFIX"] = str(cache_root() / "pycache")
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["VLLM_NO_USAGE_STATS"] = "1"
    env["DO_NOT_TRACK"] = "1"
    env["VLLM_LOGGING_LEVEL"] = "ERROR"
    # a real vLLM knob: the FlashInfer workspace size (394 MiB by default) - small on CPU
    env["VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE"] = str(1 << 20)
    env["OMP_NUM_THREADS"] = "1"
    env.pop("PYTHONHOME", None)
    return env


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class WorkerRun:
    release: str
    kind: str  # "patched" | "upstream"
    mode: str
    rc: int
    seconds: float
    out_dir: Path
    stdout: str
    stderr: str
    result: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        return (
            f"worker {self.mode} on vllm {self.release} ({self.kind}) rc={self.rc}\n"
            f"--- stdout ---\n{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-6000:]}"
        )


def run_worker(release: str, kind: str, mode: str, out_dir: Path, *args: str) -> WorkerRun:
    tree = patched_tree(release) if kind == "patched" else upstream_tree(release)
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "rtworker", mode, "--kind", kind, "--out", str(out_dir), *args]
    t0 = time.monotonic()
    proc = subprocess.run(
        cmd,
        cwd=out_dir,
        env=worker_env(tree),
        capture_output=True,
        text=True,
        timeout=WORKER_TIMEOUT_S,
    )
    run = WorkerRun(
        release=release,
        kind=kind,
        mode=mode,
        rc=proc.returncode,
        seconds=time.monotonic() - t0,
        out_dir=out_dir,
        stdout=proc.stdout,
        stderr=proc.stderr,
    )
    res = out_dir / "result.json"
    if res.is_file():
        run.result = json.loads(res.read_text())
    return run


class RuntimeResults:
    """One patched and one upstream worker run per release, shared by every test (lazily)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self._runs: dict[tuple[str, str], WorkerRun] = {}
        self._gloo: dict[tuple[str, str], list[WorkerRun]] = {}

    def get(self, release: str, kind: str) -> WorkerRun:
        if (release, kind) not in self._runs:
            # build the trees here (git apply, cached), then run the release's patched and
            # upstream workers side by side: two processes for CI's two cores
            patched_tree(release)
            upstream_tree(release)
            nodeps_dir()
            kinds = [k for k in ("patched", "upstream") if (release, k) not in self._runs]
            with ThreadPoolExecutor(max_workers=len(kinds)) as pool:
                # before 0.30 the workspace and warmup APIs differ (tests/port covers those):
                # only the SM120 impl scenarios run there
                mode = "all" if tuple(int(x) for x in release.split(".")) >= (0, 30) else "impl"
                futures = {
                    k: pool.submit(
                        run_worker, release, k, mode, self.base / f"{release}-{k}",
                        "--release", release,
                    )
                    for k in kinds
                }
                for k, fut in futures.items():
                    self._runs[(release, k)] = fut.result()
        return self._runs[(release, kind)]

    def gloo(self, release: str, world: int = 2) -> list[WorkerRun]:
        """``world`` patched workers of ``release`` joined in one real gloo process group."""
        key = (release, f"gloo{world}")
        if key not in self._gloo:
            patched_tree(release)
            port = _free_port()
            with ThreadPoolExecutor(max_workers=world) as pool:
                futures = [
                    pool.submit(
                        run_worker, release, "patched", "gloo",
                        self.base / f"{release}-gloo{world}-rank{r}", "--release", release,
                        "--rank", str(r), "--world", str(world), "--port", str(port),
                    )
                    for r in range(world)
                ]
                self._gloo[key] = [f.result() for f in futures]
        return self._gloo[key]

    def tree(self, release: str, kind: str) -> Path:
        return patched_tree(release) if kind == "patched" else upstream_tree(release)

    def ok(self, release: str, kind: str) -> WorkerRun:
        run = self.get(release, kind)
        assert run.rc == 0 and run.result.get("status") == "ok", run.describe()
        return run


@pytest.fixture(scope="session")
def runtime_results(tmp_path_factory: pytest.TempPathFactory) -> RuntimeResults:
    return RuntimeResults(tmp_path_factory.mktemp("vllm-runtime"))
