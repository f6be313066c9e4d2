"""Failure statements in shapes other than a vLLM ERROR record or a ``XxxError: ...`` line are
recorded failures (evidence/logs/failures.py): a log that holds one is never answered exit 0.
Each line is a real wording; its source is named beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose.engine import diagnose

HEAD = "INFO 05-01 10:00:00 [default_loader.py:267] Loading weights took 3.30 seconds\n"

STATED = [
    # uvicorn's own logger (uvicorn/lifespan/on.py) after the app's startup raised
    "ERROR:    Application startup failed. Exiting.",
    # Ray wraps the worker's exception type (ray/exceptions.py RayTaskError.as_instanceof_cause)
    "ray.exceptions.RayTaskError(RuntimeError): ray::RayWorkerWrapper.execute_method() "
    "(pid=1234, ip=10.0.0.1, actor_id=abc)",
    # torch._dynamo.exc.BackendCompilerFailed (torch/_dynamo/exc.py)
    "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:",
    # zsh / bash job control for a job the kernel killed
    "[1]    12345 killed     vllm serve Qwen/Qwen3-8B",
    "[1]+  Killed                  vllm serve Qwen/Qwen3-8B",
]

NOT_STATED = [
    'INFO:     127.0.0.1:53422 - "GET /health HTTP/1.1" 200 OK',
    "WARNING 05-01 10:00:01 [config.py:1200] To see benefits of async output processing, enable "
    "CUDA graph. Since, enforce-eager is enabled, async output processor cannot be used",
    "[1] 12345",
]


def _run(tmp_path: Path, line: str) -> int:
    p = tmp_path / "run.log"
    p.write_text(HEAD + line + "\n")
    return int(diagnose([p]).exit_code)


@pytest.mark.parametrize("line", STATED)
def test_a_stated_failure_is_never_answered_exit_zero(tmp_path: Path, line: str) -> None:
    assert _run(tmp_path, line) == 1


@pytest.mark.parametrize("line", NOT_STATED)
def test_ordinary_lines_are_not_failures(tmp_path: Path, line: str) -> None:
    assert _run(tmp_path, line) == 0


@pytest.mark.parametrize(("line", "category"), [
    # torch assertNotCapturing (ATen/cuda/CUDAGraphsUtils.cuh)
    ("RuntimeError: Cannot call CUDAGeneratorImpl::current_seed during CUDA graph capture. If you "
     "need this call to be captured, please file an issue. Current cudaStreamCaptureStatus: "
     "cudaStreamCaptureStatusActive", "cudagraph-capture"),
    # SGLang scheduler watchdog (logger.error, no level word in SGLang's format)
    ("[2025-03-04 12:54:52 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, "
     "self.soft=False)", "kernel-hang"),
])
def test_capture_and_watchdog_statements_name_their_class(tmp_path: Path, line: str,
                                                          category: str) -> None:
    p = tmp_path / "run.log"
    p.write_text(HEAD + line + "\n")
    res = diagnose([p])
    assert res.exit_code == 1 and res.findings[0].category == category, res.verdict


# vLLM csrc/custom_all_reduce.cuh CUDACHECK wording (https://github.com/vllm-project/vllm/issues/52457)
CAR_FAULT = "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:164 'an illegal memory access was encountered'"
IMA = "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"


def test_a_fault_in_the_custom_all_reduce_kernel_is_the_p2p_path(tmp_path: Path) -> None:
    p = tmp_path / "run.log"
    p.write_text(HEAD + CAR_FAULT + "\n" + IMA + "\n")
    res = diagnose([p])
    top = res.findings[0]
    assert top.category == "p2p-transport" and top.confidence < 0.8, top
    kh = [f for f in res.findings if f.category == "kernel-hang"]
    assert kh and kh[0].confidence < top.confidence


def test_a_fault_elsewhere_stays_a_device_fault(tmp_path: Path) -> None:
    p = tmp_path / "run.log"
    p.write_text(HEAD + IMA + "\n")
    res = diagnose([p])
    assert res.findings[0].category == "kernel-hang"
    assert "p2p-transport" not in [f.category for f in res.findings]


def test_the_cudacheck_line_alone_is_a_recorded_failure(tmp_path: Path) -> None:
    p = tmp_path / "run.log"
    p.write_text(HEAD + "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:307 'invalid "
                 "argument'\n")
    assert int(diagnose([p]).exit_code) == 1


# a healthy run's custom all-reduce notice (tests/data/vllm-logs/log11.txt line 38): its logger
# prefix names custom_all_reduce.py, the line names no fault in the kernel
CAR_DISABLED = ("(VllmWorkerProcess pid=538) WARNING 07-23 20:47:09 custom_all_reduce.py:134] "
                "Custom allreduce is disabled because it's not supported on more than two "
                "PCIe-only GPUs. To silence this warning, specify disable_custom_all_reduce=True "
                "explicitly.")


def test_a_custom_all_reduce_notice_does_not_place_a_fault_in_that_kernel(tmp_path: Path) -> None:
    p = tmp_path / "run.log"
    p.write_text(HEAD + CAR_DISABLED + "\n" + IMA + "\n")
    res = diagnose([p])
    assert res.findings[0].category == "kernel-hang", [(f.category, f.confidence)
                                                        for f in res.findings]
    assert "p2p-transport" not in [f.category for f in res.findings]


# NCCL src/misc/param.cc: WARN("Invalid value %s for %s, using default %lld.") - the run goes on
NCCL_ENV_WARN = ("node1:1234:1234 [0] misc/param.cc:41 NCCL WARN Invalid value 8x for "
                 "NCCL_NTHREADS, using default 512.")


def test_an_nccl_warn_it_goes_on_from_is_no_recorded_failure(tmp_path: Path) -> None:
    p = tmp_path / "run.log"
    p.write_text(HEAD + NCCL_ENV_WARN + "\n")
    assert int(diagnose([p]).exit_code) == 0
    p.write_text(HEAD + "node1:1234:1250 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: "
                 "Connect to 10.0.0.2<45678> failed : Software caused connection abort\n")
    assert int(diagnose([p]).exit_code) == 1


def test_an_nccl_env_warn_about_p2p_is_no_p2p_finding(tmp_path: Path) -> None:
    p = tmp_path / "run.log"
    p.write_text(HEAD + "node1:1234:1234 [0] misc/param.cc:41 NCCL WARN Invalid value SYSX for "
                 "NCCL_P2P_LEVEL, using default 0.\n")
    res = diagnose([p])
    assert "p2p-transport" not in [f.category for f in res.findings], res.findings
