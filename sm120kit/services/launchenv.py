"""The launch line as collect sees it: is it ``vllm serve``, does that vLLM take
``--watchdog-config``, and the diagnostic environment added for the launch (only what the user did
not set)."""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sm120kit.errors import UserError
from sm120kit.evidence import flight
from sm120kit.models.serve_args import ServeArgs, parse_serve_args


def _vllm_arg_utils_candidates(argv0: str) -> list[Path]:
    cands: list[Path] = []
    exe = shutil.which(argv0) if argv0 else None
    pys: list[Path] = []
    if exe:
        try:
            first = Path(exe).read_bytes()[:256].split(b"\n", 1)[0]
            if first.startswith(b"#!"):
                pys.append(Path(first[2:].decode(errors="replace").strip().split()[0]))
        except OSError:
            pass
        pys.append(Path(exe))
    for py in pys:
        prefix = py.resolve().parent.parent if py.exists() else py.parent.parent
        for sp in sorted(prefix.glob("lib/python3*/site-packages")) + sorted(
                prefix.glob("lib/python3*/dist-packages")):
            cands.append(sp / "vllm" / "engine" / "arg_utils.py")
    try:
        import importlib.util

        spec = importlib.util.find_spec("vllm")  # top level: does not import vllm
        if spec is not None and spec.origin:
            cands.append(Path(spec.origin).parent / "engine" / "arg_utils.py")
    except (ImportError, ValueError):
        pass
    return list(dict.fromkeys(cands))


def torch_version_near(argv0: str) -> tuple[int, int] | None:
    """(major, minor) of the torch installed next to the command's vLLM, else of ours."""
    dirs = {p.parent.parent.parent for p in _vllm_arg_utils_candidates(argv0)}
    for d in dirs:
        for di in sorted(d.glob("torch-*.dist-info")):
            m = re.match(r"torch-(\d+)\.(\d+)", di.name)
            if m:
                return int(m.group(1)), int(m.group(2))
    try:
        from importlib import metadata

        m = re.match(r"(\d+)\.(\d+)", metadata.version("torch"))
        return (int(m.group(1)), int(m.group(2))) if m else None
    except Exception:
        return None


def vllm_supports_watchdog(argv0: str) -> tuple[bool | None, str]:
    """Whether the vLLM that ``argv0`` runs has ``--watchdog-config`` (from its arg parser source,
    without importing vllm). (None, why) when no vLLM source is found."""
    for p in _vllm_arg_utils_candidates(argv0):
        try:
            txt = p.read_text(errors="replace")
        except OSError:
            continue
        return ('"--watchdog-config"' in txt or "'--watchdog-config'" in txt), str(p)
    return None, "vllm/engine/arg_utils.py not found"


def serve_args_of(argv: list[str]) -> ServeArgs:
    """The launch line as :mod:`sm120kit.models.serve_args` reads it; a value vLLM would reject
    leaves the defaults with a note (collect never refuses to run a launch)."""
    try:
        return parse_serve_args(argv)
    except UserError as exc:
        return ServeArgs(argv=list(argv), notes=[f"launch line not fully read: {exc.message}"])


def is_vllm_serve(argv: list[str]) -> bool:
    if not argv:
        return False
    base = os.path.basename(argv[0])
    if base == "vllm" and len(argv) > 1 and argv[1] == "serve":
        return True
    joined = " ".join(argv[:6])
    return bool(re.search(r"-m vllm(?:\.entrypoints\.cli\.main)? serve|vllm\.entrypoints\.openai\.api_server", joined))


