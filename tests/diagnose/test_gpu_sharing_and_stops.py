"""The interposer rule (a GPU-sharing hook named beside a failed multi-GPU start) and the
config-banner-only paste (not a position where a run stopped). Real line wordings, sources cited."""

from __future__ import annotations

from pathlib import Path

from sm120kit.diagnose.engine import diagnose

# vLLM v1/engine/utils.py wait_for_engine_startup (0.10 .. 0.11): the API server's last words when
# an engine core process died during startup
ENGINE_FAILED = ("(APIServer pid=1) RuntimeError: Engine core initialization failed. See root "
                 "cause above. Failed core proc(s): {}")
# https://github.com/Project-HAMi/HAMi/issues/1479 (the report's first sentence, shortened)
HAMI_PROSE = ("When running vLLM 0.11.0 with tensor parallelism across two GPUs in a Kubernetes "
              "cluster managed by HAMi 2.7.0, initialization fails with NCCL / TCPStore "
              "connection errors, ending with:")
# vLLM 0.8.x llm_engine.py: the V0 engine's config echo (vllm-project/vllm#8031 pastes one)
BANNER = ("INFO 04-11 12:37:49 [llm_engine.py:242] Initializing a V0 LLM engine (v0.8.3) with "
          "config: model='mistralai/Mistral-Small-3.1-24B-Instruct-2503', tensor_parallel_size=2, "
          "pipeline_parallel_size=1, disable_custom_all_reduce=False, enforce_eager=False")


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "report.txt"
    p.write_text(text)
    return p


def test_gpu_sharing_layer_beside_a_failed_start_is_named(tmp_path: Path) -> None:
    p = _write(tmp_path, f"{HAMI_PROSE}\n\n```\n{ENGINE_FAILED}\n```\n")
    res = diagnose([p])
    assert res.exit_code == 1
    top = res.findings[0]
    assert top.category == "interposer" and 0.5 <= top.confidence < 0.8, top
    assert "HAMi 2.7.0" in top.evidence[0].text


def test_volcano_vgpu_plugin_is_a_gpu_sharing_layer(tmp_path: Path) -> None:
    # https://github.com/volcano-sh/volcano-vgpu-device-plugin/issues/108
    prose = ("When running vLLM 0.15.1 with tensor parallelism across two GPUs in a Kubernetes "
             "cluster managed by volcano 1.14.1 with volcano-vgpu-device-plugin 1.11.0, "
             "initialization fails")
    res = diagnose([_write(tmp_path, f"{prose}\n\n```\n{ENGINE_FAILED}\n```\n")])
    assert res.findings[0].category == "interposer"


def test_gpu_sharing_layer_on_a_healthy_run_is_not_a_cause(tmp_path: Path) -> None:
    """Named, but the server came up and served: no interposer finding at >= 0.5."""
    log = "\n".join([
        "[HAMI-core Msg(57:140198:libvgpu.c:836)]: Initializing.....",
        "INFO 05-01 10:00:00 [api_server.py:1024] Starting vLLM API server 0 on http://0.0.0.0:8000",
        "INFO:     Application startup complete.",
        "INFO 05-01 10:00:10 [loggers.py:122] Engine 000: Avg prompt throughput: 12.0 tokens/s, "
        "Avg generation throughput: 30.1 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV "
        "cache usage: 0.4%, Prefix cache hit rate: 0.0%",
    ])
    res = diagnose([_write(tmp_path, log + "\n")])
    assert not [f for f in res.findings if f.category == "interposer" and f.confidence >= 0.5]


def test_a_pasted_config_echo_alone_is_not_where_a_run_stopped(tmp_path: Path) -> None:
    res = diagnose([_write(tmp_path, f"This is the full log:\n\n```\n{BANNER}\n```\n")])
    assert res.exit_code == 0 and res.verdict.startswith("progressing"), res.verdict


def test_a_paste_that_stops_inside_nccl_init_is_still_reported(tmp_path: Path) -> None:
    """The banner test must not hide a real stop: NCCL init lines after it keep the finding."""
    # vllm-project/vllm#8058 (vLLM 0.5.x pynccl.py and NCCL 2.20 bootstrap lines)
    lines = [BANNER,
             "INFO 08-31 09:50:46 utils.py:975] Found nccl from library libnccl.so.2",
             "INFO 08-31 09:50:46 pynccl.py:63] vLLM is using nccl==2.20.5",
             "node1:820:820 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
             "node1:820:820 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
             "node1:820:820 [0] NCCL INFO Using network Socket",
             "node1:820:820 [0] NCCL INFO ncclCommInitRank comm 0x41f28e60 rank 0 nranks 2 "
             "cudaDev 0 nvmlDev 0 busId 1c0 commId 0x74ccea0716a093e1 - Init START"]
    res = diagnose([_write(tmp_path, "### Describe the bug\n\n```\n" + "\n".join(lines) + "\n```\n")])
    assert res.exit_code == 1 and "stops during nccl-init" in res.verdict, res.verdict
