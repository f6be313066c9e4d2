"""The planned launch: ``vllm serve`` argv, a serve-options file, and the model's config.json.

The launch line is read by :mod:`sm120kit.models.serve_args` (the one ``vllm serve`` model; vLLM
is never imported). A model ``config.json`` is found next to a local model path, in the local
Hugging Face cache (``sm120kit.facts.modelconfig.find_model_config``), or given with ``--config``;
it is never downloaded.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sm120kit.errors import UserError
from sm120kit.facts.modelconfig import find_model_config
from sm120kit.models.serve_args import ServeArgs, merge_under, options_to_argv, parse_serve_args


@dataclass
class LaunchPlan:
    """What doctor judges: the launch line (:class:`ServeArgs`) and the model's config.json
    (with ``--hf-overrides`` applied)."""

    serve: ServeArgs = field(default_factory=ServeArgs)
    hf_config: dict[str, Any] | None = None
    hf_config_source: str | None = None


def plan_from_options(opts: Mapping[str, Any]) -> ServeArgs:
    """A serve-options mapping (vLLM ``--config`` YAML/JSON keys, dashes or underscores)."""
    return parse_serve_args(options_to_argv(opts))


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


def build_plan(launch_argv: Sequence[str] | None, config_path: str | None,
               environ: Mapping[str, str]) -> LaunchPlan | None:
    """Combine ``-- vllm serve ...`` and ``--config``; ``None`` when neither was given."""
    if not launch_argv and not config_path:
        return None
    serve = parse_serve_args(list(launch_argv)) if launch_argv else ServeArgs()
    model_cfg: dict[str, Any] | None = None
    source: str | None = None
    if config_path:
        kind, data = load_config_file(config_path)
        if kind == "model":
            model_cfg, source = data, str(config_path)
        else:  # argv wins over the file, like vLLM
            file_args = plan_from_options(data)
            serve = merge_under(serve, file_args) if launch_argv else file_args
    if model_cfg is None:
        found = find_model_config(serve.model, environ)
        if found is not None:
            try:
                model_cfg, source = json.loads(found.read_text(encoding="utf-8")), str(found)
            except (OSError, ValueError):
                model_cfg = None
    plan = LaunchPlan(serve=serve)
    overrides = serve.hf_overrides if isinstance(serve.hf_overrides, dict) else None
    if overrides:
        serve.notes.append("--hf-overrides applied to the model config")
    if model_cfg is not None:
        text_cfg = model_cfg.get("text_config") if isinstance(model_cfg.get("text_config"),
                                                              dict) else None
        model_cfg = {**model_cfg, **(text_cfg or {})}
        plan.hf_config_source = source
    if model_cfg is not None or overrides:
        plan.hf_config = {**(model_cfg or {}), **(overrides or {})}
    return plan
