"""What the build tools say when a kernel, an extension or a package does not build (catalogue
file known-build.toml): torch's extension builder (the JIT path of FlashInfer and other torch
extensions), gcc/nvcc diagnostics, the linker, CMake/make and pip building a wheel, and
nvidia-smi finding no GPU. Each log holds the tool's line in the shape it prints it (the program
that prints it is named above each case) inside the lines a vLLM/SGLang start or an install
prints around it. Before known-build.toml a compiler's `fatal error:` / `file.cu(12): error:`
line, pip's `subprocess-exited-with-error`, a linker failure or nvidia-smi's `No devices were
found` alone were answered "no failure recorded" (exit 0), and torch's `Error building extension`
was `rank-crashed`. Build output that only warns stays exit 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose import catalogue as C
from tests.diagnose.known_checks import assert_healthy, assert_named

KNOWN = Path(C.__file__).resolve().parent / "known-build.toml"
SP = "/usr/local/lib/python3.12/dist-packages"

_VLLM = (
    "INFO 06-10 09:12:01 [__init__.py:239] Automatically detected platform cuda.\n"
    "INFO 06-10 09:12:05 [api_server.py:1043] vLLM API server version 0.9.0\n"
    "INFO 06-10 09:12:30 [gpu_model_runner.py:1595] Model loading took 14.99 GiB and 20.1 seconds\n"
)

_JIT_TB = (
    "Traceback (most recent call last):\n"
    f'  File "{SP}/torch/utils/cpp_extension.py", line 2209, in _run_ninja_build\n'
    "    subprocess.run(\n"
    '  File "/usr/lib/python3.12/subprocess.py", line 571, in run\n'
    "    raise CalledProcessError(retcode, process.args,\n"
    "subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1.\n"
    "\n"
    "The above exception was the direct cause of the following exception:\n"
    "\n"
    "Traceback (most recent call last):\n"
    f'  File "{SP}/flashinfer/jit/core.py", line 123, in load_cuda_ops\n'
    "    torch_cpp_ext.load(\n"
    f'  File "{SP}/torch/utils/cpp_extension.py", line 1380, in load\n'
    "    return _jit_compile(\n"
)

# name -> (category, log text); the program that prints the line in the comment above each
CASES: dict[str, tuple[str, str]] = {
    # torch v2.13.0 torch/utils/cpp_extension.py (_run_ninja_build, error_prefix); the JIT build
    # of a FlashInfer kernel during vLLM's warmup (https://github.com/sgl-project/sglang/issues/6801)
    "torch-extension-build-failed": ("library-version", _VLLM + _JIT_TB + (
        "RuntimeError: Error building extension 'batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False': [1/9] /sw/pkgs/arc/cuda/12.6.3/bin/nvcc --generate-dependencies-with-compile\n")),
    # gcc's diagnostic (a header missing from the include path), inside a torch extension build
    # (https://github.com/Dao-AILab/flash-attention/issues/1346)
    "compiler-missing-header": ("library-version", (
        "    building 'flash_attn_2_cuda' extension\n"
        "    /home/guoby/app/Anaconda3-2021.05/envs/news-2/lib/python3.8/site-packages/torch/include/c10/util/string_view.h:12:23: fatal error: string_view: No such file or directory\n"
        "     #include <string_view>\n"
        "                           ^\n"
        "    compilation terminated.\n")),
    # nvcc's front end in FlashInfer's JIT build (https://github.com/modelscope/ms-swift/issues/8349)
    "nvcc-compile-error": ("library-version", _VLLM + (
        "(EngineCore_DP0 pid=2051) INFO 06-10 09:12:40 [kernel_warmup.py:65] Warming up FlashInfer attention.\n"
        "/home/.../flashinfer/data/include/flashinfer/sampling.cuh(623): error: class \"cub::_V_300302_SM_890::BlockAdjacentDifference<__nv_bool, ...>\" has no member ...\n"
        "7 errors detected in the compilation of \"/root/.cache/flashinfer/0.6.4/90a/generated/gdn_prefill_sm90/gdn_prefill_kernel_bf16_g0b1a0i1.cu\".\n")),
    # gcc on a vLLM source build (https://github.com/vllm-project/vllm/issues/13030)
    "cxx-compile-error": ("library-version", (
        "      [112/318] Building CXX object vllm-flash-attn/CMakeFiles/_vllm_fa2_C.dir/csrc/flash_attn/flash_api.cpp.o\n"
        "      /usr/local/app/vllm/.deps/vllm-flash-attn-src/csrc/flash_attn/flash_api.cpp:1085:17: error: ‘cu_seqlens_k’ was not declared in this scope\n"
        "       1085 |     CHECK_SHAPE(cu_seqlens_k, batch_size + 1);\n")),
    # GNU ld through collect2 (https://github.com/ggml-org/llama.cpp/issues/7508)
    "linker-failed": ("library-version", (
        "g++ -pthread -shared build/temp.linux-x86_64-cpython-310/csrc/pybind.o -lcuda -o build/lib/vllm/_C.so\n"
        "/usr/bin/ld: cannot find -lcuda: No such file or directory\n"
        "collect2: error: ld returned 1 exit status\n")),
    # pip 25.0 _internal/exceptions.py (InstallationSubprocessError) and operations/build/wheel.py
    # (https://github.com/vllm-project/vllm/issues/799)
    "pip-wheel-build-failed": ("library-version", (
        "Building wheels for collected packages: vllm\n"
        "  Building wheel for vllm (pyproject.toml) ... error\n"
        "  error: subprocess-exited-with-error\n"
        "  \n"
        "  × Building wheel for vllm (pyproject.toml) did not run successfully.\n"
        "  │ exit code: 1\n"
        "  ╰─> [134 lines of output]\n"
        "      running bdist_wheel\n")),
    # pip 25.0 _internal/resolution/resolvelib/factory.py (https://github.com/NineAbyss/S2R/issues/2)
    "pip-no-distribution": ("library-version", (
        "ERROR: Cannot install -r requirements.txt (line 1), -r requirements.txt (line 2), -r requirements.txt (line 21), -r requirements.txt (line 4) and torch==2.1.1 because these package versions have conflicting dependencies.\n"
        "\n"
        "The conflict is caused by:\n"
        "    The user requested torch==2.1.1\n"
        "    vllm 0.5.4 depends on torch==2.4.0\n")),
    # CMake's configure step in a vLLM source build (https://github.com/vllm-project/vllm/issues/7135)
    "cmake-or-make-failed": ("library-version", (
        "      -- Found CUDA: /usr/local/cuda-12.1 (found version \"12.1\")\n"
        "      -- Configuring incomplete, errors occurred!\n")),
    # nvidia-smi in a container started without GPUs (https://github.com/beasteers/singuconda/issues/6)
    "nvidia-smi-no-devices": ("config-invalid", (
        "+ nvidia-smi\n"
        "No devices were found  \n")),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_build_message_names_its_cause(name: str, tmp_path: Path) -> None:
    expected, text = CASES[name]
    assert_named(KNOWN, name, expected, text, tmp_path)


def test_every_entry_has_a_case() -> None:
    import tomllib
    ids = {e["id"] for e in tomllib.loads(KNOWN.read_text())["entry"]}
    assert ids == set(CASES), ids ^ set(CASES)


def test_build_warnings_and_a_jit_build_that_completes_stay_healthy(tmp_path: Path) -> None:
    # nvcc and gcc warnings, ninja's progress and a completed JIT build, then the server serves
    text = _VLLM + (
        "(EngineCore_DP0 pid=2051) INFO 06-10 09:12:40 [kernel_warmup.py:65] Warming up FlashInfer attention.\n"
        "/vllm-0.3.0/csrc/quantization/awq/gemm_kernels.cu(44): warning #177-D: variable \"blockIdx_x\" was declared but never referenced\n"
        "[33/34] /usr/local/cuda/bin/nvcc --generate-dependencies-with-compile --dependency-output sampling.cuda.o.d -c sampling.cu -o sampling.cuda.o\n"
        "[34/34] c++ sampling.cuda.o -shared -o sampling.so\n"
        "(EngineCore_DP0 pid=2051) INFO 06-10 09:13:02 [core.py:171] init engine (profile, create kv cache, warmup model) took 31.40 seconds\n"
        "(APIServer pid=1981) INFO 06-10 09:13:05 [api_server.py:1818] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
        "(APIServer pid=1981) INFO:     Application startup complete.\n"
    )
    assert_healthy("jit-build-ok", text, tmp_path)
