"""The v0.25 and v0.26-0.29 variants on the real PyPI releases 0.25.0, 0.25.1 (v0.25) and 0.26.0,
0.27.0, 0.27.1, 0.28.0, 0.29.0 (v0.26-0.29): the same code in two layouts.

Per release: ``sm120kit apply --checkout`` on a clone of the release repository (plain
``git am`` succeeds, no 3-way fallback needed), ``verify`` (compile, no new pyflakes names,
markers), ``status`` applied, re-apply a no-op, and AST checks of the behaviour: class
attributes on the class, the LSE returned, out/LSE sized from ``q.shape[1]``, valid counts as
``seq_lens``, the DCP index conversion, the per-device workspace and the warmup prompt length.
The pure helpers the patches add (``dcp_decode_prompt_len``, ``_workspace_device_key`` /
``_get_workspace_buffer``) are executed from the patched source with CPU torch. vLLM itself is
not importable here (no CUDA build), so ``_runner_dcp_decode_prompt_len`` runs against two
stand-in spec classes and a minimal runner object (only the attributes it reads).
"""

from __future__ import annotations

import ast
import json
import subprocess
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from sm120kit.cli import run
from sm120kit.models.series import load_series
from sm120kit.patchset.release import release_repo
from tests.patches.astutil import (
    calls,
    class_assigns,
    enclosing_ifs,
    find_class,
    find_func,
    is_q_shape_1,
    is_self_attr,
    kw,
    one_call,
    src,
)
from tests.support.forks import SM, WS, WU, git

pytestmark = pytest.mark.network  # builds vLLM release trees/repositories (PyPI wheels)

RELEASES = ["0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0"]


@dataclass
class Patched:
    version: str
    root: Path


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict, str]:
    capsys.readouterr()
    rc = run(list(argv))
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if out.strip().startswith("{") else {}), err