def diagnostic_env(
    bundle_root: Path, base_env: dict[str, str], argv: list[str], *, stall_timeout: float,
    site_dir: Path | None,
) -> tuple[dict[str, str], dict[str, str], list[str], str | None]:
    """(env, added vars, argv, watchdog note): diagnostic settings the user did not set."""
    env = dict(base_env)
    added: dict[str, str] = {}

    def put(k: str, v: str) -> None:
        if k not in env:
            env[k] = v
            added[k] = v

    flight_prefix = str(bundle_root / "flight" / "nccl_trace_rank_")
    if "TORCH_FR_BUFFER_SIZE" not in env and "TORCH_NCCL_TRACE_BUFFER_SIZE" not in env:
        put("TORCH_FR_BUFFER_SIZE", "2000")
        tv = torch_version_near(argv[0] if argv else "")
        if tv is None or tv < (2, 10):
            # older torch reads only the old name; newer ones warn that it is deprecated
            put("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000")
    put("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
    # the two names are one setting (TORCH_FR_DUMP_TEMP_FILE is the new name and wins in torch
    # >= 2.10): adding one beside the user's other would silently move their dumps
    if not any(k in env for k in flight.FR_PREFIX_VARS):
        put("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", flight_prefix)
        put("TORCH_FR_DUMP_TEMP_FILE", flight_prefix)
    put("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", str(bundle_root / "flight" / "pipe_rank_"))
    if "NCCL_DEBUG" not in env and "NCCL_DEBUG_FILE" not in env:
        put("NCCL_DEBUG", "INFO")
        put("NCCL_DEBUG_FILE", str(bundle_root / "nccl" / "%h.%p.log"))
    put("PYTHONUNBUFFERED", "1")  # buffered output would look like silence
    # NCCL >= 2.31: P2P write/read check of every GPU pair at communicator init, reported as
    # 'NCCL DIAG' lines (informational; older NCCL ignores the variable)
    put("NCCL_RUN_DIAGNOSTICS", "1")
    if site_dir is not None:
        fh = bundle_root / "faulthandler"
        fh.mkdir(exist_ok=True)
        added["SM120KIT_FAULTHANDLER_DIR"] = env["SM120KIT_FAULTHANDLER_DIR"] = str(fh)
        pp = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(site_dir) + (os.pathsep + pp if pp else "")
        added["PYTHONPATH"] = env["PYTHONPATH"]
    note = None
    argv = list(argv)
    if is_vllm_serve(argv):
        if "watchdog_config" in serve_args_of(argv).given:
            note = "--watchdog-config given by the user: kept"
        else:
            ok, where = vllm_supports_watchdog(argv[0])
            if ok:
                wd = bundle_root / "vllm-watchdog"
                wd.mkdir(exist_ok=True)
                cfg = {"dump_dir": str(wd), "timeout": max(10, int(stall_timeout * 0.75)),
                       "check_interval": 5}
                argv += ["--watchdog-config", json.dumps(cfg)]
                note = f"added --watchdog-config {json.dumps(cfg)} (supported: {where})"
            else:
                note = ("vLLM --watchdog-config not supported by this vLLM" if ok is False
                        else f"vLLM --watchdog-config not added: {where}")
    return env, added, argv, note


@dataclass
class LaunchEnv:
    env: dict[str, str]
    added: dict[str, str]
    argv: list[str]
    watchdog_note: str | None
    serve_meta: dict[str, Any]


def prepare_launch(bundle_root: Path, argv: list[str], *, diag_env: bool, stall_timeout: float,
                   site_dir: Path | None) -> LaunchEnv:
    """The environment and argv a launch runs with, and what the bundle records of its
    ``vllm serve`` line."""
    base_env = dict(os.environ)
    if diag_env:
        env, added, full, note = diagnostic_env(bundle_root, base_env, argv,
                                                stall_timeout=stall_timeout, site_dir=site_dir)
    else:
        env, added, full, note = base_env, {}, list(argv), None
    meta: dict[str, Any] = {}
    if is_vllm_serve(argv):
        sa = serve_args_of(argv)
        meta["serve_args"] = sa.shape()
        if sa.notes:
            meta["serve_args_notes"] = list(sa.notes)
    return LaunchEnv(env, added, full, note, meta)
