"""The one module that talks to pynvml (nvidia-ml-py): a thin seam so tests can replay values.

A seam has a single method, ``call(fn, *args)``, which calls the pynvml function named ``fn`` and
turns every NVML error into :class:`NvmlError` with a stable ``kind``. ``PynvmlSeam`` is the real
one; ``RecordedSeam`` replays recorded values (tests, and recordings taken on real machines).
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, Protocol

# NVML return codes (nvml.h) -> stable kinds used in evidence and messages.
ERROR_KINDS: dict[int, str] = {
    1: "uninitialized",
    2: "invalid_argument",
    3: "not_supported",
    4: "no_permission",
    6: "not_found",
    9: "driver_not_loaded",
    10: "timeout",
    12: "library_not_found",
    13: "function_not_found",
    15: "gpu_is_lost",
    16: "reset_required",
    18: "lib_rm_version_mismatch",
    25: "argument_version_mismatch",
    28: "gpu_not_found",
}


class NvmlError(Exception):
    """An NVML call failed; ``kind`` is one of ERROR_KINDS' values, ``no_pynvml`` or ``unknown``."""

    def __init__(self, kind: str, message: str = "", code: int | None = None):
        super().__init__(message or kind)
        self.kind = kind
        self.code = code


class NvmlSeam(Protocol):
    def call(self, fn: str, *args: Any) -> Any: ...


class PynvmlSeam:
    """The real seam: pynvml imported here (lazily, on construction) and nowhere else."""

    def __init__(self) -> None:
        try:
            import pynvml
        except Exception as exc:  # ImportError, or a broken install
            raise NvmlError("no_pynvml", f"nvidia-ml-py (pynvml) is not importable: {exc}") from exc
        self._m = pynvml

    def call(self, fn: str, *args: Any) -> Any:
        if fn == "nvmlDeviceGetMemoryInfo_v2":
            # nvmlMemory_v2: `used` excludes the driver-reserved memory, as nvidia-smi shows it
            # (v1's `used` includes it: on an idle H200 v1 said 615 MiB, nvidia-smi 0 MiB).
            ver = getattr(self._m, "nvmlMemory_v2", None)
            if ver is None:
                raise NvmlError("function_not_found", "pynvml has no nvmlMemory_v2")
            try:
                return self._m.nvmlDeviceGetMemoryInfo(*args, version=ver)
            except TypeError as exc:  # an nvidia-ml-py without the version keyword
                raise NvmlError("function_not_found", f"nvmlDeviceGetMemoryInfo: {exc}") from None
            except self._m.NVMLError as exc:
                code = getattr(exc, "value", None)
                kind = ERROR_KINDS.get(code, "unknown") if isinstance(code, int) else "unknown"
                raise NvmlError(kind, f"{fn}: {exc}", code) from None
        f: Callable[..., Any] | None = getattr(self._m, fn, None)
        if f is None:
            raise NvmlError("function_not_found", f"pynvml has no {fn}")
        try:
            return f(*args)
        except self._m.NVMLError as exc:
            code = getattr(exc, "value", None)
            kind = ERROR_KINDS.get(code, "unknown") if isinstance(code, int) else "unknown"
            raise NvmlError(kind, f"{fn}: {exc}", code) from None


def _ns(value: Any) -> Any:
    """Dicts become attribute namespaces (like pynvml's ctypes structs); lists recurse."""
    if isinstance(value, dict):
        return SimpleNamespace(**{k: _ns(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_ns(v) for v in value]
    return value


class RecordedSeam:
    """Replays recorded NVML answers. NOT the real NVML: for tests and recorded machines.

    ``answers`` maps a function name to either a value (same answer for every argument list), or a
    dict keyed by the ``repr`` of the argument tuple after the handle was mapped to its index
    (e.g. ``"(0,)"``, ``"(0, 1, 0)"``). A value ``{"error": KIND}`` raises ``NvmlError(KIND)``.
    Handles are the integer NVML indices. Missing functions raise ``function_not_found``.
    """

    def __init__(self, answers: dict[str, Any]):
        self.answers = answers
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def call(self, fn: str, *args: Any) -> Any:
        self.calls.append((fn, args))
        if fn == "nvmlDeviceGetHandleByIndex" and fn not in self.answers:
            count = self.call("nvmlDeviceGetCount")
            if not 0 <= int(args[0]) < int(count):
                raise NvmlError("invalid_argument", f"no device {args[0]}")
            return int(args[0])
        if fn not in self.answers:
            if fn in ("nvmlInit", "nvmlShutdown"):
                return None
            raise NvmlError("function_not_found", f"recording has no {fn}")
        ans = self.answers[fn]
        if isinstance(ans, dict) and "error" not in ans and ans and all(
                k.startswith("(") for k in ans):
            key = repr(tuple(args))
            if key not in ans:
                raise NvmlError("not_supported", f"recording has no {fn}{key}")
            ans = ans[key]
        if isinstance(ans, dict) and set(ans) == {"error"}:
            raise NvmlError(str(ans["error"]), f"{fn}: recorded {ans['error']}")
        return _ns(ans)


def _plain(value: Any) -> Any:
    """pynvml results (ctypes structs, friendly objects, bytes) to JSON-able values."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    fields = getattr(value, "_fields_", None)
    if fields:
        return {name: _plain(getattr(value, name)) for name, *_ in fields}
    if hasattr(value, "__dict__"):
        return {k: _plain(v) for k, v in vars(value).items() if not k.startswith("_")}
    return repr(value)


class RecordingSeam:
    """Wraps a real seam and records every answer in :class:`RecordedSeam`'s format, so a run on
    a real GPU host can be replayed in tests (``python -m sm120kit.facts.nvml --record F``)."""

    def __init__(self, inner: NvmlSeam):
        self.inner = inner
        self.answers: dict[str, dict[str, Any]] = {}
        self._index: dict[int, int] = {}

    def call(self, fn: str, *args: Any) -> Any:
        key_args = tuple(self._index.get(id(a), a) if not isinstance(a, int | str | bytes)
                         else a for a in args)
        key = repr(key_args)
        try:
            res = self.inner.call(fn, *args)
        except NvmlError as exc:
            self.answers.setdefault(fn, {})[key] = {"error": exc.kind}
            raise
        if fn == "nvmlDeviceGetHandleByIndex":
            self._index[id(res)] = int(args[0])
        else:
            self.answers.setdefault(fn, {})[key] = _plain(res)
        return res
