"""The one ``vllm serve`` model (``sm120kit.models.serve_args``) against real vLLM and real lines.

* The option table against the real ``vllm/engine/arg_utils.py`` of 0.25.1 and 0.34.0 (PyPI
  wheels, cached): every flag and alias is declared there, on the ``EngineArgs`` field we name,
  with a matching type.
* Launch lines quoted from public logs (``tests/data/serve-lines.json``: the ``Command:`` line
  and vLLM's own ``non-default args`` line for that launch) and from public issue threads
  (``tests/data/field-logs``): our values equal what vLLM's real parser produced.
* doctor, ``warmup plan`` and ``collect`` read the same values from one line. ``collect`` runs
  a real launch of a stand-in ``vllm`` executable (vLLM itself cannot serve without a GPU here):
  what is tested is collect's reading of the command line, written to the bundle.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from sm120kit.doctor import run_doctor
from sm120kit.errors import UserError
from sm120kit.models.dcp import plan_for
from sm120kit.models.serve_args import (
    BY_NAME,
    CHECKED_RELEASES,
    NEGATIONS,
    OPTIONS,
    ServeArgs,
    option_fields,
    parse_serve_args,
)
from sm120kit.patchset.release import release_tree
from sm120kit.warmup.config import RunConfig

DATA = Path(__file__).resolve().parent / "data"
FIELD_LOGS = DATA / "field-logs"


# --- the table against real vLLM ------------------------------------------------------------------
def _engine_args_fields(src: str) -> dict[str, str]:
    """``{field: annotation}`` of ``class EngineArgs`` in an ``arg_utils.py``."""
    tree = ast.parse(src)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "EngineArgs")
    return {n.target.id: ast.unparse(n.annotation) for n in cls.body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


_TYPE_WORD = {"int": "int", "hint": "int", "hint_auto": "int", "float": "float", "bool": "bool",
              "json": "", "str": ""}


@pytest.mark.network
@pytest.mark.parametrize("version", CHECKED_RELEASES)
def test_option_table_matches_vllm_arg_utils(version: str) -> None:
    src = (release_tree("vllm", version) / "vllm" / "engine" / "arg_utils.py").read_text()
    fields = _engine_args_fields(src)
    calls = re.findall(r"add_argument\(\s*((?:\"-[-\w]+\",\s*)+)", src)
    declared = [tuple(re.findall(r"\"(-[-\w]+)\"", c)) for c in calls]
    present = 0
    for opt in OPTIONS:
        if opt.since is not None and tuple(map(int, version.split("."))) < tuple(
                map(int, opt.since.split("."))):
            assert f'"{opt.names[0]}"' not in src, f"{opt.names[0]} exists before {opt.since}"
            continue
        present += 1
        group = next((d for d in declared if d[0] == opt.names[0]), None)
        assert group is not None, f"{opt.names[0]} is not declared in vLLM {version}"
        for alias in opt.names[1:]:
            if alias == "--device-memory-utilization" and version < "0.34":
                continue  # added with 0.34 (checked: absent from 0.25.1)
            assert alias in group, f"{alias} is not an alias of {opt.names[0]} in {version}"
        assert opt.field in fields, f"EngineArgs has no field {opt.field} in {version}"
        word = _TYPE_WORD[opt.type]
        assert word in fields[opt.field], (opt.field, fields[opt.field])
    assert present >= len(OPTIONS) - 2


def test_table_and_model_agree() -> None:
    assert list(option_fields()) == [o.field for o in OPTIONS]
    defaults = ServeArgs()
    for o in OPTIONS:
        assert getattr(defaults, o.field) == o.default, o.field
    assert len(BY_NAME) == sum(len(o.names) for o in OPTIONS)  # each flag once
    assert NEGATIONS["--no-enable-eplb"].field == "enable_eplb"
    assert NEGATIONS["--disable-eplb"].field == "enable_eplb"
    assert NEGATIONS["--enable-custom-all-reduce"].field == "disable_custom_all_reduce"


# --- forms ----------------------------------------------------------------------------------------
def test_aliases_forms_and_values() -> None:
    sa = parse_serve_args([
        "vllm", "serve", "zai-org/GLM-5.1", "-tp", "8", "-pp=2", "-dp", "1", "-dcp", "8",
        "--cp_kv_cache_interleave_size", "1", "--enable-eplb", "-ep", "--max-model-len", "128k",
        "--max-num-batched-tokens", "8K", "--max-num-seqs", "16", "--kv-cache-dtype", "fp8",
        "--block-size", "64", "--device-memory-utilization", "0.92",
        "--distributed-executor-backend", "mp", "--attention-config", '{"backend": "X"}',
        "--hf-overrides", '{"index_topk": 2048}', "--trust-remote-code", "--tokenizer", "tok",
        "-sc", '{"method": "mtp", "num_speculative_tokens": 1}', "--tool-call-parser", "glm47",
    ])
    assert (sa.model, sa.tp, sa.pp, sa.dp, sa.dcp, sa.interleave) == ("zai-org/GLM-5.1", 8, 2, 1,
                                                                        8, 1)
    assert sa.enable_eplb and sa.enable_expert_parallel and sa.trust_remote_code
    assert (sa.max_model_len, sa.max_num_batched_tokens, sa.max_num_seqs) == (128_000, 8192, 16)
    assert (sa.kv_cache_dtype, sa.block_size, sa.gpu_memory_utilization) == ("fp8", 64, 0.92)
    assert sa.distributed_executor_backend == "mp" and sa.tokenizer == "tok"
    assert sa.effective_attention_backend == "X" and sa.hf_overrides == {"index_topk": 2048}
    assert (sa.speculative_method, sa.num_speculative_tokens) == ("mtp", 1)
    assert sa.unknown == ["--tool-call-parser", "glm47"]
    assert parse_serve_args(["m", "--max-model-len", "1m"]).max_model_len == 1_000_000
    assert parse_serve_args(["m", "--max-model-len", "auto"]).max_model_len is None
    assert parse_serve_args(["--model=/models/x", "-tp", "2"]).model == "/models/x"
    off = parse_serve_args(["m", "--no-enable-prefix-caching", "--disable-eplb"])
    assert off.enable_prefix_caching is False and off.enable_eplb is False


def test_speculative_forms() -> None:
    dotted = parse_serve_args(["m", "--speculative-config.method", "mtp",
                               "-sc.num_speculative_tokens", "3"])
    assert dotted.speculative == {"method": "mtp", "num_speculative_tokens": 3}
    short = parse_serve_args(["m", "--spec-method", "mtp", "--spec-tokens", "2"])
    assert (short.speculative_method, short.num_speculative_tokens) == ("mtp", 2)
    with pytest.raises(UserError, match="not valid JSON"):
        parse_serve_args(["m", "--speculative-config", "{bad"])
    with pytest.raises(UserError, match="not a number"):
        parse_serve_args(["m", "-tp", "eight"])
    with pytest.raises(UserError, match="needs a value"):
        parse_serve_args(["m", "-tp"])


def test_deprecated_interleave_per_release() -> None:
    """vLLM <= 0.32 lets ``--dcp-kv-cache-interleave-size`` > 1 override the CP interleave
    (``validate_block_size``); 0.33+ only under a KV-transfer connector."""
    sa = parse_serve_args(["m", "-dcp", "4", "--dcp-kv-cache-interleave-size", "16"])
    assert sa.interleave_for("0.25.1") == 16 and sa.interleave_for("0.34.0") == 1
    assert any("deprecated" in n for n in sa.notes)
    kvt = parse_serve_args(["m", "-dcp", "4", "--dcp-kv-cache-interleave-size", "16",
                            "--kv-transfer-config", '{"kv_connector": "NixlConnector"}'])
    assert kvt.interleave_for("0.34.0") == 16


def test_our_options_win_once() -> None:
    sa = parse_serve_args(["vllm", "serve", "m", "-dcp", "2", "--block-size", "128"])
    ours = sa.override(dcp=8, interleave=4, mtp=2, max_model_len=4096)
    assert (ours.dcp, ours.tp, ours.interleave, ours.num_speculative_tokens) == (8, 8, 4, 2)
    assert ours.block_size == 128 and ours.max_model_len == 4096
    assert "TP not given: assumed TP = DCP = 8" in ours.notes
    assert sa.dcp == 2  # a copy
    assert parse_serve_args(["m", "-tp", "4"]).override(dcp=8).tp == 4  # given TP is kept
    with pytest.raises(TypeError):
        sa.override(tensor_parallel=3)


# --- real lines -------------------------------------------------------------------------------------
def _value_after(text: str, key: str) -> tuple[bool, Any]:
    """``(present, value)`` of ``'key': value`` at the top level of vLLM's logged dict; the value
    is ``...`` when it is not a Python literal (a config object)."""
    m = re.search(r"[{,] '" + re.escape(key) + r"': ", text)
    if not m:
        return False, None
    i, depth, quote = m.end(), 0, ""
    j = i
    while j < len(text):
        c = text[j]
        if quote:
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "([{<":
            depth += 1
        elif c in ")]}>":
            if depth == 0:
                break
            depth -= 1
        elif c == "," and depth == 0:
            break
        j += 1
    try:
        return True, ast.literal_eval(text[i:j])
    except (ValueError, SyntaxError):
        return True, ...


_ENTRIES = json.loads((DATA / "serve-lines.json").read_text())["entries"]


@pytest.mark.parametrize("entry", _ENTRIES, ids=[e["id"] for e in _ENTRIES])
def test_values_equal_vllm_non_default_args(entry: dict[str, str]) -> None:
    argv = shlex.split(entry["command_line"].removeprefix("Command: "))
    sa = parse_serve_args(argv)
    logged = entry["non_default_args_line"]
    compared = 0
    for o in OPTIONS:
        present, value = _value_after(logged, o.field)
        ours = getattr(sa, o.field)
        if o.field in sa.given and ours != o.default:
            assert present, f"{o.field}={ours!r} given, but vLLM did not log it"
        if present and value is not ...:
            assert ours == value, (o.field, ours, value)
            compared += 1
    assert compared >= 10
    assert sa.dcp == 1 and "decode_context_parallel_size" in sa.given  # given, vLLM's default


def _field_line(name: str, start: str) -> list[str]:
    """The ``vllm serve`` command of a field log (joined over ``\\`` continuations)."""
    text = (FIELD_LOGS / name).read_text(encoding="utf-8")
    i = text.index(start)
    line = text[i:].split("\n")
    out = []
    for ln in line:
        code = ln.split("`", 1)[0]  # an inline-code span ends at its backtick
        out.append(code.rstrip().rstrip("\\"))
        if "`" in ln or not ln.rstrip().endswith("\\"):
            break
    return shlex.split(" ".join(out))


def test_field_log_launch_lines() -> None:
    a = parse_serve_args(_field_line("vllm-39774.txt", "CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve"))
    assert (a.model, a.tp, a.max_model_len, a.gpu_memory_utilization) == (
        "/input1/GLM-4.7-Flash", 4, 16384, 0.7)
    assert "--tool-call-parser" in a.unknown and "glm47" in a.unknown
    b = parse_serve_args(_field_line("vllm-23378.txt", "vllm serve --model="))
    assert (b.model, b.dp, b.max_num_seqs, b.gpu_memory_utilization) == (
        "deepseek-ai/DeepSeek-R1", 8, 1024, 0.75)
    assert b.enable_expert_parallel and b.trust_remote_code and b.enable_prefix_caching is False
    assert "-O" in b.unknown
    c = parse_serve_args(_field_line("vllm-34076.txt", "VLLM_PP_LAYER_PARTITION=16,32 CUDA"))
    assert (c.model, c.pp, c.enable_chunked_prefill) == (
        "./Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8", 2, True)
    d = parse_serve_args(_field_line("vllm-54794.txt", "vllm serve moonshotai"))
    assert (d.model, d.tp, d.trust_remote_code, d.enable_prefix_caching) == (
        "moonshotai/Kimi-K3", 8, True, True)
    e = parse_serve_args(_field_line("vllm-52682.txt", "vllm serve Qwen"))
    assert (e.tp, e.max_model_len, e.kv_cache_dtype) == (4, 262144, "fp8")
    f = parse_serve_args(_field_line("vllm-27508-1.txt", "vllm serve openai"))
    assert (f.model, f.max_num_batched_tokens) == ("openai/gpt-oss-120b", 1024)


# --- doctor, warmup plan and collect read the same values -----------------------------------------
LINE = ["vllm", "serve", "zai-org/GLM-5", "-tp", "8", "--decode-context-parallel-size", "4",
        "--cp-kv-cache-interleave-size", "1", "--block-size", "64", "--max-num-seqs", "16",
        "--max-model-len", "128k", "--max-num-batched-tokens", "8k", "--kv-cache-dtype", "fp8",
        "--speculative-config.method", "mtp", "--speculative-config.num_speculative_tokens", "2",
        "--enable-eplb", "--enable-expert-parallel"]


def _collect_meta(tmp_path: Path) -> dict[str, Any]:
    """``sm120kit collect -- <stand-in vllm> serve ...``: the stand-in prints and exits 3, so
    collect writes its post-mortem bundle; returns the bundle manifest."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "vllm"
    exe.write_text(f"#!{sys.executable}\nimport sys\nprint('stand-in vllm', sys.argv[1:])\n"
                   "sys.exit(3)\n")
    exe.chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
    r = subprocess.run([sys.executable, "-m", "sm120kit", "collect", "-o", str(out),
                        "--deadline", "20", "--", str(exe), *LINE[1:]], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr[-2000:]
    (tb,) = out.glob("sm120kit-bundle-*.tar.gz")
    with tarfile.open(tb) as tf:
        m = next(x for x in tf.getmembers() if x.name.endswith("/manifest.json"))
        f = tf.extractfile(m)
        assert f is not None
        return dict(json.loads(f.read()))


def test_doctor_warmup_and_collect_read_the_same_values(tmp_path: Path) -> None:
    sa = parse_serve_args(LINE)
    shape = sa.shape()
    # doctor
    rep = run_doctor(launch_argv=LINE, only=["launch.config", "launch.warmup_plan"],
                     environ={"HOME": str(tmp_path)}, root=str(tmp_path), paths=[str(tmp_path)])
    ev = rep.get("launch.config").evidence
    assert (ev["tp"], ev["dcp"], ev["interleave"], ev["block_size"], ev["max_num_seqs"],
            ev["num_speculative_tokens"]) == (8, 4, 1, 64, 16, 2)
    doctor_plan = rep.get("launch.warmup_plan").evidence["plan"]
    # warmup plan (core and CLI) and warmup run's config
    assert plan_for(sa).to_dict() == doctor_plan
    cli = subprocess.run([sys.executable, "-m", "sm120kit", "warmup", "plan", "--json", "--",
                          *LINE], capture_output=True, text=True, timeout=60)
    assert cli.returncode in (0, 1), cli.stderr
    body = json.loads(cli.stdout)  # the plan's keys inside the tool's JSON envelope
    assert {k: body[k] for k in doctor_plan if k in body} == doctor_plan, body
    cfg = RunConfig.from_serve(sa)
    assert (cfg.dcp, cfg.block_size, cfg.interleave, cfg.mtp, cfg.max_model_len,
            cfg.max_num_batched_tokens) == (4, 64, 1, 2, 128_000, 8000)
    run_plan = cfg.warmup_plan().to_dict()  # a run has --batch instead of max_num_seqs
    skip = {"max_num_seqs", "notes"}
    assert {k: v for k, v in run_plan.items() if k not in skip} == {
        k: v for k, v in doctor_plan.items() if k not in skip}
    # collect
    meta = _collect_meta(tmp_path)
    assert meta["serve_args"] == json.loads(json.dumps(shape))
    assert (shape["tp"], shape["dcp"], shape["enable_eplb"], shape["max_model_len"]) == (
        8, 4, True, 128_000)


def test_our_dcp_wins_in_doctor_and_warmup(tmp_path: Path) -> None:
    line = ["vllm", "serve", "m", "-dcp", "2", "--block-size", "64"]
    rep = run_doctor(launch_argv=line, dcp_planned=8, only=["launch.config"],
                     environ={"HOME": str(tmp_path)}, root=str(tmp_path), paths=[str(tmp_path)])
    assert (rep.get("launch.config").evidence["dcp"], rep.get("launch.config").evidence["tp"]) \
        == (8, 8)
    cli = subprocess.run([sys.executable, "-m", "sm120kit", "warmup", "plan", "--json", "--dcp",
                          "8", "--", *line], capture_output=True, text=True, timeout=60)
    assert '"dcp": 8' in cli.stdout, cli.stdout + cli.stderr
