"""The ONE model of a ``vllm serve`` command line: :class:`ServeArgs`, built from :data:`OPTIONS`.

:data:`OPTIONS` lists each vLLM option we read once, as vLLM's ``EngineArgs.add_cli_args``
declares it (checked against the 0.25.1 and 0.34.0 ``vllm/engine/arg_utils.py``): the
``EngineArgs`` field, the canonical flag and its aliases (``-tp``, ``-dcp``, ``-sc``,
``--device-memory-utilization``), the value type and vLLM's default. The parser follows vLLM's
``FlexibleArgumentParser``: ``--flag value`` / ``--flag=value``, underscores for dashes,
``--no-<flag>`` (and ``--disable-x`` for ``--enable-x`` options), human-readable integers where
vLLM accepts them (``--max-model-len 128k`` = 128000, ``1m``, ``auto``;
``--max-num-batched-tokens 8K`` = 8192), JSON options and their dotted form
(``--speculative-config.num_speculative_tokens 3``, ``-sc.method mtp``), the shorthand
``--spec-method/--spec-model/--spec-tokens``, the positional model and ``--model``.

Unknown options are kept in ``ServeArgs.unknown`` (with the value that follows them) and never
rejected: the point is reading a launch line, not validating it. A value vLLM would reject for an
option we know (``-tp eight``, bad JSON) raises :class:`~sm120kit.errors.UserError`.

``doctor`` (``LaunchPlan``), ``warmup plan/run`` (``RunConfig``) and ``collect`` (the bundle's
``serve_args``) all read a launch through this module; options given to our own commands win over
the launch line through :meth:`ServeArgs.override`, the one place that rule is written.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from sm120kit.errors import UserError

OptType = Literal["int", "hint", "hint_auto", "float", "str", "bool", "json"]
#: the vLLM releases whose ``arg_utils.py`` the table was checked against (tests re-check)
CHECKED_RELEASES: tuple[str, ...] = ("0.25.1", "0.34.0")


@dataclass(frozen=True)
class Option:
    """One vLLM option: ``names[0]`` is canonical, the rest are vLLM's aliases."""

    field: str
    names: tuple[str, ...]
    type: OptType
    default: Any = None
    since: str | None = None  # first checked release with it (None: every checked release)
    deprecated: bool = False