@pytest.fixture(scope="module", params=RELEASES)
def patched(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Patched:
    version = request.param
    clone = tmp_path_factory.mktemp(f"v{version}") / "vllm"
    git(clone.parent, "clone", "-q", str(release_repo(version)), str(clone))
    # the variant applies with plain `git am` (no -3 needed) on every release of the family
    series = load_series()
    _target, variant = series.variant_for(f"vllm-{version}")
    assert variant.name == ("v0.25" if version.startswith("0.25.") else "v0.26-0.29")
    probe = clone.parent / "probe"
    git(clone.parent, "clone", "-q", str(clone), str(probe))
    git(probe, "-c", "user.name=x", "-c", "user.email=x@x", "am",
        *[str(variant.patch_path(p)) for p in variant.patches])
    rc = run(["apply", "--branch", f"vllm-{version}", "--repo", str(clone), "--checkout"])
    assert rc == 0
    # the engine's result is the same tree as plain `git am`
    assert git(clone, "rev-parse", "HEAD^{tree}") == git(probe, "rev-parse", "HEAD^{tree}")
    return Patched(version, clone)


def test_apply_verify_status_reapply(patched: Patched, capsys: pytest.CaptureFixture[str]) -> None:
    version = patched.version
    alias = f"vllm-{version}"
    rc, doc, err = cli(capsys, "verify", "--repo", str(patched.root), "--branch", alias, "--json")
    assert rc == 0, (err, doc)
    rc, doc, err = cli(capsys, "status", "--repo", str(patched.root), "--branch", alias, "--json")
    assert rc == 0, err
    assert {p["state"] for p in doc["patches"]} == {"applied"}
    head = git(patched.root, "rev-parse", "HEAD")
    rc, doc, err = cli(capsys, "apply", "--branch", alias, "--repo", str(patched.root), "--json")
    assert rc == 0 and doc["status"] == "already-applied", err
    assert git(patched.root, "rev-parse", "HEAD") == head
    assert git(patched.root, "diff", "--stat", f"v{version}", "--", "vllm").count("|") == 3


def _mod(root: Path, rel: str) -> ast.Module:
    return ast.parse((root / rel).read_text())


def test_class_attributes_and_bookkeeping(patched: Patched) -> None:
    cls = find_class(_mod(patched.root, SM), "FlashInferMLASparseSM120Impl")
    attrs = class_assigns(cls)
    assert src(attrs["can_return_lse_for_decode"]) == "True"
    assert src(attrs["supports_dcp"]) == "True"
    assert src(attrs["lse_base_on_e"]) == "False"  # FlashInfer's sparse LSE is base 2
    init = find_func(cls, "__init__")
    assert src(attrs["supports_mtp_with_cp_non_trivial_interleave_size"]) == "True"
    # no init-time copy of the interleave: it is read from the metadata at forward time
    sets = [n for n in ast.walk(cls) if isinstance(n, ast.Assign)
            and any(is_self_attr(t, "cp_kv_cache_interleave_size") for t in n.targets)]
    assert sets == []
    # this layout never calls super().__init__()
    assert not calls(init, "__init__")


def test_forward_converts_counts_and_returns_lse(patched: Patched) -> None:
    cls = find_class(_mod(patched.root, SM), "FlashInferMLASparseSM120Impl")
    fwd = find_func(cls, "forward_mqa")
    conv = one_call(fwd, "triton_filter_and_convert_dcp_index")
    assert is_self_attr(kw(conv, "dcp_size"), "dcp_world_size")
    assert is_self_attr(kw(conv, "dcp_rank"), "dcp_rank")
    assert src(kw(conv, "return_valid_counts")) == "True"
    assert src(kw(conv, "cp_kv_cache_interleave_size")) == (
        "attn_metadata.cp_kv_cache_interleave_size")
    assert kw(conv, "BLOCK_STRIDE_ROWS") is None  # 0.25-0.28 lack it; 0.29 has it optional
    (branch, in_body), *_ = enclosing_ifs(fwd, conv)
    assert src(branch.test) == "self.dcp_world_size > 1" and in_body

    fi = one_call(fwd, "flashinfer_trtllm_batch_decode_with_kv_cache_mla")
    assert src(kw(fi, "seq_lens")) == "valid_counts"
    assert src(kw(fi, "lse")) == "lse" and src(kw(fi, "return_lse")) == "lse is not None"
    assert kw(fi, "sparse_mla_top_k_lens") is None

    # out and LSE sized from q.shape[1]; self.num_heads no longer used for sizing
    empties = calls(fwd, "new_empty")
    assert len(empties) == 2
    for call in empties:
        shape = call.args[0]
        assert isinstance(shape, ast.Tuple) and is_q_shape_1(shape.elts[1]), src(call)
    assert "self.num_heads" not in src(fwd)
    lse_alloc = [c for c in empties if "float32" in src(c)]
    assert len(lse_alloc) == 1
    (gate, in_body), *_ = enclosing_ifs(fwd, lse_alloc[0])
    assert is_self_attr(gate.test, "need_to_return_lse_for_decode") and in_body

    rets = [n for n in ast.walk(fwd) if isinstance(n, ast.Return)]
    final = fwd.body[-1]
    assert isinstance(final, ast.Return) and src(final.value) == "(out, lse)"
    assert all("None" not in src(r.value) for r in rets if r is not final)
    # rows without local keys masked: out 0, LSE -inf
    fills = {src(c) for c in calls(fwd, "masked_fill_")}
    assert any(f.startswith("out.masked_fill_") and "0.0" in f for f in fills)
    assert any(f.startswith("lse.masked_fill_") and "-inf" in f for f in fills)


def _exec_funcs(tree: ast.Module, names: list[str], ns: dict) -> dict:
    body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert [n.name for n in body] == names
    code = compile(ast.Module(body=body, type_ignores=[]), "<patched>", "exec")
    exec(code, ns)
    return ns


def test_workspace_is_per_device(patched: Patched) -> None:
    import torch

    tree = _mod(patched.root, WS)
    get = find_func(tree, "_get_workspace_buffer")
    assert not any(isinstance(n, ast.Global) for n in ast.walk(get))
    assert "_fi_sparse_workspace:" not in (patched.root / WS).read_text()
    ns = _exec_funcs(tree, ["_workspace_device_key", "_get_workspace_buffer"], {
        "torch": torch,
        "envs": types.SimpleNamespace(VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE=4096),
        "_fi_sparse_workspaces": {},
    })
    cpu = ns["_get_workspace_buffer"](torch.device("cpu"))
    meta = ns["_get_workspace_buffer"](torch.device("meta"))
    assert cpu.device.type == "cpu" and meta.device.type == "meta"
    # 0.25 allocates uint8 (the CuteDSL tactic's int8 came with 0.26): the patch keeps the dtype
    want = torch.uint8 if patched.version.startswith("0.25.") else torch.int8
    assert cpu.dtype == want and cpu.numel() == 4096
    assert ns["_get_workspace_buffer"]("cpu") is cpu  # same device → same buffer
    assert set(ns["_fi_sparse_workspaces"]) == {torch.device("cpu"), torch.device("meta")}
    # and the SM120 impl takes it at init
    init = find_func(find_class(_mod(patched.root, SM), "FlashInferMLASparseSM120Impl"), "__init__")
    assert calls(init, "_get_workspace_buffer")


class _Cross:  # stand-ins for vLLM's spec classes (vLLM cannot be imported here)
    block_size = 16


class _Mamba:
    block_size = 1024


class _Attn:
    def __init__(self, block_size: int) -> None:
        self.block_size = block_size


def test_warmup_prompt_from_dcp_and_block_size(patched: Patched) -> None:
    tree = _mod(patched.root, WU)
    lines: list[str] = []
    logger = types.SimpleNamespace(warning=lambda msg, *a: lines.append(msg % a))
    ns = _exec_funcs(tree, ["dcp_decode_prompt_len", "_runner_dcp_decode_prompt_len"],
                     {"CrossAttentionSpec": _Cross, "MambaSpec": _Mamba, "GPUModelRunner": object,
                      "logger": logger})
    f = ns["dcp_decode_prompt_len"]
    for n in (1, 2, 4, 8):
        for b in (64, 128):
            want = 2 if n == 1 else n * b
            assert f(n, b, max_model_len=65536, max_num_batched_tokens=8192) == want
    assert f(8, 128, max_model_len=300, max_num_batched_tokens=8192) == 298  # L + q + 1 <= len
    assert f(8, 128, max_model_len=65536, max_num_batched_tokens=512) == 512
    assert f(2, 64, max_model_len=3, max_num_batched_tokens=8192) == 2

    def runner(dcp: int, *specs: object, mnbt: int = 8192,
               draft: int | None = None) -> types.SimpleNamespace:
        groups = [types.SimpleNamespace(kv_cache_spec=s) for s in specs]
        spec = None if draft is None else types.SimpleNamespace(
            max_num_new_slots_for_drafting=draft)
        return types.SimpleNamespace(
            vllm_config=types.SimpleNamespace(
                parallel_config=types.SimpleNamespace(decode_context_parallel_size=dcp)),
            speculative_config=spec,
            scheduler_config=types.SimpleNamespace(max_num_batched_tokens=mnbt),
            max_model_len=65536,
            kv_cache_config=types.SimpleNamespace(kv_cache_groups=groups))

    g = ns["_runner_dcp_decode_prompt_len"]
    assert g(runner(4, _Attn(64)), 1) == 256
    assert g(runner(4, _Attn(64), _Cross(), _Mamba()), 1) == 256  # non-attention groups skipped
    wrapped = types.SimpleNamespace(first_spec=_Attn(128), block_size=999)
    assert g(runner(2, wrapped), 1) == 256  # UniformTypeKVCacheSpecs unwrapped
    assert lines == []
    assert g(runner(4, _Attn(64), mnbt=200, draft=2), 1) == 198  # draft slots stay free
    assert len(lines) == 1 and "clamped to 198 tokens, below 256" in lines[0]

    # in run_mixed_prefill_decode_warmup: upstream's 2 stays, overridden only when DCP > 1
    fn = find_func(tree, "run_mixed_prefill_decode_warmup")
    sets = [n for n in ast.walk(fn) if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "decode_prompt_len" for t in n.targets)]
    assert [src(s.value) for s in sets] == [
        "2", "_runner_dcp_decode_prompt_len(model_runner, decode_scheduled_tokens)"]
    (gate, in_body), *_ = enclosing_ifs(fn, sets[1])
    assert src(gate.test) == "dcp_size > 1" and in_body


