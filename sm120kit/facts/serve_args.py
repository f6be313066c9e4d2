"""Parse the DCP-relevant parts of a ``vllm serve ...`` command line (pure Python).

:func:`parse_serve_args` understands what vLLM 0.24-0.34's ``EngineArgs`` parser accepts for the
options that decide DCP shapes: long and short flags (``-tp``, ``-dcp``, ``-pp``, ``-sc``),
``--flag=value`` and ``--flag value``, underscores for dashes, human-readable integers
(``32k``, ``128K``), the JSON ``--speculative-config`` and its dotted form
(``--speculative-config.num_speculative_tokens 3``). Unknown options are kept in
``ServeArgs.unknown`` and never rejected: the point is reading a launch line, not validating it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sm120kit.errors import UserError

# canonical option -> ServeArgs field
_INT_OPTS = {
    "--tensor-parallel-size": "tensor_parallel_size",
    "--decode-context-parallel-size": "decode_context_parallel_size",
    "--pipeline-parallel-size": "pipeline_parallel_size",
    "--prefill-context-parallel-size": "prefill_context_parallel_size",
    "--data-parallel-size": "data_parallel_size",
    "--block-size": "block_size",
    "--cp-kv-cache-interleave-size": "cp_kv_cache_interleave_size",
    "--dcp-kv-cache-interleave-size": "dcp_kv_cache_interleave_size",
    "--max-num-seqs": "max_num_seqs",
    "--max-model-len": "max_model_len",
    "--max-num-batched-tokens": "max_num_batched_tokens",
}
_STR_OPTS = {
    "--kv-cache-dtype": "kv_cache_dtype",
    "--attention-backend": "attention_backend",
    "--dcp-comm-backend": "dcp_comm_backend",
    "--model": "model",
}
_SHORT = {
    "-tp": "--tensor-parallel-size",
    "-dcp": "--decode-context-parallel-size",
    "-pp": "--pipeline-parallel-size",
    "-pcp": "--prefill-context-parallel-size",
    "-dp": "--data-parallel-size",
    "-sc": "--speculative-config",
}
_FLAGS = {"--enforce-eager": "enforce_eager"}
# value-less vLLM switches, so an unknown switch never swallows the next positional
_SWITCHES = {
    "--trust-remote-code",
    "--enable-expert-parallel",
    "--enable-prefix-caching",
    "--enable-chunked-prefill",
    "--async-scheduling",
    "--disable-custom-all-reduce",
    "--disable-log-requests",
    "--disable-log-stats",
    "--enable-auto-tool-choice",
    "--disable-flashinfer-autotune",
    "--dcp-q-replicate",
    "--headless",
    "--enable-eplb",
}
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DEC = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BIN = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


@dataclass
class ServeArgs:
    """The DCP-relevant settings of one ``vllm serve`` line (``None`` = not given: vLLM default)."""

    model: str | None = None
    tensor_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    prefill_context_parallel_size: int = 1
    data_parallel_size: int = 1
    block_size: int | None = None
    cp_kv_cache_interleave_size: int | None = None
    dcp_kv_cache_interleave_size: int | None = None
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str | None = None
    attention_backend: str | None = None
    dcp_comm_backend: str | None = None
    speculative_config: dict[str, Any] | None = None
    enforce_eager: bool = False
    unknown: list[str] = field(default_factory=list)

    @property
    def dcp(self) -> int:
        return self.decode_context_parallel_size

    @property
    def interleave(self) -> int:
        """Resolved interleave size: ``--cp-kv-cache-interleave-size``, else the deprecated
        ``--dcp-kv-cache-interleave-size`` (vLLM copies it over when it is not 1), else 1."""
        if self.cp_kv_cache_interleave_size is not None:
            return self.cp_kv_cache_interleave_size
        if self.dcp_kv_cache_interleave_size is not None:
            return self.dcp_kv_cache_interleave_size
        return 1

    @property
    def num_speculative_tokens(self) -> int:
        sc = self.speculative_config or {}
        try:
            return int(sc.get("num_speculative_tokens") or 0)
        except (TypeError, ValueError):
            return 0

    @property
    def effective_block_size(self) -> int:
        """The block size vLLM ends up with on the SM120 sparse backend: given, else 64."""
        return self.block_size if self.block_size is not None else 64

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["interleave"] = self.interleave
        d["num_speculative_tokens"] = self.num_speculative_tokens
        d["effective_block_size"] = self.effective_block_size
        return d


def parse_human_int(value: str, option: str = "value") -> int:
    """vLLM's ``human_readable_int``: ``25.6k`` = 25600 (decimal), ``1K`` = 1024 (binary)."""
    v = value.strip()
    m = _HUMAN_INT.fullmatch(v)
    try:
        if m:
            num, suf = m.groups()
            if suf in _DEC:
                return int(float(num) * _DEC[suf])
            return int(num) * _BIN[suf]
        return int(v)
    except ValueError:
        raise UserError(
            f"{option}: {value!r} is not an integer",
            hint="use a plain number or a k/K/m/M suffix, as vLLM does",
        ) from None