OPTIONS: tuple[Option, ...] = (
    # model
    Option("model", ("--model",), "str"),
    Option("tokenizer", ("--tokenizer",), "str"),
    Option("trust_remote_code", ("--trust-remote-code",), "bool", False),
    Option("max_model_len", ("--max-model-len",), "hint_auto"),
    Option("enforce_eager", ("--enforce-eager",), "bool", False),
    Option("hf_overrides", ("--hf-overrides",), "json"),
    # parallelism
    Option("distributed_executor_backend", ("--distributed-executor-backend",), "str"),
    Option("pipeline_parallel_size", ("--pipeline-parallel-size", "-pp"), "int", 1),
    Option("tensor_parallel_size", ("--tensor-parallel-size", "-tp"), "int", 1),
    Option("decode_context_parallel_size", ("--decode-context-parallel-size", "-dcp"), "int", 1),
    Option("dcp_comm_backend", ("--dcp-comm-backend",), "str"),
    Option("dcp_q_replicate", ("--dcp-q-replicate",), "bool", False, since="0.34.0"),
    Option("dcp_kv_cache_interleave_size", ("--dcp-kv-cache-interleave-size",), "int", 1,
           deprecated=True),
    Option("cp_kv_cache_interleave_size", ("--cp-kv-cache-interleave-size",), "int", 1),
    Option("prefill_context_parallel_size", ("--prefill-context-parallel-size", "-pcp"), "int", 1),
    Option("data_parallel_size", ("--data-parallel-size", "-dp"), "int", 1),
    Option("enable_expert_parallel", ("--enable-expert-parallel", "-ep"), "bool", False),
    Option("enable_eplb", ("--enable-eplb",), "bool", False),
    Option("disable_custom_all_reduce", ("--disable-custom-all-reduce",), "bool", False),
    # cache
    Option("block_size", ("--block-size",), "int"),
    Option("gpu_memory_utilization", ("--gpu-memory-utilization", "--device-memory-utilization"),
           "float", 0.9),
    Option("kv_cache_dtype", ("--kv-cache-dtype",), "str", "auto"),
    Option("enable_prefix_caching", ("--enable-prefix-caching",), "bool"),
    # scheduler
    Option("max_num_batched_tokens", ("--max-num-batched-tokens",), "hint"),
    Option("max_num_seqs", ("--max-num-seqs",), "int"),
    Option("enable_chunked_prefill", ("--enable-chunked-prefill",), "bool"),
    Option("async_scheduling", ("--async-scheduling",), "bool"),
    # attention, speculative decoding, compilation, KV transfer, watchdog
    Option("attention_backend", ("--attention-backend",), "str"),
    Option("attention_config", ("--attention-config", "-ac"), "json"),
    Option("speculative_config", ("--speculative-config", "-sc"), "json"),
    Option("spec_method", ("--spec-method",), "str"),
    Option("spec_model", ("--spec-model",), "str"),
    Option("spec_tokens", ("--spec-tokens",), "int"),
    Option("compilation_config", ("--compilation-config", "-cc"), "json"),
    Option("kv_transfer_config", ("--kv-transfer-config",), "json"),
    Option("watchdog_config", ("--watchdog-config",), "json", since="0.34.0"),
)
BY_FIELD: dict[str, Option] = {o.field: o for o in OPTIONS}
BY_NAME: dict[str, Option] = {n: o for o in OPTIONS for n in o.names}
#: ``--no-x`` for every bool option, and vLLM >= 0.34's ``--disable-x`` / ``--enable-x`` inverses
NEGATIONS: dict[str, Option] = {
    **{"--no-" + n[2:]: o for o in OPTIONS if o.type == "bool" for n in o.names if n[:2] == "--"},
    **{"--disable-" + o.names[0][len("--enable-"):]: o for o in OPTIONS
       if o.type == "bool" and o.names[0].startswith("--enable-")},
    **{"--enable-" + o.names[0][len("--disable-"):]: o for o in OPTIONS
       if o.type == "bool" and o.names[0].startswith("--disable-")},
}
#: value-less vLLM switches we do not model, so they never swallow the next positional
_SWITCHES = frozenset({"--headless", "--disable-log-requests", "--disable-log-stats",
                       "--enable-auto-tool-choice", "--disable-flashinfer-autotune",
                       "--safetensors-load-strategy-eager"})
_SWITCH_PREFIXES = ("--no-", "--enable-", "--disable-")
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DEC = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BIN = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_ENV_ASSIGN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


