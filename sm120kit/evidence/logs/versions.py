"""Versions and launch configuration printed in vLLM/NCCL/torch logs.

``VersionScan.feed(line)`` looks at one ANSI-stripped line and fills ``versions`` (vllm, torch,
nccl, flashinfer, cuda, cuda_driver, driver, gpu, compute_capability) and ``config`` (tp, pp, dp,
dcp, ep, mtp, speculative_method, attention_backend, kv_cache_dtype, kv_cache_format, model).
The first value seen wins, except where a later line is more specific (``Using
AttentionBackendEnum.X`` over nothing). Sources, newest era first: the banner, ``non-default
args: {...}``, ``Initializing a V1 LLM engine (vX) with config: ...``, ``Command: vllm serve``,
per-rank ``vLLM is using nccl==``, NCCL ``NCCL version``, ``Device capability``.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from sm120kit.errors import UserError
from sm120kit.evidence.logs.prefix import worker_parts
from sm120kit.models.serve_args import parse_serve_args

_QUICK = (
    "version", "nccl", "args", "config", "Backend", "backend", "kv cache", "KV cache",
    "capability", "NVIDIA", "Driver", "serve", "torch", "flashinfer", "FlashInfer", "world_size",
    "Capability", "CUDA", "fp8_ds_mla", "speculative", "Speculative", "--",
)

_PATTERNS: tuple[tuple[str, str, re.Pattern[str]], ...] = tuple(
    (kind, key, re.compile(rx))
    for kind, key, rx in (
        ("versions", "vllm", r"█\s+version\s+(\S+)"),
        ("versions", "vllm", r"Initializing an? (?:V1 )?LLM engine \(v(\S+?)\)"),
        ("versions", "vllm", r"vLLM API server version (\S+)"),
        ("versions", "vllm", r"Launching vLLM \(v(\S+?)\)"),
        ("versions", "vllm", r"\bvllm[= ]=?=?(\d+\.\d+\.\d+\S*)"),
        ("versions", "nccl", r"vLLM is using nccl==(\d+\.\d+\.\d+)"),
        ("versions", "nccl", r"NCCL version (\d+\.\d+\.\d+)"),
        ("versions", "nccl", r"libnccl[\w.-]*\.so\.(\d+\.\d+\.\d+)"),
        ("versions", "nccl", r"nvidia-nccl-cu\d+[= ]=?=?(\d+\.\d+\.\d+)"),
        ("versions", "cuda", r"NCCL version \S+\+cuda(\d+\.\d+)"),
        ("versions", "torch", r"\btorch(?:==| version:? |: )v?(\d+\.\d+\.\d+[\w.+]*)"),
        ("versions", "torch", r"PyTorch version:? (\d+\.\d+\.\d+[\w.+]*)"),
        ("versions", "flashinfer", r"flashinfer(?:-python|_python)?(?:==| version:? |: )v?(\d+\.\d+[\w.+]*)"),
        ("versions", "flashinfer", r"FlashInfer (?:version|v)\s*(\d+\.\d+[\w.+]*)"),
        ("versions", "driver", r"Driver Version:\s*(\d+\.\d+(?:\.\d+)?)"),
        ("versions", "driver", r"NVIDIA driver(?: version)?[: ]+(\d{3}\.\d+(?:\.\d+)?)"),
        ("versions", "cuda_driver", r"CUDA (?:Driver )?Version:\s*(\d+\.\d+)"),
        ("versions", "cuda", r"CUDA runtime(?: version)?:?\s*(\d+\.\d+)"),
        ("versions", "compute_capability", r"[Cc](?:ompute|apability|evice) capability:? (\d+\.\d+)"),
        ("versions", "compute_capability", r"Device capability (\d+\.\d+)"),
        ("versions", "gpu", r"(NVIDIA (?:RTX|GeForce|H\d|A\d|B\d|L\d|GB\d|DGX)[\w -]*?(?:Blackwell|Edition|Ada|\b)(?: (?:Workstation|Server|Max-Q)[\w -]*Edition)?)"),
        ("config", "attention_backend", r"Using AttentionBackendEnum\.(\w+) backend"),
        ("config", "attention_backend", r"Using (Flash Attention|XFormers|FlashInfer|Torch SDPA|FlashMLA|Triton MLA) backend"),
        ("config", "kv_cache_format", r"Using DeepSeek's (fp8_ds_mla) KV cache format"),
    )
)
_ARGS_KEYS = {
    "tensor_parallel_size": "tp",
    "pipeline_parallel_size": "pp",
    "data_parallel_size": "dp",
    "decode_context_parallel_size": "dcp",
    "kv_cache_dtype": "kv_cache_dtype",
    "attention_backend": "attention_backend",
    "model": "model",
    "enable_expert_parallel": "ep",
}
_KV = re.compile(
    r"['\"]?(?P<k>tensor_parallel_size|pipeline_parallel_size|data_parallel_size"
    r"|decode_context_parallel_size|kv_cache_dtype|attention_backend|enable_expert_parallel"
    r"|model)['\"]?(?:=|: )(?P<v>'[^']*'|\"[^\"]*\"|[\w./-]+)"
)
# the ``vllm serve`` options read off a launch line in a log (parsed by models/serve_args, the
# one serve-line parser), and the config key each fills
_SERVE_FIELDS = (
    ("tensor_parallel_size", "tp"), ("pipeline_parallel_size", "pp"),
    ("data_parallel_size", "dp"), ("decode_context_parallel_size", "dcp"),
    ("kv_cache_dtype", "kv_cache_dtype"), ("attention_backend", "attention_backend"),
    ("enable_expert_parallel", "ep"), ("model", "model"),
)
# where the quoted command starts, most specific first
_SERVE_STARTS = (re.compile(r"Command:\s*"), re.compile(r"(?<!\S)\S*vllm serve\b"),
                 re.compile(r"(?<!\S)\S*api_server(?:\.py)?(?=\s|$)"))
_SPEC_NONE = re.compile(r"speculative_config=None")
_SPEC_OBJ = re.compile(
    r"speculative_config=SpeculativeConfig\(method='(?P<m>\w+)'.*?num_spec_tokens=(?P<n>\d+)"
    r"|'speculative_config': \{[^}]*?'method': '(?P<m2>\w+)'[^}]*?'num_speculative_tokens': (?P<n2>\d+)"
    r"|'speculative_config': \{[^}]*?'num_speculative_tokens': (?P<n3>\d+)[^}]*?'method': '(?P<m3>\w+)'"
)
_WORLD = re.compile(r"world_size=(?P<w>\d+) rank=\d+")
_INT_KEYS = {"tp", "pp", "dp", "dcp"}
_V0_BACKENDS = {
    "Flash Attention": "FLASH_ATTN", "XFormers": "XFORMERS", "FlashInfer": "FLASHINFER",
    "Torch SDPA": "TORCH_SDPA", "FlashMLA": "FLASHMLA", "Triton MLA": "TRITON_MLA",
}


def serve_line_config(line: str) -> dict[str, Any]:
    """The launch configuration on a log line that quotes a ``vllm serve`` (or api_server)
    command, read with the one serve-line parser; ``{}`` when the line has none or vLLM would
    reject it."""
    m = next((m for rx in _SERVE_STARTS if (m := rx.search(line))), None)
    if m is None:
        return {}
    text = line[m.end():] if m.group(0).startswith("Command:") else line[m.start():]
    try:
        argv = shlex.split(text)
    except ValueError:  # an unbalanced quote in the log text
        argv = text.split()
    if argv and "api_server" in argv[0]:
        argv = argv[1:]
    try:
        sa = parse_serve_args(argv)
    except UserError:
        return {}
    return {key: getattr(sa, name) for name, key in _SERVE_FIELDS if name in sa.given}


class VersionScan:
    """Accumulates versions/config over the lines of one analysis."""

    def __init__(self) -> None:
        self.versions: dict[str, Any] = {}
        self.config: dict[str, Any] = {}
        self.world_size: int | None = None
        self.gpus: dict[str, int] = {}

    def _set(self, kind: str, key: str, value: Any, override: bool = False) -> None:
        d = self.versions if kind == "versions" else self.config
        if value in (None, ""):
            return
        if key in _INT_KEYS:
            try:
                value = int(value)
            except (TypeError, ValueError):
                return
        if key == "ep":
            value = str(value).strip("'\"").lower() in ("true", "1", "") or value is True
        if isinstance(value, str):
            value = value.strip("'\"").rstrip(".,)")
            if not value:
                return
        if override or key not in d:
            d[key] = value

    def feed(self, line: str) -> None:
        for q in _QUICK:
            if q in line:
                break
        else:
            return
        for kind, key, rx in _PATTERNS:
            m = rx.search(line)
            if m:
                self._pattern(kind, key, rx, m)
        self._config_lines(line)
        if "speculative_config" in line:
            self._speculative(line)
        if "world_size=" in line:
            w = _WORLD.search(line)
            if w:
                self.world_size = int(w.group("w"))

    def _config_lines(self, line: str) -> None:
        """vLLM's 'non-default args' / engine config dump and a 'vllm serve --...' command."""
        if "non-default args" in line or "with config:" in line or "EngineArgs(" in line:
            for km in _KV.finditer(line):
                k = _ARGS_KEYS[km.group("k")]
                if k == "model" and "model" in self.config:
                    continue
                self._set("config", k, km.group("v"))
        if "--" in line and ("vllm serve" in line or "Command:" in line or "api_server" in line):
            for k, v in serve_line_config(line).items():
                self._set("config", k, v)

    def _pattern(self, kind: str, key: str, rx: re.Pattern[str], m: re.Match[str]) -> None:
        if key == "gpu":
            name = m.group(1).strip()
            self.gpus[name] = self.gpus.get(name, 0) + 1
            self._set(kind, key, name)
        elif key == "attention_backend" and "Enum" in rx.pattern:
            self._set(kind, key, m.group(1), override=True)
        elif key == "attention_backend":
            self._set(kind, key, _V0_BACKENDS.get(m.group(1), m.group(1)))
        else:
            self._set(kind, key, m.group(1))

    def _speculative(self, line: str) -> None:
        if _SPEC_NONE.search(line):
            self._set("config", "mtp", 0)
            self._set("config", "speculative_method", "none")
            return
        s = _SPEC_OBJ.search(line)
        if s:
            method = s.group("m") or s.group("m2") or s.group("m3")
            n = int(s.group("n") or s.group("n2") or s.group("n3"))
            self._set("config", "speculative_method", method, override=True)
            self._set("config", "speculative_tokens", n, override=True)
            if method in ("mtp", "deepseek_mtp") or method.endswith("_mtp"):
                self._set("config", "mtp", n, override=True)
            elif self.config.get("mtp") == 0:
                del self.config["mtp"]

    def finish(self, worker_names: list[str]) -> None:
        """Fill what only the set of worker prefixes tells (``Worker_TP7_DCP7`` → tp 8, dcp 8)."""
        mx: dict[str, int] = {}
        for n in worker_names:
            for k, v in worker_parts(n).items():
                mx[k] = max(mx.get(k, -1), v)
        # the names give lower bounds; only use them where the config lines said nothing
        for part, key in (("TP", "tp"), ("PP", "pp"), ("DP", "dp"), ("EP", "ep")):
            if key not in self.config and part in mx and (mx[part] > 0 or key == "ep"):
                self.config[key] = True if key == "ep" else mx[part] + 1
        if "dcp" not in self.config and mx.get("DCP", 0) > 0:
            self.config["dcp"] = mx["DCP"] + 1
        if "tp" not in self.config and self.world_size and not mx:
            self.config["tp"] = self.world_size
        if self.gpus:
            self.versions["gpu"] = ", ".join(
                f"{n}" for n in sorted(self.gpus, key=lambda g: -self.gpus[g])
            )