def test_dcp1_warmup_and_forward_unchanged_outside_the_dcp_branches(patched: Patched) -> None:
    """With DCP = 1 the patched code takes the upstream path: compare the function bodies with
    the DCP-only statements removed."""
    version = patched.version
    upstream = subprocess.run(["git", "show", f"v{version}:{WU}"], cwd=patched.root,
                              capture_output=True, text=True, check=True).stdout
    up = find_func(ast.parse(upstream), "run_mixed_prefill_decode_warmup")
    new = find_func(_mod(patched.root, WU), "run_mixed_prefill_decode_warmup")

    def strip(fn: ast.FunctionDef) -> str:
        body = [s for s in fn.body
                if not (isinstance(s, ast.If) and "dcp_size" in src(s.test))
                and not (isinstance(s, ast.Assign) and src(s.targets[0]) == "dcp_size")]
        return ast.dump(ast.Module(body=body, type_ignores=[]))

    assert strip(new) == strip(up)


def test_unsupported_releases_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    rc, _, err = cli(capsys, "apply", "--branch", "vllm-0.24.0")
    assert rc == 2
    assert "vllm-0.24.0 is not supported" in err and "FlashInfer 0.6.12" in err
    assert "kv_scale_format" in err
    assert list(tmp_path.iterdir()) == []
    rc, doc, _ = cli(capsys, "targets", "--json")
    assert rc == 0
    rows = {t["alias"]: t for t in doc["targets"]}
    assert rows["vllm-0.24.0"]["status"] == "unsupported" and "DCP index helper" in rows[
        "vllm-0.24.0"]["reason"]
    assert rows["eldritch-20260627"]["status"] == "unverified-here"
    assert all(rows[f"vllm-{r}"]["status"] == "verified" for r in RELEASES)
    for r in ("0.25.0", "0.25.1"):  # supported with a FlashInfer newer than the 0.6.13 pin
        row = rows[f"vllm-{r}"]
        assert row["variant"] == "v0.25" and row["requires_flashinfer"] == "0.6.14"
        assert row["support"] == "verified with FlashInfer >= 0.6.14"
        assert "FLASHINFER_DISABLE_VERSION_CHECK=1" in row["requires_note"]
    assert all(rows[f"vllm-{r}"]["requires_flashinfer"] is None for r in RELEASES[2:])