@dataclass
class ServeArgs:
    """One ``vllm serve`` line: one attribute per :data:`OPTIONS` entry (vLLM's default when not
    given), plus what the line held beyond them."""

    model: str | None = None
    tokenizer: str | None = None
    trust_remote_code: bool = False
    max_model_len: int | None = None
    enforce_eager: bool = False
    hf_overrides: dict[str, Any] | None = None
    distributed_executor_backend: str | None = None
    pipeline_parallel_size: int = 1
    tensor_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    dcp_comm_backend: str | None = None
    dcp_q_replicate: bool = False
    dcp_kv_cache_interleave_size: int = 1
    cp_kv_cache_interleave_size: int = 1
    prefill_context_parallel_size: int = 1
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False
    enable_eplb: bool = False
    disable_custom_all_reduce: bool = False
    block_size: int | None = None
    gpu_memory_utilization: float = 0.9
    kv_cache_dtype: str = "auto"
    enable_prefix_caching: bool | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    enable_chunked_prefill: bool | None = None
    async_scheduling: bool | None = None
    attention_backend: str | None = None
    attention_config: dict[str, Any] | None = None
    speculative_config: dict[str, Any] | None = None
    spec_method: str | None = None
    spec_model: str | None = None
    spec_tokens: int | None = None
    compilation_config: dict[str, Any] | None = None
    kv_transfer_config: dict[str, Any] | None = None
    watchdog_config: dict[str, Any] | None = None
    # beyond the options
    argv: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    given: set[str] = field(default_factory=set)  # fields set by the line (or an override)
    notes: list[str] = field(default_factory=list)

    # -- short names -------------------------------------------------------------------------
    @property
    def tp(self) -> int:
        return self.tensor_parallel_size

    @property
    def pp(self) -> int:
        return self.pipeline_parallel_size

    @property
    def dp(self) -> int:
        return self.data_parallel_size

    @property
    def dcp(self) -> int:
        return self.decode_context_parallel_size

    @property
    def pcp(self) -> int:
        return self.prefill_context_parallel_size

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    # -- resolved values ---------------------------------------------------------------------
    def interleave_for(self, vllm_version: str | None = None) -> int:
        """``cp_kv_cache_interleave_size`` as vLLM settles it. The deprecated
        ``--dcp-kv-cache-interleave-size`` (> 1, DCP > 1) overrides it in vLLM <= 0.32
        (``validate_block_size``); from 0.33 only under a KV-transfer connector
        (``adjust_dcp_kv_cache_interleave_size``). ``None``: release unknown, the <= 0.32 rule
        (what the user asked for)."""
        dep = self.dcp_kv_cache_interleave_size
        cp = self.cp_kv_cache_interleave_size
        if dep <= 1 or dep == cp or self.dcp <= 1:
            return cp
        if vllm_version is not None and _version_tuple(vllm_version) >= (0, 33):
            return dep if self.kv_transfer_config else cp
        return dep

    @property
    def interleave(self) -> int:
        return self.interleave_for(None)

    @property
    def speculative(self) -> dict[str, Any]:
        """``--speculative-config`` with ``--spec-method/--spec-model/--spec-tokens`` merged in
        (vLLM's ``create_speculative_config``); ``{}`` without speculative decoding."""
        sc = dict(self.speculative_config or {})
        for key, value in (("method", self.spec_method), ("model", self.spec_model),
                           ("num_speculative_tokens", self.spec_tokens)):
            if value is not None:
                sc[key] = value
        return {k.replace("-", "_"): v for k, v in sc.items()}

    @property
    def speculative_method(self) -> str | None:
        m = self.speculative.get("method")
        return str(m) if m else None

    @property
    def num_speculative_tokens(self) -> int:
        try:
            return int(self.speculative.get("num_speculative_tokens") or 0)
        except (TypeError, ValueError):
            return 0

    @property
    def effective_attention_backend(self) -> str | None:
        """``--attention-backend``, else ``--attention-config``'s ``backend``."""
        if self.attention_backend:
            return self.attention_backend
        b = (self.attention_config or {}).get("backend")
        return str(b) if b else None

    @property
    def effective_block_size(self) -> int:
        """The block size vLLM ends up with on the SM120 sparse backend: given, else 64."""
        return self.block_size if self.block_size is not None else 64

    # -- our commands' options ---------------------------------------------------------------
    def override(self, **ours: Any) -> ServeArgs:
        """A copy with the options given to OUR command (non-``None`` values) winning over the
        launch line: ``dcp``, ``tp``, ``interleave``, ``block_size``, ``mtp`` (speculative
        tokens), ``max_num_seqs``, ``max_model_len``, ``max_num_batched_tokens``. When ``dcp``
        is given and TP is given nowhere, TP is assumed to be at least DCP (vLLM requires
        ``tp % dcp == 0`` without PCP), with a note."""
        out = copy.deepcopy(self)
        names = {"dcp": "decode_context_parallel_size", "tp": "tensor_parallel_size",
                 "interleave": "cp_kv_cache_interleave_size"}
        unknown = set(ours) - set(names) - {"mtp", "block_size", "max_num_seqs", "max_model_len",
                                            "max_num_batched_tokens"}
        if unknown:
            raise TypeError(f"override() got unknown options {sorted(unknown)}")
        for key, value in ours.items():
            if value is None:
                continue
            if key == "mtp":
                out.speculative_config = {**out.speculative, "num_speculative_tokens": int(value)}
                out.spec_tokens = None
                out.given.add("speculative_config")
                continue
            f = names.get(key, key)
            setattr(out, f, value)
            out.given.add(f)
            if key == "interleave":
                out.dcp_kv_cache_interleave_size = 1
        dcp = ours.get("dcp")
        if dcp is not None and "tensor_parallel_size" not in out.given and out.tp < dcp:
            out.tensor_parallel_size = int(dcp)
            out.notes.append(f"TP not given: assumed TP = DCP = {dcp}")
        return out

    def shape(self) -> dict[str, Any]:
        """The launch's parallel / cache / scheduler shape (no model path, no JSON blobs): what
        a bundle records and what doctor, warmup and collect must all read alike."""
        return {
            "tp": self.tp, "pp": self.pp, "dp": self.dp, "dcp": self.dcp, "pcp": self.pcp,
            "interleave": self.interleave, "block_size": self.block_size,
            "effective_block_size": self.effective_block_size,
            "kv_cache_dtype": self.kv_cache_dtype,
            "attention_backend": self.effective_attention_backend,
            "max_model_len": self.max_model_len,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "speculative_method": self.speculative_method,
            "num_speculative_tokens": self.num_speculative_tokens,
            "enable_expert_parallel": self.enable_expert_parallel,
            "enable_eplb": self.enable_eplb,
            "distributed_executor_backend": self.distributed_executor_backend,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "unknown_options": len([u for u in self.unknown if u.startswith("-")]),
        }

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["given"] = sorted(self.given)
        d["interleave"] = self.interleave
        d["num_speculative_tokens"] = self.num_speculative_tokens
        d["effective_block_size"] = self.effective_block_size
        return d


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def parse_human_int(value: str, option: str = "value") -> int:
    """vLLM's ``human_readable_int``: ``25.6k`` = 25600 (decimal), ``1K`` = 1024 (binary)."""
    v = str(value).strip()
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


