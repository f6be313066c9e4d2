"""Launch-config checks with the GLM-5 and DeepSeek-V3.2 config.json values (see conftest),
real vLLM 0.33.0 trees (unpatched / patched) for the warmup plan, and the real FlashInfer 0.7.2
tree. The visible-GPU count uses NVML through the recorded (fake) seam: no GPU here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sm120kit.doctor import run_doctor
from sm120kit.doctor.launch import build_plan, load_config_file
from sm120kit.errors import UserError
from sm120kit.facts.nvml_seam import RecordedSeam
from sm120kit.models.serve_args import parse_serve_args


def _run(tmp_path: Path, argv: list[str] | None, only: list[str], paths: list[Path] | None = None,
         **kw: Any):  # type: ignore[no-untyped-def]
    env = {"HOME": str(tmp_path / "home"), "PATH": str(tmp_path)}
    env.update(kw.pop("env", {}))
    return run_doctor(launch_argv=argv, only=only, environ=env, root=str(tmp_path),
                      paths=[str(p) for p in (paths or [tmp_path])], **kw)


def serve(model: Path, *extra: str) -> list[str]:
    return ["vllm", "serve", str(model), *extra]


def test_parse_serve_argv_forms() -> None:
    p = parse_serve_args(["vllm", "serve", "zai-org/GLM-5", "--tensor-parallel-size=8", "-dcp", "8",
                          "--trust-remote-code", "--kv-cache-dtype", "fp8_ds_mla",
                          "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}',
                          "--max-num-seqs", "32", "--gpu-memory-utilization", "0.9",
                          "--block-size", "64", "--cp-kv-cache-interleave-size", "1"])
    assert (p.model, p.tp, p.dcp, p.kv_cache_dtype) == ("zai-org/GLM-5", 8, 8, "fp8_ds_mla")
    assert (p.speculative_method, p.num_speculative_tokens, p.max_num_seqs) == ("mtp", 2, 32)
    assert p.gpu_memory_utilization == 0.9 and p.block_size == 64 and p.interleave == 1
    with pytest.raises(UserError):
        parse_serve_args(["vllm", "serve", "m", "-tp", "eight"])


def test_config_file_kinds(tmp_path: Path, glm5_config: dict) -> None:  # type: ignore[type-arg]
    (tmp_path / "config.json").write_text(json.dumps(glm5_config))
    assert load_config_file(tmp_path)[0] == "model"
    y = tmp_path / "serve.yaml"
    y.write_text("model: zai-org/GLM-5\ntensor-parallel-size: 8\n"
                 "decode_context_parallel_size: 4\nkv-cache-dtype: fp8_ds_mla\n")
    plan = build_plan(None, str(y), {"HOME": str(tmp_path)})
    assert plan is not None and (plan.serve.tp, plan.serve.dcp, plan.serve.model) == (
        8, 4, "zai-org/GLM-5")
    with pytest.raises(UserError):
        load_config_file(tmp_path / "missing.json")


def test_model_config_from_hf_cache(tmp_path: Path, glm5_config: dict) -> None:  # type: ignore[type-arg]
    snap = tmp_path / "hub" / "models--zai-org--GLM-5" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(glm5_config))
    plan = build_plan(["vllm", "serve", "zai-org/GLM-5", "-tp", "8"], None,
                      {"HF_HUB_CACHE": str(tmp_path / "hub")})
    assert plan is not None and plan.hf_config is not None
    assert plan.hf_config["num_attention_heads"] == 64 and "abc123" in str(plan.hf_config_source)


@pytest.mark.parametrize("cfg_name,tp,dcp,pcp,status,heads", [
    ("glm5", 8, 8, 1, "ok", 64),      # GLM-5 TP8 DCP8: 8 heads/rank x 8 = 64
    ("glm5", 4, 4, 1, "ok", 64),
    ("dsv32", 8, 8, 1, "ok", 128),    # DeepSeek-V3.2 TP8 DCP8: 16 x 8 = 128
    ("dsv32", 8, 16, 2, "fail", 256),  # PCP2 x TP8 with DCP16: 16 x 16 = 256 > 128
])
def test_heads_times_dcp(tmp_path: Path, model_dir, glm5_config: dict, dsv32_config: dict,  # type: ignore[no-untyped-def,type-arg]
                         cfg_name: str, tp: int, dcp: int, pcp: int, status: str,
                         heads: int) -> None:
    cfg = glm5_config if cfg_name == "glm5" else dsv32_config
    argv = serve(model_dir(cfg), "-tp", str(tp), "-dcp", str(dcp), "-pcp", str(pcp))
    rep = _run(tmp_path, argv, ["launch.heads", "launch.tp_dcp"])
    c = rep.get("launch.heads")
    assert c.status == status and c.evidence["kernel_heads"] == heads
    assert rep.get("launch.tp_dcp").status == "ok"


def test_tp_not_divisible_by_dcp(tmp_path: Path, model_dir, glm5_config: dict) -> None:  # type: ignore[no-untyped-def,type-arg]
    rep = _run(tmp_path, serve(model_dir(glm5_config), "-tp", "4", "-dcp", "8"),
               ["launch.tp_dcp"])
    c = rep.get("launch.tp_dcp")
    assert c.status == "fail" and "tp_size=4 must be divisible by dcp_size=8" in c.summary
    assert rep.exit_code == 2


def test_index_topk_and_row_bytes(tmp_path: Path, model_dir, glm5_config: dict,  # type: ignore[no-untyped-def,type-arg]
                                  dsv32_config: dict) -> None:  # type: ignore[type-arg]
    only = ["launch.index_topk", "launch.kv_row_bytes"]
    rep = _run(tmp_path, serve(model_dir(dsv32_config, "a"), "-tp", "8"), only)
    assert rep.get("launch.index_topk").status == "ok"
    rb = rep.get("launch.kv_row_bytes")
    assert rb.status == "ok" and rb.evidence["row_bytes"] == 656
    nope = dict(glm5_config, qk_rope_head_dim=0)  # GLM-5.3 NoPE shape -> 528 B rows
    rep = _run(tmp_path, serve(model_dir(nope, "b"), "-tp", "8"), only)
    assert rep.get("launch.kv_row_bytes").evidence["row_bytes"] == 528
    assert rep.get("launch.kv_row_bytes").status == "ok"
    odd = dict(glm5_config, index_topk=1024, qk_rope_head_dim=32)
    rep = _run(tmp_path, serve(model_dir(odd, "c"), "-tp", "8"), only)
    assert rep.get("launch.index_topk").status == "fail"
    assert rep.get("launch.kv_row_bytes").status == "fail"
    assert rep.get("launch.kv_row_bytes").evidence["row_bytes"] == 592
    dense = {k: v for k, v in glm5_config.items() if k != "index_topk"}
    rep = _run(tmp_path, serve(model_dir(dense, "d"), "-tp", "8"), ["launch.index_topk"])
    assert rep.get("launch.index_topk").status == "fail"


def test_config_missing_skips_model_checks(tmp_path: Path) -> None:
    rep = _run(tmp_path, ["vllm", "serve", "org/not-cached", "-tp", "8"],
               ["launch.config", "launch.heads", "launch.index_topk"])
    assert rep.get("launch.config").status == "warn"
    assert rep.get("launch.heads").status == "skip"
    assert "--config" in rep.get("launch.index_topk").summary


@pytest.mark.parametrize("dtype,dcp,status", [("auto", 8, "ok"), ("fp8", 8, "ok"),
                                               ("fp8_ds_mla", 8, "ok"), ("bfloat16", 1, "fail"),
                                               ("nvfp4_ds_mla", 8, "fail")])
def test_kv_cache_dtype(tmp_path: Path, model_dir, glm5_config: dict, dtype: str, dcp: int,  # type: ignore[no-untyped-def,type-arg]
                        status: str) -> None:
    argv = serve(model_dir(glm5_config), "-tp", "8", "-dcp", str(dcp), "--kv-cache-dtype", dtype)
    assert _run(tmp_path, argv, ["launch.kv_cache_dtype"]).get(
        "launch.kv_cache_dtype").status == status


@pytest.mark.parametrize("extra,status", [
    ([], "ok"), (["--block-size", "128", "--cp-kv-cache-interleave-size", "64"], "ok"),
    (["--block-size", "32"], "fail"), (["--cp-kv-cache-interleave-size", "3"], "fail"),
    (["--block-size", "64", "--cp-kv-cache-interleave-size", "128"], "fail")])
def test_block_size(tmp_path: Path, extra: list[str], status: str) -> None:
    argv = ["vllm", "serve", "m", "-tp", "8", "-dcp", "8", *extra]
    assert _run(tmp_path, argv, ["launch.block_size"]).get("launch.block_size").status == status


def test_mtp_interleave_and_decode_tokens(tmp_path: Path) -> None:
    mtp = ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}']
    rep = _run(tmp_path, ["vllm", "serve", "m", "-tp", "8", "-dcp", "8",
                          "--cp-kv-cache-interleave-size", "64", *mtp],
               ["launch.mtp_interleave"])
    # no patched vLLM installed in the test interpreter: the stock impl refuses it
    assert rep.get("launch.mtp_interleave").status == "fail"
    assert "apply --installed" in (rep.get("launch.mtp_interleave").fix or "")
    rep = _run(tmp_path, ["vllm", "serve", "m", "-tp", "8", "-dcp", "8", "--max-num-seqs", "32",
                          *mtp], ["launch.mtp_interleave", "launch.decode_tokens"])
    assert rep.get("launch.mtp_interleave").status == "ok"
    d = rep.get("launch.decode_tokens")
    assert d.status == "warn" and d.evidence["tokens_per_step"] == 96 and "21" in (d.fix or "")
    rep = _run(tmp_path, ["vllm", "serve", "m", "--max-num-seqs", "16", *mtp],
               ["launch.decode_tokens"])
    assert rep.get("launch.decode_tokens").status == "ok"


def test_dsv4_backend(tmp_path: Path, model_dir, dsv32_config: dict) -> None:  # type: ignore[no-untyped-def,type-arg]
    v4 = dict(dsv32_config, model_type="deepseek_v4", architectures=["DeepseekV4ForCausalLM"])
    d = model_dir(v4)
    rep = _run(tmp_path, serve(d, "-tp", "8", "--attention-backend",
                               "FLASHINFER_MLA_SPARSE_SM120"), ["launch.dsv4_backend"])
    c = rep.get("launch.dsv4_backend")
    assert c.status == "fail" and "FLASHINFER_MLA_SPARSE_DSV4" in (c.fix or "")
    rep = _run(tmp_path, serve(d, "-tp", "8"), ["launch.dsv4_backend"])
    assert rep.get("launch.dsv4_backend").status == "ok"


def _gpus(n: int) -> RecordedSeam:
    """Fake NVML seam (recorded values; no GPU here): n RTX PRO 6000 GPUs."""
    return RecordedSeam({"nvmlDeviceGetCount": n,
                         "nvmlDeviceGetName": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
                         "nvmlDeviceGetCudaComputeCapability": [12, 0],
                         "nvmlDeviceGetUUID": {f"({i},)": f"GPU-{i:08d}-aaaa" for i in range(n)}})


def test_gpus_visible(tmp_path: Path) -> None:
    argv = ["vllm", "serve", "m", "-tp", "8", "-dcp", "8"]
    rep = _run(tmp_path, argv, ["launch.gpus_visible"], nvml_seam=_gpus(4))
    c = rep.get("launch.gpus_visible")
    assert c.status == "fail" and c.evidence == {"need": 8, "have": 4,
                                                 "source": "NVML (after CUDA_VISIBLE_DEVICES)"}
    rep = _run(tmp_path, argv, ["launch.gpus_visible"], nvml_seam=_gpus(8))
    assert rep.get("launch.gpus_visible").status == "ok"
    rep = _run(tmp_path, argv, ["launch.gpus_visible"], nvml_seam=_gpus(8),
               env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    assert rep.get("launch.gpus_visible").evidence["have"] == 4


def test_warmup_plan_unpatched_vs_patched(tmp_path: Path, vllm_tree: Path,
                                          vllm_patched: Path) -> None:
    argv = ["vllm", "serve", "m", "-tp", "8", "-dcp", "8", "--max-num-seqs", "32"]
    rep = _run(tmp_path, argv, ["launch.warmup_plan"], paths=[vllm_tree])
    c = rep.get("launch.warmup_plan")
    assert c.status == "fail" and "sm120kit apply --installed" in (c.fix or "")
    # upstream's 2-token prompt + 1 decode token: only ranks 0..2 hold KV at the decode step
    assert "[3, 4, 5, 6, 7]" in c.summary
    rep = _run(tmp_path, argv, ["launch.warmup_plan"], paths=[vllm_patched])
    c = rep.get("launch.warmup_plan")
    assert c.status == "ok" and c.evidence["plan"]["fixed_prompt_len"] == 512
    rep = _run(tmp_path, ["vllm", "serve", "m", "-tp", "8"], ["launch.warmup_plan"],
               paths=[vllm_tree])
    assert rep.get("launch.warmup_plan").status == "ok"


def test_full_launch_glm5_dcp8_on_patched(tmp_path: Path, model_dir, glm5_config: dict,  # type: ignore[no-untyped-def,type-arg]
                                          vllm_patched: Path, fi_trees: dict[str, Path]) -> None:
    argv = serve(model_dir(glm5_config), "-tp", "8", "-dcp", "8", "--kv-cache-dtype",
                 "fp8_ds_mla", "--max-num-seqs", "16", "--speculative-config",
                 '{"method": "mtp", "num_speculative_tokens": 2}')
    rep = _run(tmp_path, argv, ["launch", "vllm", "flashinfer.dispatch", "flashinfer.sm120_api"],
               paths=[vllm_patched, fi_trees["0.7.2.post1"]], nvml_seam=_gpus(8))
    bad = [(c.id, c.status, c.summary) for c in rep.checks
           if c.status not in ("ok",) and c.id != "launch.kv_capacity"]
    assert not bad, bad
    assert rep.exit_code == 0
    # the planner needs a context length: this config has no max_position_embeddings
    cap = rep.get("launch.kv_capacity")
    assert cap.status == "skip" and "--max-model-len" in cap.summary


def test_dcp_and_tp_options_with_model_config(tmp_path: Path, glm5_config: dict) -> None:  # type: ignore[type-arg]
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(glm5_config))
    env = {"HOME": str(tmp_path)}
    rep = run_doctor(config_path=str(cfg), dcp_planned=8, only=["launch"], environ=env,
                     root=str(tmp_path), paths=[str(tmp_path)])
    assert rep.get("launch.tp_dcp").status == "ok"
    assert "assumed TP = DCP = 8" in rep.get("launch.config").summary
    assert rep.get("launch.heads").evidence["kernel_heads"] == 64
    rep = run_doctor(config_path=str(cfg), dcp_planned=8, tp_planned=4, only=["launch.tp_dcp"],
                     environ=env, root=str(tmp_path), paths=[str(tmp_path)])
    assert rep.get("launch.tp_dcp").status == "fail"
    # --dcp overrides the argv's DCP
    rep = run_doctor(launch_argv=["vllm", "serve", "m", "-tp", "8", "-dcp", "2"], dcp_planned=4,
                     only=["launch.config"], environ=env, root=str(tmp_path),
                     paths=[str(tmp_path)])
    assert rep.get("launch.config").evidence["dcp"] == 4


def test_serve_file_merged_under_argv(tmp_path: Path) -> None:
    y = tmp_path / "serve.yaml"
    y.write_text("tensor-parallel-size: 8\ndecode-context-parallel-size: 8\nblock-size: 128\n"
                 "speculative-config: {\"method\": \"mtp\", \"num_speculative_tokens\": 2}\n")
    plan = build_plan(["vllm", "serve", "m", "-dcp", "4"], str(y), {"HOME": str(tmp_path)})
    assert plan is not None and (plan.serve.tp, plan.serve.dcp, plan.serve.block_size) == (8, 4, 128)
    assert plan.serve.num_speculative_tokens == 2


def test_launch_check_without_launch_skips(tmp_path: Path) -> None:
    rep = run_doctor(only=["launch.heads"], environ={"HOME": str(tmp_path)}, root=str(tmp_path),
                     paths=[str(tmp_path)])
    assert rep.get("launch.heads").status == "skip"


def test_warmup_plan_without_vllm_warns(tmp_path: Path) -> None:
    rep = _run(tmp_path, ["vllm", "serve", "m", "-tp", "8", "-dcp", "8"], ["launch.warmup_plan"])
    c = rep.get("launch.warmup_plan")
    assert c.status == "warn" and "not installed" in c.summary and "[3, 4, 5, 6, 7]" in c.summary
