"""The planned launch: ``vllm serve`` argv, a serve-options file, and the model's config.json.

Only the options doctor judges are parsed (our own small parser; vLLM is never imported). A model
``config.json`` is found next to a local model path, in the local Hugging Face cache, or given
with ``--config``; it is never downloaded.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sm120kit.errors import UserError
from sm120kit.facts.serve_args import parse_serve_args

# option -> (field, type); short aliases as vLLM defines them (0.33 arg_utils.py)
_OPTS: dict[str, tuple[str, str]] = {
    "--tensor-parallel-size": ("tp", "int"), "-tp": ("tp", "int"),
    "--pipeline-parallel-size": ("pp", "int"), "-pp": ("pp", "int"),
    "--data-parallel-size": ("dp", "int"), "-dp": ("dp", "int"),
    "--decode-context-parallel-size": ("dcp", "int"), "-dcp": ("dcp", "int"),
    "--prefill-context-parallel-size": ("pcp", "int"), "-pcp": ("pcp", "int"),
    "--cp-kv-cache-interleave-size": ("interleave", "int"),
    "--dcp-kv-cache-interleave-size": ("interleave", "int"),
    "--block-size": ("block_size", "int"),
    "--kv-cache-dtype": ("kv_cache_dtype", "str"),
    "--attention-backend": ("attention_backend", "str"),
    "--attention-config": ("attention_config", "json"), "-ac": ("attention_config", "json"),
    "--max-num-seqs": ("max_num_seqs", "int"),
    "--max-model-len": ("max_model_len", "int"),
    "--max-num-batched-tokens": ("max_num_batched_tokens", "int"),
    "--gpu-memory-utilization": ("gpu_memory_utilization", "float"),
    "--speculative-config": ("speculative_config", "json"), "-sc": ("speculative_config", "json"),
    "--num-speculative-tokens": ("num_speculative_tokens", "int"),
    "--hf-overrides": ("hf_overrides", "json"),
    "--model": ("model", "str"),
    "--dcp-q-replicate": ("dcp_q_replicate", "flag"),
    "--disable-custom-all-reduce": ("disable_custom_all_reduce", "flag"),
    "--enforce-eager": ("enforce_eager", "flag"),
}


_BOOL_FLAGS = {"--trust-remote-code", "--enforce-eager", "--async-scheduling",
               "--enable-expert-parallel", "--enable-auto-tool-choice", "--enable-prefix-caching",
               "--enable-chunked-prefill", "--disable-log-requests", "--disable-log-stats",
               "--headless", "--safetensors-load-strategy-eager"}


def _looks_boolean(opt: str) -> bool:
    return opt in _BOOL_FLAGS or opt.startswith(("--no-", "--disable-"))


@dataclass
class LaunchPlan:
    argv: list[str] = field(default_factory=list)
    model: str | None = None
    tp: int = 1
    pp: int = 1
    dp: int = 1
    dcp: int = 1
    pcp: int = 1
    interleave: int = 1
    block_size: int | None = None
    kv_cache_dtype: str = "auto"
    attention_backend: str | None = None
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    speculative_method: str | None = None
    num_speculative_tokens: int = 0
    dcp_q_replicate: bool = False
    disable_custom_all_reduce: bool = False
    enforce_eager: bool = False
    hf_config: dict[str, Any] | None = None
    hf_config_source: str | None = None
    unknown: list[str] = field(default_factory=list)
    given: set[str] = field(default_factory=set)  # fields set by an option (not defaults)
    notes: list[str] = field(default_factory=list)

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp


def _conv(opt: str, typ: str, raw: str) -> Any:
    try:
        if typ == "int":
            return int(raw)
        if typ == "float":
            return float(raw)
        if typ == "json":
            return json.loads(raw) if isinstance(raw, str) else raw
    except (ValueError, TypeError) as exc:
        raise UserError(f"bad value for {opt}: {raw!r} ({exc})",
                        hint="check the vllm serve arguments after --") from None
    return raw


def _apply(plan: LaunchPlan, key: str, value: Any) -> None:
    if key == "attention_config":
        if isinstance(value, dict) and value.get("backend"):
            plan.attention_backend = str(value["backend"])
        return
    if key == "speculative_config":
        if isinstance(value, dict):
            plan.speculative_method = value.get("method") or plan.speculative_method
            n = value.get("num_speculative_tokens")
            if n is not None:
                plan.num_speculative_tokens = int(n)
        return
    if key == "hf_overrides":
        if isinstance(value, dict):
            plan.unknown.append("--hf-overrides (applied to the model config)")
            plan.hf_config = {**(plan.hf_config or {}), **value}
        return
    setattr(plan, key, value)


def parse_serve_argv(argv: Sequence[str]) -> LaunchPlan:
    """``vllm serve MODEL --tensor-parallel-size 8 ...`` (``vllm``/``serve`` optional).

    The fields the warmup planner also needs come from ``sm120kit.facts.serve_args`` (one
    parser for both commands); this module's own parser covers the rest.
    """
    plan = _parse_own(argv)
    sa = parse_serve_args(list(argv))
    plan.model = sa.model or plan.model
    plan.tp, plan.dcp = sa.tensor_parallel_size, sa.decode_context_parallel_size
    plan.pp, plan.pcp, plan.dp = (sa.pipeline_parallel_size, sa.prefill_context_parallel_size,
                                  sa.data_parallel_size)
    plan.interleave = sa.interleave
    for f in ("block_size", "max_num_seqs", "max_model_len", "max_num_batched_tokens"):
        setattr(plan, f, getattr(sa, f))
    plan.kv_cache_dtype = sa.kv_cache_dtype or plan.kv_cache_dtype
    plan.attention_backend = sa.attention_backend or plan.attention_backend
    if sa.speculative_config is not None:
        plan.num_speculative_tokens = sa.num_speculative_tokens
        plan.speculative_method = sa.speculative_config.get("method") or plan.speculative_method
    return plan


def _parse_own(argv: Sequence[str]) -> LaunchPlan:
    args = list(argv)
    plan = LaunchPlan(argv=list(args))
    i = 0
    if args and args[0] == "--":
        i = 1
    if i < len(args) and os.path.basename(args[i]) in ("vllm", "vllm.exe"):
        i += 1
    if i < len(args) and os.path.basename(args[i]).startswith("python"):
        i += 1
    if i < len(args) and args[i] == "serve":
        i += 1
    elif i < len(args) and args[i] == "-m":  # python -m vllm.entrypoints.openai.api_server
        i += 2
    while i < len(args):
        a = args[i]
        if a.startswith("-") and len(a) > 1:
            name, eq, inline = a.partition("=")
            norm = name if name.startswith("--") is False else "--" + name[2:].replace("_", "-")
            spec = _OPTS.get(norm)
            if spec is None:
                plan.unknown.append(name)
                # skip a value that follows an unknown option (not another option)
                if (not eq and not _looks_boolean(norm) and i + 1 < len(args)
                        and not args[i + 1].startswith("-")):
                    i += 1
                i += 1
                continue
            key, typ = spec
            if typ == "flag":
                setattr(plan, key, True)
                i += 1
                continue
            if eq:
                raw = inline
            else:
                if i + 1 >= len(args):
                    raise UserError(f"{name} needs a value", hint="e.g. --tensor-parallel-size 8")
                raw = args[i + 1]
                i += 1
            _apply(plan, key, _conv(name, typ, raw))
            plan.given.add(key)
            i += 1
            continue
        if plan.model is None:
            plan.model = a
        i += 1
    return plan


def plan_from_options(opts: Mapping[str, Any]) -> LaunchPlan:
    """A serve-options mapping (vLLM ``--config`` YAML/JSON keys, dashes or underscores)."""
    argv: list[str] = []
    model = opts.get("model")
    for k, v in opts.items():
        if k == "model":
            continue
        flag = "--" + str(k).replace("_", "-")
        if isinstance(v, bool):
            if v:
                argv.append(flag)
            continue
        argv += [flag, json.dumps(v) if isinstance(v, dict | list) else str(v)]
    plan = parse_serve_argv(["vllm", "serve", *([str(model)] if model else []), *argv])
    return plan


def _flat_yaml(text: str) -> dict[str, Any]:
    """``key: value`` lines (what vLLM's ``--config`` files use); no nesting."""
    out: dict[str, Any] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].rstrip()
        if not line.strip() or ":" not in line or line.startswith((" ", "\t", "-")):
            continue
        k, _, v = line.partition(":")
        v = v.strip().strip("'\"")
        if v.lower() in ("true", "false"):
            out[k.strip()] = v.lower() == "true"
        elif v.startswith("{"):
            out[k.strip()] = json.loads(v)
        else:
            out[k.strip()] = v
    return out