def _convert(opt: Option, name: str, raw: str) -> Any:
    """A raw option value as vLLM's parser types it."""
    try:
        if opt.type == "int":
            return int(raw)
        if opt.type == "float":
            return float(raw)
    except ValueError:
        raise UserError(f"{name}: {raw!r} is not a number",
                        hint="check the vllm serve arguments") from None
    if opt.type == "hint":
        return parse_human_int(raw, name)
    if opt.type == "hint_auto":
        return None if raw.strip().lower() in ("auto", "-1") else parse_human_int(raw, name)
    if opt.type == "bool":
        low = raw.strip().lower()
        if low not in ("true", "false", "1", "0"):
            raise UserError(f"{name} takes no value, got {raw!r}")
        return low in ("true", "1")
    if opt.type == "json":
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            if opt.field == "hf_overrides":
                return raw  # vLLM also takes a plain string here
            raise UserError(f"{name} is not valid JSON: {exc.msg}",
                            hint=f"""quote it: {name} '{{"key": "value"}}'""") from None
        if not isinstance(value, dict):
            raise UserError(f"{name} must be a JSON object")
        return value
    return raw


def _dotted_value(raw: str) -> Any:
    """A dotted JSON option's value: JSON, else a human-readable int, else the string."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        pass
    try:
        return parse_human_int(raw)
    except UserError:
        return raw


def _canon(token: str) -> str:
    """``--max_model_len`` -> ``--max-model-len`` (the part before a dot, like vLLM)."""
    if not token.startswith("--"):
        return token
    head, dot, tail = token[2:].partition(".")
    return "--" + head.replace("_", "-") + dot + tail


def strip_launcher(argv: Sequence[str]) -> list[str]:
    """The arguments after ``vllm serve`` (drops ``--``, ``ENV=val`` words, ``python -m
    vllm.entrypoints...``, a ``vllm`` executable and ``serve``)."""
    args = list(argv)
    i = 0
    if args[:1] == ["--"]:
        i = 1
    while i < len(args) and _ENV_ASSIGN.match(args[i]) and not args[i].startswith("-"):
        i += 1
    while i < len(args):
        base = os.path.basename(args[i])
        if base.startswith("python") or base == "vllm" or args[i] == "-m" or args[i].startswith(
                "vllm."):
            i += 1
            continue
        break
    if i < len(args) and args[i] == "serve":
        i += 1
    return args[i:]


class _Parser:
    """One pass over the arguments after ``vllm serve``."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.out = ServeArgs(argv=list(argv))
        self.args = strip_launcher(argv)
        self.i = 0
        self.dotted: dict[str, dict[str, Any]] = {}

    def take_value(self, name: str) -> str:
        if self.i >= len(self.args):
            raise UserError(f"{name} needs a value", hint=f"write {name} VALUE")
        v = self.args[self.i]
        self.i += 1
        return v

    def set(self, opt: Option, value: Any) -> None:
        setattr(self.out, opt.field, value)
        self.out.given.add(opt.field)

    def dotted_option(self, tok: str, name: str, eq: str, inline: str) -> bool:
        base, _, path = name.partition(".")
        opt = BY_NAME.get(base)
        if opt is None or opt.type != "json":
            return False
        raw = inline if eq else self.take_value(name)
        keys = path.rstrip("+").split(".")
        value = _dotted_value(raw)
        if path.endswith("+"):
            value = list(str(raw).split(","))
        d = self.dotted.setdefault(opt.field, {})
        for k in keys[:-1]:
            d = d.setdefault(k, {})
        prev = d.get(keys[-1])
        d[keys[-1]] = prev + value if isinstance(prev, list) and isinstance(value, list) else value
        return True

    def unknown_option(self, tok: str, name: str, eq: str) -> None:
        self.out.unknown.append(tok)
        switch = name in _SWITCHES or name.startswith(_SWITCH_PREFIXES)
        if (not eq and not switch and self.i < len(self.args)
                and not self.args[self.i].startswith("-")):
            self.out.unknown.append(self.args[self.i])
            self.i += 1

    def step(self) -> None:
        tok = self.args[self.i]
        self.i += 1
        if not tok.startswith("-") or tok == "-":
            if self.out.model is None:
                self.set(BY_FIELD["model"], tok)
            else:
                self.out.unknown.append(tok)
            return
        name, eq, inline = _canon(tok).partition("=")
        if "." in name and self.dotted_option(tok, name, eq, inline):
            return
        opt = BY_NAME.get(name)
        if opt is not None and opt.type == "bool":
            self.set(opt, _convert(opt, name, inline) if eq else True)
        elif opt is not None:
            self.set(opt, _convert(opt, name, inline if eq else self.take_value(name)))
        elif name in NEGATIONS and not eq:
            self.set(NEGATIONS[name], False)
        else:
            self.unknown_option(tok, name, eq)

    def run(self) -> ServeArgs:
        while self.i < len(self.args):
            self.step()
        for fname, d in self.dotted.items():  # vLLM appends them last: they replace the JSON
            self.set(BY_FIELD[fname], d)
        if "dcp_kv_cache_interleave_size" in self.out.given:
            self.out.notes.append(
                "--dcp-kv-cache-interleave-size is deprecated (vLLM >= 0.33 reads it only with "
                "a KV-transfer connector): use --cp-kv-cache-interleave-size")
        return self.out


