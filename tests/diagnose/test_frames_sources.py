"""The frame map's rule groups (issue 29 item 2, second pass) on frames as public threads print them:
each group's frames name the phase and category an engineer reads from that place; frames of generic
wrappers (a module's __call__, a future, a compiled graph's or a Triton kernel's launcher) never
decide, so a traceback that holds only them stays rank-crashed. Frame lines are quoted from the
threads cited; the module roles come from the package sources (vLLM 0.6.3 / 0.8.5 / 0.10.2 / 0.34.0,
SGLang 0.5.23, torch, Ray)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose.catalogue.frames import place
from sm120kit.diagnose.engine import diagnose
from sm120kit.evidence.logs.analyze import LogAnalysis

DATA = Path(__file__).resolve().parents[1] / "data"


def _placed(lines: list[str]) -> tuple[str, str] | None:
    an = LogAnalysis()
    an.feed_lines("l", lines)
    tb = an.tracebacks.first()
    assert tb is not None and tb.frames
    hit = place(tb.frames)
    return None if hit is None else (hit[0].phase, hit[0].category)


CASES = [
    # vllm-project/vllm#15329: dynamo tracing the model (torch.compile) fails at startup
    ("https://github.com/vllm-project/vllm/issues/15329", [
        'ERROR 03-22 09:50:04 [core.py:340]   File "/opt/conda/lib/python3.10/site-packages/torch/'
        '_dynamo/convert_frame.py", line 662, in transform',
        'ERROR 03-22 09:50:04 [core.py:340]   File "/opt/conda/lib/python3.10/site-packages/torch/'
        '_dynamo/symbolic_convert.py", line 2868, in run',
        'ERROR 03-22 09:50:04 [core.py:340]   File "/opt/conda/lib/python3.10/site-packages/torch/'
        '_dynamo/symbolic_convert.py", line 3048, in RETURN_VALUE'],
     ("compile", "library-version")),
    # vllm-project/vllm#31940: inductor compiling a generated Triton kernel
    ("https://github.com/vllm-project/vllm/issues/31940", [
        '(EngineCore_DP0 pid=65064) ERROR 01-08 11:19:33 [core.py:866]   File "/root/autodl-tmp/data/'
        'miniconda3/envs/vllm_serve/lib/python3.10/site-packages/torch/_inductor/async_compile.py", '
        "line 417, in triton",
        '(EngineCore_DP0 pid=65064) ERROR 01-08 11:19:33 [core.py:866]   File "/root/autodl-tmp/data/'
        'miniconda3/envs/vllm_serve/lib/python3.10/site-packages/torch/_inductor/codecache.py", line '
        "4312, in result"],
     ("compile", "library-version")),
    # vllm-project/vllm#9624: the model registry cannot inspect the architecture (a subprocess
    # importing the model file failed): subprocess.py is generic, registry.py decides
    ("https://github.com/vllm-project/vllm/issues/9624", [
        'ERROR 10-23 23:20:26 registry.py:272]   File "/home/dandiago/anaconda3/lib/python3.12/'
        'site-packages/vllm/model_executor/models/registry.py", line 434, in _run_in_subprocess',
        'ERROR 10-23 23:20:26 registry.py:272]   File "/home/dandiago/anaconda3/lib/python3.12/'
        'subprocess.py", line 502, in check_returncode'],
     ("startup", "library-version")),
    # vllm-project/vllm#14475: the registry's inspection subprocess (frozen runpy frames are generic)
    ("https://github.com/vllm-project/vllm/issues/14475", [
        'ERROR 03-08 04:46:17 registry.py:321]   File "<frozen runpy>", line 88, in _run_code',
        'ERROR 03-08 04:46:17 registry.py:321]   File "/usr/local/lib/python3.12/dist-packages/vllm/'
        'model_executor/models/registry.py", line 552, in <module>',
        'ERROR 03-08 04:46:17 registry.py:321]   File "/usr/local/lib/python3.12/dist-packages/vllm/'
        'model_executor/models/registry.py", line 291, in <lambda>'],
     ("startup", "library-version")),
    # EleutherAI/lm-evaluation-harness#1207: transformers' lazy import of a module that fails to
    # import (importlib and the frozen bootstrap frames are generic)
    ("https://github.com/EleutherAI/lm-evaluation-harness/issues/1207", [
        '  File "/usr/local/lib/python3.10/dist-packages/transformers/utils/import_utils.py", line '
        "1382, in _get_module",
        '  File "/usr/lib/python3.10/importlib/__init__.py", line 126, in import_module',
        '  File "<frozen importlib._bootstrap>", line 1050, in _gcd_import'],
     ("startup", "library-version")),
    # microsoft/SimXNS#2: torch.cuda.set_device with an index the visible devices lack
    ("https://github.com/microsoft/SimXNS/issues/2", [
        '  File "/home/socialab/miniconda3/envs/IR_SimANS-env/lib/python3.10/site-packages/torch/cuda/'
        '__init__.py", line 314, in set_device'],
     ("startup", "config-invalid")),
    # sgl-project/sglang#1751 (field-logs-holdout-2/sglang-1751): the runner's capture_one_batch_size
    ("https://github.com/sgl-project/sglang/issues/1751", [
        '  File "/home/ubuntu/.local/lib/python3.10/site-packages/sglang/srt/model_executor/'
        'cuda_graph_runner.py", line 233, in capture_one_batch_size'],
     ("capture", "cudagraph-capture")),
    # vllm-project/vllm#20691: FlashInfer's all-reduce fusion workspace over CUDA IPC, created by
    # vLLM's fusion pass (a compile-pass file further out): the innermost placed frame decides
    ("https://github.com/vllm-project/vllm/pull/20691", [
        '  File "/home/mgoin/code/vllm/vllm/compilation/collective_fusion.py", line 430, in __init__',
        '  File "/home/mgoin/venvs/vllm/lib/python3.12/site-packages/flashinfer/comm/trtllm_ar.py", '
        "line 567, in trtllm_create_ipc_workspace_for_all_reduce_fusion",
        '  File "/home/mgoin/venvs/vllm/lib/python3.12/site-packages/flashinfer/comm/cuda_ipc.py", '
        "line 213, in create_shared_buffer"],
     ("startup", "p2p-transport")),
    # vllm-project/vllm#31480: the attention backend chosen while a layer is built (selector.py),
    # not the checkpoint
    ("https://github.com/vllm-project/vllm/issues/31480", [
        '(Worker_TP0_EP0 pid=5426) ERROR 12-29 15:29:53 [multiproc_executor.py:751]   File "/root/'
        'miniconda3/envs/vllm/lib/python3.12/site-packages/vllm/model_executor/layers/mla.py", line '
        "92, in __init__",
        '(Worker_TP0_EP0 pid=5426) ERROR 12-29 15:29:53 [multiproc_executor.py:751]   File "/root/'
        'miniconda3/envs/vllm/lib/python3.12/site-packages/vllm/attention/layer.py", line 595, in '
        "__init__",
        '(Worker_TP0_EP0 pid=5426) ERROR 12-29 15:29:53 [multiproc_executor.py:751]   File "/root/'
        'miniconda3/envs/vllm/lib/python3.12/site-packages/vllm/attention/selector.py", line 83, in '
        "get_attn_backend"],
     ("startup", "config-invalid")),
    # field-logs-b/unsloth-1605 (unslothai/unsloth#1605): a layer's weight_loader shape check
    ("https://github.com/unslothai/unsloth/issues/1605", [
        '  File "/home/ubuntu/.pyenv/versions/3.12.0/lib/python3.12/site-packages/vllm/model_executor/'
        'layers/linear.py", line 1113, in weight_loader'],
     ("weight-load", "checkpoint-config")),
    # vllm-project/vllm#41849: DeepGEMM missing; the warm-up frames as the thread prints them; the
    # innermost is vLLM's stand-in `_missing` (vllm/utils/deep_gemm.py, v0.10.2 .. v0.34.0), which
    # the fix's review (vllm-project/vllm#41851) names as the raiser
    ("https://github.com/vllm-project/vllm/issues/41849", [
        '  File ".../vllm/model_executor/warmup/kernel_warmup.py", line 37, in kernel_warmup',
        '  File ".../vllm/model_executor/warmup/deep_gemm_warmup.py", line 364, in deep_gemm_warmup',
        '  File ".../vllm/utils/deep_gemm.py", line 85, in _missing'],
     ("startup", "library-version")),
]


@pytest.mark.parametrize(("url", "lines", "want"), CASES, ids=[c[0].rsplit("/", 3)[-3] + "-"
                                                               + c[0].rsplit("/", 1)[-1]
                                                               for c in CASES])
def test_frames_of_public_threads_are_placed(url: str, lines: list[str],
                                             want: tuple[str, str]) -> None:
    assert _placed(lines) == want, url


GENERIC = [
    # lightonai/pylate#75: an inductor-compiled graph's runtime launch (illegal memory access) —
    # codecache __call__, compile_fx run, _run_from_cache, the generated kernel's run: no compile
    ("https://github.com/lightonai/pylate/issues/75", [
        '  File "/workspace/sigrid/ModernBERT/.venv/lib/python3.11/site-packages/torch/_inductor/'
        'codecache.py", line 906, in __call__',
        '  File "/workspace/sigrid/ModernBERT/.venv/lib/python3.11/site-packages/torch/_inductor/'
        'compile_fx.py", line 784, in run',
        '  File "/workspace/sigrid/ModernBERT/.venv/lib/python3.11/site-packages/torch/_inductor/'
        'codecache.py", line 934, in _run_from_cache',
        '  File "/workspace/sigrid/ModernBERT/.venv/lib/python3.11/site-packages/torch/_inductor/'
        'triton_heuristics.py", line 670, in run']),
    # sgl-project/sglang#17274: a Triton kernel launch at serving time (jit.py <lambda> / run)
    ("https://github.com/sgl-project/sglang/issues/17274", [
        '2026-01-17T18:48:10.418509818+01:00 stderr F   File "/sgl-workspace/sglang/python/sglang/'
        'srt/layers/quantization/fp8_kernel.py", line 292, in _per_token_group_quant_8bit_raw',
        '2026-01-17T18:48:10.418515867+01:00 stderr F   File "/usr/local/lib/python3.12/dist-'
        'packages/triton/runtime/jit.py", line 419, in <lambda>',
        '2026-01-17T18:48:10.418562021+01:00 stderr F   File "/usr/local/lib/python3.12/dist-'
        'packages/triton/runtime/jit.py", line 757, in run']),
    # vllm-project/vllm#21562: vLLM's piecewise backend calling the compiled graph at a forward
    ("https://github.com/vllm-project/vllm/issues/21562", [
        '(EngineCore_3 pid=103) ERROR 07-25 02:51:33 [core.py:592]   File "/tmp/vllm-8dfb45ca3379b3a'
        '789ec529af4bf725daa07f10d/vllm/compilation/cuda_piecewise_backend.py", line 112, in __call__',
        '(EngineCore_3 pid=103) ERROR 07-25 02:51:33 [core.py:592]   File "/opt/vllm/lib64/python3.12/'
        'site-packages/torch/_dynamo/eval_frame.py", line 838, in _fn']),
    # a graph's replay is serving, not capture: torch/cuda/graphs.py:139 in replay as
    # vllm-project/afd-plugin#290 reports it, under SGLang's CudaGraphRunner.replay (the function
    # that replays in sglang/srt/model_executor/cuda_graph_runner.py, v0.3 .. v0.5)
    ("https://github.com/vllm-project/afd-plugin/issues/290", [
        '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/'
        'cuda_graph_runner.py", line 1161, in replay',
        '  File "/usr/local/lib/python3.12/dist-packages/torch/cuda/graphs.py", line 139, in replay']),
]


@pytest.mark.parametrize(("url", "lines"), GENERIC, ids=[f"generic-{i}" for i in range(len(GENERIC))])
def test_generic_wrappers_never_decide(url: str, lines: list[str]) -> None:
    assert _placed(lines) is None, url


def _frames_finding(path: Path) -> tuple[str | None, str]:
    res = diagnose([path])
    f = next((f for f in res.findings if f.rule == "traceback-frames"), None)
    return (None if f is None else f.category), res.findings[0].category


def test_corpus_logs_get_their_places() -> None:
    """Tuning-corpus logs (threads cited in their manifests): V0's raise_if_cache_size_invalid
    (field-logs-b/vllm-10439), Ray placement (field-logs-b/vllm-1116), SGLang's speculative graph
    runner capturing (field-logs-b/sglang-32105)."""
    assert _frames_finding(DATA / "field-logs-b" / "vllm-10439.txt")[0] == "kv-cache-insufficient"
    assert _frames_finding(DATA / "field-logs-b" / "vllm-1116.txt")[0] == "config-invalid"
    assert _frames_finding(DATA / "field-logs-b" / "sglang-32105.txt")[0] == "cudagraph-capture"


def test_excerpt_of_generic_frames_stays_rank_crashed() -> None:
    """field-logs/vllm-28476-1 holds only torch.fx / nn.Module call frames (the exception line cut
    off): no place, the answer stays rank-crashed."""
    frames_cat, top = _frames_finding(DATA / "field-logs" / "vllm-28476-1.txt")
    assert frames_cat is None and top == "rank-crashed"
