"""FlashInfer facts from the installed wheel's metadata and source text (no import).

What is read (see ``shared/reference/doctor-checks.md`` §1): the version, the parameters of
``trtllm_batch_decode_with_kv_cache_mla`` in ``mla/_core.py``, whether the SM120 sparse module
(``mla/_sparse_mla_sm120.py`` up to 0.7.0, a package from 0.7.1) exists, the SM120 routing
line, the decode dispatch sets (< 0.7: literal frozensets) or the head limit (0.7+: envelope),
kernel providers (AOT in the wheel, flashinfer-jit-cache and per-arch providers) and the JIT cache.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sm120kit.facts.packages import dist_names_matching, get_dist, package_dir, version_ge
from sm120kit.facts.source import function_params, module_assignment, read_text
from sm120kit.models.constants import FLASHINFER_VERSION_CHECK_ENV

DECODE_FN = "trtllm_batch_decode_with_kv_cache_mla"
REQUIRED_PARAMS = ("sparse_mla_top_k", "kv_scale_format", "lse", "return_lse")
ROUTING_TEXT = "cc[0] == 12 and sparse_mla_top_k > 0"
MODULE = "sparse_mla_sm120"
PROVIDER_RE = r"flashinfer-jit-cache-(sm\d{2,3}[af]?)"
SM120_MIN = "0.6.14"  # first flashinfer-python with the SM120 sparse-MLA API (kv_scale_format)
#: FlashInfer aborts at import when flashinfer-cubin's version differs from its own, unless set
VERSION_CHECK_ENV = FLASHINFER_VERSION_CHECK_ENV


def cubin_mismatch(version: str | None, cubin: str | None, environ: Mapping[str, str]) -> bool:
    """flashinfer-cubin installed at another version and the guard not disabled: import fails
    (``flashinfer/jit/env.py``)."""
    if not (version and cubin) or environ.get(VERSION_CHECK_ENV):
        return False
    return cubin.split("+")[0] != version.split("+")[0]


@dataclass
class FlashInferInfo:
    installed: bool
    version: str | None = None
    package_dir: str | None = None
    core_path: str | None = None
    decode_params: list[str] | None = None
    missing_params: list[str] = field(default_factory=list)
    sm120_module: str | None = None
    routing_present: bool | None = None
    dispatch_kind: str | None = None  # "set" (< 0.7), "envelope" (0.7+), None
    dsv32_dispatch: list[tuple[int, int]] | None = None
    dsv4_dispatch: list[tuple[int, int]] | None = None
    max_heads: int | None = None
    decode_max_tokens: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def has_sm120_api(self) -> bool:
        return bool(self.decode_params is not None and not self.missing_params
                    and self.sm120_module)


def inspect(paths: Sequence[str] | None = None) -> FlashInferInfo:
    d = get_dist("flashinfer-python", paths)
    pkg = package_dir("flashinfer", paths)
    if d is None and pkg is None:
        return FlashInferInfo(installed=False)
    info = FlashInferInfo(installed=True, version=d.version if d else None,
                          package_dir=str(pkg) if pkg else None)
    if pkg is None:
        info.notes.append("flashinfer-python metadata found but no flashinfer package directory")
        return info
    core = pkg / "mla" / "_core.py"
    if not core.exists():  # very old layouts
        core = pkg / "mla.py"
    src = read_text(core)
    info.core_path = str(core)
    if src is not None:
        info.decode_params = function_params(src, DECODE_FN)
        if info.decode_params is not None:
            info.missing_params = [p for p in REQUIRED_PARAMS if p not in info.decode_params]
        info.routing_present = ROUTING_TEXT in src
    mod_file, mod_pkg = pkg / "mla" / f"_{MODULE}.py", pkg / "mla" / f"_{MODULE}"
    if mod_pkg.is_dir():
        info.sm120_module = str(mod_pkg)
    elif mod_file.exists():
        info.sm120_module = str(mod_file)
    _dispatch(info, pkg)
    return info


def _dispatch(info: FlashInferInfo, pkg: Path) -> None:
    if not info.sm120_module:
        return
    # 0.7.1+: package with _policy.py; 0.7.0: _sparse_mla_sm120_plan.py; 0.6.14-0.6.18: one file
    candidates = [pkg / "mla" / f"_{MODULE}" / "_policy.py", pkg / "mla" / f"_{MODULE}_plan.py",
                  pkg / "mla" / f"_{MODULE}.py"]
    for path in candidates:
        src = read_text(path)
        if src is None:
            continue
        found = False
        for name, attr in (("_DECODE_DSV3_2_DISPATCH", "dsv32_dispatch"),
                           ("_DECODE_DSV4_DISPATCH", "dsv4_dispatch")):
            try:
                val = module_assignment(src, name)
            except KeyError:
                continue
            except ValueError:
                info.dispatch_kind = "envelope"
                found = True
                continue
            info.dispatch_kind = "set"
            setattr(info, attr, sorted((int(h), int(k)) for h, k in val))
            found = True
        for name, attr in (("_DECODE_MAX_HEADS", "max_heads"),
                           ("_DECODE_MAX_TOKENS", "decode_max_tokens")):
            try:
                setattr(info, attr, int(module_assignment(src, name)))
            except (KeyError, ValueError, TypeError):
                pass
        if found:
            return


def jit_arch_dir(capabilities: Sequence[tuple[int, int]], nvcc_or_cuda: str | None,
                 environ: Mapping[str, str]) -> tuple[str | None, str]:
    """FlashInfer's JIT arch directory name (e.g. ``"120f"``) and how it was derived.

    ``FLASHINFER_CUDA_ARCH_LIST`` wins; otherwise the GPU capabilities with FlashInfer's suffix
    rule for SM 12.0 (``f`` with CUDA >= 12.9, ``a`` with 12.8).
    """
    archs: set[tuple[int, str]] = set()
    env_list = environ.get("FLASHINFER_CUDA_ARCH_LIST")
    if env_list:
        for a in env_list.split():
            if "." not in a:
                continue
            major, minor = a.split(".", 1)
            if minor and minor[-1].isalpha():
                archs.add((int(major), minor))
            else:
                archs.add(_normalize(int(major), int(minor or 0), nvcc_or_cuda))
        how = f"FLASHINFER_CUDA_ARCH_LIST={env_list!r}"
    else:
        for cc in capabilities:
            archs.add(_normalize(cc[0], cc[1], nvcc_or_cuda))
        how = "GPU compute capabilities" + (f" and CUDA {nvcc_or_cuda}" if nvcc_or_cuda else "")
    if not archs:
        return None, how
    return "_".join(f"{ma}{mi}" for ma, mi in sorted(archs)), how


def _normalize(major: int, minor: int, cuda: str | None) -> tuple[int, str]:
    if major == 9 or major >= 10 and major != 12:
        return (major, f"{minor}a")
    if major == 12:
        if minor == 0:
            return (12, "0f") if version_ge(cuda, "12.9") or not cuda else (12, "0a")
        return (12, f"{minor}a")
    return (major, str(minor))


def cache_base(environ: Mapping[str, str]) -> Path:
    base = environ.get("FLASHINFER_WORKSPACE_BASE") or environ.get("HOME") or os.path.expanduser("~")
    return Path(base) / ".cache" / "flashinfer"


def kernels(info: FlashInferInfo, *, arch_dir: str | None, environ: Mapping[str, str],
            paths: Sequence[str] | None = None) -> dict[str, Any]:
    """Where a compiled ``sparse_mla_sm120`` could come from, and which exist."""
    out: dict[str, Any] = {"aot": None, "jit_cache_shim": None, "providers": [], "jit_cache": None,
                           "found": []}
    if info.package_dir:
        aot = Path(info.package_dir) / "data" / "aot" / MODULE / f"{MODULE}.so"
        out["aot"] = {"path": str(aot), "exists": aot.exists()}
        if aot.exists():
            out["found"].append(str(aot))
    shim = get_dist("flashinfer-jit-cache", paths)
    if shim is not None:
        out["jit_cache_shim"] = {"version": shim.version}
        sd = package_dir("flashinfer_jit_cache", paths)
        if sd is not None:
            for so in _find_so(sd):
                out["found"].append(str(so))
    for name, ver in dist_names_matching(PROVIDER_RE, paths):
        prov: dict[str, Any] = {"name": name, "version": ver, "module_so": []}
        pd = package_dir(name.replace("-", "_"), paths)
        if pd is not None:
            prov["module_so"] = [str(p) for p in _find_so(pd)]
            out["found"].extend(prov["module_so"])
        out["providers"].append(prov)
    if info.version and arch_dir:
        p = cache_base(environ) / info.version / arch_dir / "cached_ops" / MODULE / f"{MODULE}.so"
        out["jit_cache"] = {"path": str(p), "exists": p.exists()}
        if p.exists():
            out["found"].append(str(p))
    return out


def _find_so(pkg_dir: Path) -> list[Path]:
    """``<dir>[/<x>[/<y>]]/sparse_mla_sm120/sparse_mla_sm120.so`` (bounded depth, no walk)."""
    pats = [f"{MODULE}/{MODULE}.so", f"*/{MODULE}/{MODULE}.so", f"*/*/{MODULE}/{MODULE}.so"]
    found: list[Path] = []
    for pat in pats:
        found.extend(sorted(pkg_dir.glob(pat)))
    return found


def stale_caches(environ: Mapping[str, str], installed: str | None) -> list[dict[str, Any]]:
    """FlashInfer JIT cache directories of versions other than the installed one."""
    base = cache_base(environ)
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return []
    out = []
    for e in entries:
        p = base / e
        if e in ("cubins",) or not p.is_dir() or not e[:1].isdigit():
            continue
        if installed is None or e != installed:
            out.append({"version": e, "path": str(p)})
    return out