def _canon(opt: str) -> str:
    head, dot, sub = opt.partition(".")
    if head in _SHORT:
        head = _SHORT[head]
    elif head.startswith("--"):
        head = "--" + head[2:].replace("_", "-")
    return head + dot + sub


def _strip_prefix(argv: list[str]) -> list[str]:
    """Drop a leading ``--``, ``vllm``/``python -m vllm.entrypoints...`` and ``serve``."""
    args = list(argv)
    if args and args[0] == "--":
        args = args[1:]
    while args and (args[0].endswith("vllm") or args[0] in ("python", "python3", "-m")):
        args = args[1:]
    if args and args[0].startswith("vllm."):
        args = args[1:]
    if args and args[0] == "serve":
        args = args[1:]
    return args


def parse_serve_args(argv: Sequence[str]) -> ServeArgs:
    """Parse a ``vllm serve`` argument list (with or without the ``vllm serve`` prefix).

    Raises :class:`UserError` for a value vLLM would reject (non-integer size, bad JSON).
    """
    args = _strip_prefix(list(argv))
    out = ServeArgs()
    spec: dict[str, Any] = {}
    saw_spec = False
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if not tok.startswith("-") or tok == "-":
            if out.model is None:
                out.model = tok
            else:
                out.unknown.append(tok)
            continue
        name, eq, inline = tok.partition("=")
        opt = _canon(name)
        base, dot, sub = opt.partition(".")

        def value(name: str = name, eq: str = eq, inline: str = inline) -> str:
            nonlocal i
            if eq:
                return inline
            if i >= len(args):
                raise UserError(f"{name} needs a value", hint=f"write {name} VALUE")
            v = args[i]
            i += 1
            return v

        if base == "--speculative-config":
            saw_spec = True
            raw = value()
            if dot:
                spec[sub.replace("-", "_")] = _scalar(raw)
            else:
                try:
                    parsed = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise UserError(
                        f"--speculative-config is not valid JSON: {exc.msg}",
                        hint="""quote it: --speculative-config '{"method": "mtp", "num_speculative_tokens": 1}'""",
                    ) from None
                if not isinstance(parsed, dict):
                    raise UserError("--speculative-config must be a JSON object")
                spec.update(parsed)
        elif opt in _INT_OPTS:
            setattr(out, _INT_OPTS[opt], parse_human_int(value(), opt))
        elif opt in _STR_OPTS:
            setattr(out, _STR_OPTS[opt], value())
        elif opt in _FLAGS:
            setattr(out, _FLAGS[opt], True)
        else:
            out.unknown.append(tok)
            # keep a following value with the unknown option, unless it looks like an option
            switch = opt in _SWITCHES or opt.startswith("--no-")
            if not eq and not switch and i < len(args) and not args[i].startswith("-"):
                out.unknown.append(args[i])
                i += 1
    if saw_spec:
        out.speculative_config = spec
    return out


def _scalar(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw
