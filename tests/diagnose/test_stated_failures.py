"""No false all-clear on what a report states without a log line of the failure: a stated
problem or a fix the run needed in the poster's words, the body of SGLang's capture-failure
message, and a bfloat16 engine config beside a GPU that cannot run it. Real wordings, sources
cited; the look-alikes that state no failure stay all-clear."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose.engine import diagnose

# vLLM 0.5.x llm_engine.py: the V0 engine's config echo (zai-org/GLM-4#510 pastes one)
BANNER = ("INFO 08-27 14:00:04 llm_engine.py:174] Initializing an LLM engine (v0.5.4) with "
          "config: model='/data/glm-4-9b-chat', speculative_config=None, tokenizer_mode=auto, "
          "trust_remote_code=True, dtype={dtype}, max_seq_len=8192, tensor_parallel_size=2")
# SGLang python/sglang/srt/model_executor/cuda_graph_runner.py: CUDA_GRAPH_CAPTURE_FAILED_MSG,
# printed only as the body of 'Exception: Capture cuda graph failed: <error>'
SGLANG_TAIL = ("Possible solutions:\n"
               "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
               "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
               "3. disable torch compile by not using --enable-torch-compile\n"
               "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge "
               "performance loss)\n"
               "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose\n")


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "report.md"
    p.write_text(text)
    return p


@pytest.mark.parametrize("words", [
    # https://github.com/vllm-project/vllm/issues/7151 (the whole description)
    "I met the same problem as in issue #7077, but the issue was closed without solutions.",
    # https://github.com/vllm-project/vllm/issues/3974 (a comment: the workaround it needed)
    "I just found a solution that works!",
    # https://github.com/liucongg/ChatGLM-Finetuning/issues/102 (field-logs-e): "an error is
    # reported", the word before the pasted error
    "报错",
])
def test_a_stated_problem_or_a_needed_fix_is_never_all_clear(tmp_path: Path, words: str) -> None:
    res = diagnose([_write(tmp_path, f"### Describe the bug\n\n{words}\n")])
    assert res.exit_code == 1 and res.findings[0].category == "unknown", res.verdict
    assert res.findings[0].evidence[0].text.strip() in words


@pytest.mark.parametrize("words", [
    "I don't have the same problem on 0.5.4, it starts fine.",
    "Is there a solution for serving this model on two GPUs?",
    # a command line's option value is no hang (ChatGLM-Finetuning#102's launch command)
    "                --train_type freeze \\",
    "deepspeed train.py --freeze-vision-tower --on-error crash",
])
def test_words_that_state_no_problem_stay_all_clear(tmp_path: Path, words: str) -> None:
    assert diagnose([_write(tmp_path, f"{words}\n")]).exit_code == 0


def test_the_body_of_sglangs_capture_failure_places_the_failure(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/issues/6218: the exception's first line is cut off
    res = diagnose([_write(tmp_path, f"```\n{SGLANG_TAIL}```\n\n### Environment\n\n8 * H200\n")])
    top = res.findings[0]
    assert res.exit_code == 1 and top.category == "cudagraph-capture", res.verdict
    assert top.phase == "capture" and top.confidence < 0.8 and top.role == "position"


def test_the_capture_failure_with_its_error_line_names_that_error_first(tmp_path: Path) -> None:
    # the error the exception carries (here an OOM) is the cause; the body only places it
    text = ("Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 672.00 "
            f"MiB. GPU 0 has a total capacity of 140.06 GiB of which 200.75 MiB is free.\n\n"
            f"{SGLANG_TAIL}")
    res = diagnose([_write(tmp_path, text)])
    assert res.findings[0].category == "out-of-memory", res.verdict
    assert any(f.category == "cudagraph-capture" and f.role == "position" for f in res.findings)


def test_bfloat16_config_beside_a_pre_ampere_gpu_is_config_invalid(tmp_path: Path) -> None:
    # https://github.com/zai-org/GLM-4/issues/510: V100 (compute capability 7.0), bf16 config
    text = f"CUda 11.7, Python 3.10.12\ngpu V100 32G\n\n{BANNER.format(dtype='torch.bfloat16')}\n"
    res = diagnose([_write(tmp_path, text)])
    top = res.findings[0]
    assert res.exit_code == 1 and top.category == "config-invalid", res.verdict
    assert any("V100" in e.text for e in top.evidence)


@pytest.mark.parametrize(("gpu", "dtype"), [
    ("gpu V100 32G", "torch.float16"),  # half on Volta: supported
    ("GPU 0: NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "torch.bfloat16"),
    ("GPU 0: NVIDIA A100-SXM4-80GB", "torch.bfloat16"),
])
def test_a_dtype_the_gpu_runs_is_no_finding(tmp_path: Path, gpu: str, dtype: str) -> None:
    res = diagnose([_write(tmp_path, f"{gpu}\n\n{BANNER.format(dtype=dtype)}\n")])
    assert not any(f.category == "config-invalid" for f in res.findings), res.verdict


def test_a_run_that_works_once_p2p_is_disabled_is_the_p2p_path(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/3974 (a comment: TP=4 loads only with P2P off)
    text = ("I just found a solution that works!\nI set the env variable as "
            "`export NCCL_P2P_DISABLE=1`\n\n```\nllm = VLLM(model=\"./mixtral-8x7B\", "
            "tensor_parallel_size=4, trust_remote_code=True, enforce_eager=True)\n```\n")
    res = diagnose([_write(tmp_path, text)])
    top = res.findings[0]
    assert res.exit_code == 1 and top.category == "p2p-transport", res.verdict
    assert top.rule == "p2p-disable-fixed-it" and 0.5 <= top.confidence < 0.8


@pytest.mark.parametrize("words", [
    "export NCCL_P2P_DISABLE=1\nvllm serve Qwen/Qwen2-72B --tensor-parallel-size 4",
    "I set NCCL_P2P_DISABLE=1 but it didn't help, the server still hangs at startup.",
])
def test_the_p2p_setting_without_a_said_fix_is_not_that_finding(tmp_path: Path,
                                                                words: str) -> None:
    res = diagnose([_write(tmp_path, f"{words}\n")])
    assert not any(f.rule == "p2p-disable-fixed-it" for f in res.findings), res.verdict


# pip 25.0 src/pip/_internal/commands/install.py (_warn_about_conflicts, logged at CRITICAL and
# printed "ERROR: ..."), then the install finishes; the lines as vllm-project/vllm#6200 shows them
PIP_CONFLICT = (
    "  ERROR: pip's dependency resolver does not currently take into account all the packages "
    "that are installed. This behaviour is the source of the following dependency conflicts.\n"
    "  datasets 2.20.0 requires fsspec[http]<=2024.5.0,>=2023.1.0, but you have fsspec 2024.6.1 "
    "which is incompatible.\n"
    "  Successfully installed fsspec-2024.6.1\n")
READY = ("INFO 06-10 09:12:05 [api_server.py:1043] vLLM API server version 0.9.0\n"
         "INFO 06-10 09:13:05 [api_server.py:1818] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
         "INFO:     Application startup complete.\n")


def test_pips_conflict_report_before_a_server_that_gets_ready_is_no_failure(tmp_path: Path) -> None:
    res = diagnose([_write(tmp_path, PIP_CONFLICT + READY)])
    assert res.exit_code == 0 and res.state == "healthy", (res.verdict, res.findings)


def test_pips_conflict_report_counts_when_the_run_never_gets_ready(tmp_path: Path) -> None:
    res = diagnose([_write(tmp_path, PIP_CONFLICT)])
    assert res.exit_code == 1 and res.findings, res.verdict
    res = diagnose([_write(tmp_path, PIP_CONFLICT + "ImportError: cannot import name 'url_to_fs' "
                                                    "from 'fsspec.core'\n")])
    assert res.findings[0].category == "library-version", res.findings[0]


@pytest.mark.parametrize("words", [
    # https://github.com/sgl-project/sglang/pull/18263 (field-logs-e): a risk, not a failure
    "We see that only ~5 GB is left available after that, even risking OOM in CUDA Graph capture or elsewhere.",
    "We lower the KV budget to avoid OOM during capture.",
])
def test_a_risk_or_a_failure_avoided_is_no_complaint(tmp_path: Path, words: str) -> None:
    res = diagnose([_write(tmp_path, words + "\n")])
    assert res.exit_code == 0, (res.verdict, res.findings)