@pytest.mark.parametrize("version", ["0.25.0", "0.25.1"])
def test_v025_apply_prints_the_flashinfer_requirement(
        version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On a checkout, ``apply`` proceeds and names the FlashInfer the release needs."""
    clone = tmp_path / "vllm"
    git(tmp_path, "clone", "-q", str(release_repo(version)), str(clone))
    capsys.readouterr()
    rc = run(["apply", "--branch", f"vllm-{version}", "--repo", str(clone)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    text = " ".join((out + err).split())
    assert f"vllm-{version} needs flashinfer-python >= 0.6.14" in text
    assert "pip install flashinfer-python==0.6.14" in text
    assert "FLASHINFER_DISABLE_VERSION_CHECK=1" in text


@pytest.mark.network
def test_v025_launcher_keywords_need_flashinfer_0_6_14(patched: Patched) -> None:
    """The keywords the patched 0.25/0.26-0.29 forward sends to FlashInfer: all parameters of
    flashinfer-python 0.6.14's decode entry point (the requirement of the 0.25 targets), while
    0.6.13 (vLLM 0.25's pin) lacks ``kv_scale_format`` - why the pin cannot run SM120."""
    from sm120kit.patchset.release import release_tree

    fwd = find_func(find_class(_mod(patched.root, SM), "FlashInferMLASparseSM120Impl"),
                    "forward_mqa")
    sent = {k.arg for k in one_call(fwd, "flashinfer_trtllm_batch_decode_with_kv_cache_mla").keywords}

    def params(version: str) -> set[str]:
        core = release_tree("flashinfer-python", version) / "flashinfer" / "mla" / "_core.py"
        fn = find_func(ast.parse(core.read_text()), "trtllm_batch_decode_with_kv_cache_mla")
        return {a.arg for a in fn.args.args + fn.args.kwonlyargs}

    assert sent <= params("0.6.14"), sorted(sent - params("0.6.14"))
    assert "kv_scale_format" in sent and "kv_scale_format" not in params("0.6.13")