def is_model_config(d: Mapping[str, Any]) -> bool:
    return "model_type" in d or "num_attention_heads" in d or "architectures" in d


def load_config_file(path: str | os.PathLike[str]) -> tuple[str, dict[str, Any]]:
    """``("model", config)`` for a model config.json, ``("serve", options)`` otherwise."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read config {p}: {exc.strerror or exc}",
                        hint="pass a model config.json or a vllm serve options file") from None
    try:
        data = json.loads(text)
    except ValueError:
        try:
            data = _flat_yaml(text)
        except ValueError as exc:
            raise UserError(f"config {p} is neither JSON nor flat YAML: {exc}") from None
    if not isinstance(data, dict) or not data:
        raise UserError(f"config {p} holds no options")
    return ("model" if is_model_config(data) else "serve"), data


def find_model_config(model: str | None, environ: Mapping[str, str]) -> Path | None:
    """config.json of a local model dir or a Hugging Face cache snapshot (never downloads)."""
    if not model:
        return None
    p = Path(model).expanduser()
    if (p / "config.json").is_file():
        return p / "config.json"
    if "/" not in model or model.startswith((".", "/")):
        return None
    hub = environ.get("HF_HUB_CACHE") or os.path.join(
        environ.get("HF_HOME") or os.path.join(environ.get("HOME", "~"), ".cache", "huggingface"),
        "hub")
    snap = Path(hub).expanduser() / ("models--" + model.replace("/", "--")) / "snapshots"
    try:
        cands = sorted(snap.iterdir(), key=lambda q: q.stat().st_mtime, reverse=True)
    except OSError:
        return None
    for c in cands:
        if (c / "config.json").is_file():
            return c / "config.json"
    return None


def build_plan(launch_argv: Sequence[str] | None, config_path: str | None,
               environ: Mapping[str, str]) -> LaunchPlan | None:
    """Combine ``-- vllm serve ...`` and ``--config``; ``None`` when neither was given."""
    if not launch_argv and not config_path:
        return None
    plan = parse_serve_argv(list(launch_argv)) if launch_argv else LaunchPlan()
    model_cfg: dict[str, Any] | None = None
    source: str | None = None
    if config_path:
        kind, data = load_config_file(config_path)
        if kind == "model":
            model_cfg, source = data, str(config_path)
        else:
            opt_plan = plan_from_options(data)
            if launch_argv:  # argv wins over the file, like vLLM
                alias = {"attention_config": ("attention_backend",),
                         "speculative_config": ("speculative_method", "num_speculative_tokens"),
                         "num_speculative_tokens": ("num_speculative_tokens",),
                         "hf_overrides": ("hf_config",)}
                for key in opt_plan.given - plan.given:
                    for f in alias.get(key, (key,)):
                        if f in LaunchPlan.__dataclass_fields__:
                            setattr(plan, f, getattr(opt_plan, f))
                    plan.given.add(key)
            else:
                plan = opt_plan
    if model_cfg is None:
        found = find_model_config(plan.model, environ)
        if found is not None:
            try:
                model_cfg, source = json.loads(found.read_text(encoding="utf-8")), str(found)
            except (OSError, ValueError):
                model_cfg = None
    if model_cfg is not None:
        text_cfg = model_cfg.get("text_config") if isinstance(model_cfg.get("text_config"),
                                                              dict) else None
        merged_cfg = {**model_cfg, **(text_cfg or {})}
        plan.hf_config = {**merged_cfg, **(plan.hf_config or {})}
        plan.hf_config_source = source
    return plan