def parse_serve_args(argv: Sequence[str]) -> ServeArgs:
    """Parse a ``vllm serve`` argument list (with or without the ``vllm serve`` prefix).

    Raises :class:`UserError` for a value vLLM would reject (non-integer size, bad JSON).
    """
    return _Parser(argv).run()


def options_to_argv(opts: Mapping[str, Any]) -> list[str]:
    """A serve-options mapping (vLLM ``--config`` YAML/JSON keys, dashes or underscores) as
    arguments; ``model`` becomes the positional model."""
    argv: list[str] = []
    model = opts.get("model")
    for k, v in opts.items():
        if k == "model":
            continue
        flag = "--" + str(k).replace("_", "-")
        if isinstance(v, bool):
            if v:
                argv.append(flag)
            elif flag in BY_NAME:
                argv.append("--no-" + flag[2:])
            continue
        argv += [flag, json.dumps(v) if isinstance(v, dict | list) else str(v)]
    return ([str(model)] if model else []) + argv


def merge_under(primary: ServeArgs, secondary: ServeArgs) -> ServeArgs:
    """``primary`` (the command line) with what only ``secondary`` (a serve-options file) gave:
    the line wins over the file, like vLLM's ``--config``."""
    out = copy.deepcopy(primary)
    for name in sorted(secondary.given - primary.given):
        setattr(out, name, copy.deepcopy(getattr(secondary, name)))
        out.given.add(name)
    out.unknown += [u for u in secondary.unknown if u not in out.unknown]
    out.notes += secondary.notes
    return out


def option_fields() -> Iterable[str]:
    """The :class:`ServeArgs` attributes that come from :data:`OPTIONS` (in table order)."""
    meta = {"argv", "unknown", "given", "notes"}
    return [f.name for f in fields(ServeArgs) if f.name not in meta]
