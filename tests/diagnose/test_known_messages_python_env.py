"""What the Python runtime, the dynamic loader, pip/setuptools and compiled extensions print when
the installed software does not fit together (catalogue file known-python-env.toml). Each log is
the message in the shape its software prints it (wording from the source named in the comment),
as the exception line of a traceback that passes through vLLM worker frames, an SGLang scheduler
or a plain `vllm serve` start; the top finding names the category and rests on an entry of
known-python-env.toml.

Before the file, on main (measured on these logs): `rank-crashed` (first-dead-rank 0.45/0.55)
for torch-c-extensions-not-loaded, python-module-shadowed, torch-numpy-unavailable,
pkg-resources-version-conflict, transformers-lazy-import-failed, transformers-accelerate-required,
pydantic-v1-field-kwarg-on-v2, sgl-kernel-ops-not-loaded and the sgl-kernel python-import-failed
case; weak (< 0.5: the traceback-frames placement at 0.4, the message itself unread) for
shared-object-not-loadable, extension-built-for-other-python (both wordings) and
numpy-c-api-missing; wrong for python-too-old-for-union-syntax (config-invalid, 0.4) and
cuda-driver-library-absent (library.toml's binary-mismatch read the driver's own libcuda.so.1 as a
version mismatch, library-version 0.85); `unknown` (0.35) for pip-dependency-conflict and
pip-requires-different-python. The bitsandbytes python-import-failed case was already
library-version at 0.55 through the message index and stays there (a curated entry now owns it).
The tracebacks whose exception line library.toml already names (undefined symbol in
vllm/_C.abi3.so / flash_attn / sgl_kernel, GLIBC(XX) not found, libcudart.so.12 missing, No module
named 'vllm._C', cannot import name 'triton_key', torchvision::nms, driver too old, CUDA driver
version insufficient) came out library-version through vLLM worker frames already; they are
guarded here against the new entries. Harmless import warnings of runs that then serve (vLLM's
"Failed to import from vllm._C" on a platform plugin, pynvml's deprecation, torch's numpy
warning, DeepGEMM's legacy-kernel notice, pip conflicts before a start that works) stay exit 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.diagnose import catalogue as C
from sm120kit.diagnose.engine import diagnose
from tests.diagnose.known_checks import (
    VLLM_READY,
    VLLM_START,
    assert_healthy,
    assert_named,
    assert_top,
)

KNOWN = Path(C.__file__).resolve().parent / "known-python-env.toml"
SP = "/usr/local/lib/python3.12/dist-packages"

_VLLM, _READY = VLLM_START, VLLM_READY
_SGLANG = ("[2025-03-01 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct', "
           "tp_size=1, attention_backend='flashinfer')\n")
_SGLANG_READY = (
    "[2025-03-01 10:01:10] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to "
    "quit)\n"
    "[2025-03-01 10:01:12] The server is fired up and ready to roll!\n"
)
_W = "(VllmWorker rank=0 pid=4471) ERROR 06-10 09:13:02 [multiproc_executor.py:527] "
_TAIL = ("ERROR 06-10 09:13:03 [core.py:515] EngineCore failed to start.\n"
         "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
         "proc(s): {}\n")
_WORKER_FRAMES = [
    (f"{SP}/vllm/v1/executor/multiproc_executor.py", 398, "worker_main",
     "worker = WorkerProc(*args, **kwargs)"),
    (f"{SP}/vllm/v1/worker/gpu_worker.py", 160, "init_device",
     "self.model_runner = GPUModelRunner("),
]
_CLI = [("/usr/local/bin/vllm", 8, "<module>", "sys.exit(main())"),
        (f"{SP}/vllm/entrypoints/cli/main.py", 54, "main", "args.dispatch_function(args)")]


def _tb(frames: list[tuple[str, int, str, str]], last: str, prefix: str = "") -> str:
    """A Python traceback as the interpreter prints it, each line behind ``prefix``."""
    out = [f"{prefix}Traceback (most recent call last):"]
    for path, line, fn, code in frames:
        out += [f'{prefix}  File "{path}", line {line}, in {fn}', f"{prefix}    {code}"]
    out += [prefix + ln for ln in last.split("\n")]
    return "\n".join(out) + "\n"


def _worker(last: str, frames: list[tuple[str, int, str, str]] | None = None) -> str:
    """A vLLM V1 start whose worker dies at init with ``last`` as its exception."""
    return (_VLLM + _W + "WorkerProc failed to start.\n"
            + _tb(_WORKER_FRAMES + (frames or []), last, _W) + _TAIL)


# name -> (category, log); the source that prints the message in the comment above each
FIXED: dict[str, tuple[str, str]] = {
    # the floor: an ImportError no other entry knows, raised by vLLM v0.8.1
    # model_executor/layers/quantization/bitsandbytes.py when bitsandbytes is missing in the
    # serving venv (gpustack/gpustack#1079)
    "python-import-failed": ("library-version", _worker(
        "ImportError: Please install bitsandbytes>=0.45.0 via `pip install bitsandbytes>=0.45.0` "
        "to use bitsandbytes quantizer.",
        [(f"{SP}/vllm/model_executor/layers/linear.py", 242, "__init__",
          "self.quant_method = quant_config.get_quant_method(self,"),
         (f"{SP}/vllm/model_executor/layers/quantization/bitsandbytes.py", 162, "__init__",
          'raise ImportError("Please install bitsandbytes>=0.45.0 via "')])),
    # the floor again, where neither an entry nor the message index knew the line before: the
    # sgl-kernel 0.3.16.post3 wheel's sgl_kernel/__init__.py, in an SGLang scheduler
    "python-import-failed-sgl-kernel": ("library-version", _SGLANG + _tb(
        [(f"{SP}/sglang/srt/managers/scheduler.py", 2950, "run_scheduler_process",
          "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)"),
         (f"{SP}/sgl_kernel/__init__.py", 92, "_load_architecture_specific_ops",
          'raise ImportError(f"Could not create module spec for {ops_path}")')],
        f"ImportError: Could not create module spec for {SP}/sgl_kernel/sm100/common_ops.abi3.so",
        "[2025-03-01 10:00:20 TP0] ")),
    # glibc 2.35 elf/dl-load.c (open_verify); flashinfer-ai/flashinfer#2010 (a half-written JIT
    # cache entry loaded by torch.ops.load_library)
    "shared-object-not-loadable": ("library-version", _worker(
        "OSError: /root/.cache/flashinfer/90/cached_ops/sampling/sampling.so: invalid ELF header",
        [(f"{SP}/flashinfer/jit/core.py", 145, "load", "loader.load_library(so_path)"),
         ("/usr/lib/python3.12/ctypes/__init__.py", 379, "__init__",
          "self._handle = _dlopen(self._name, mode)")])),
    # pybind11 v2.13.6 include/pybind11/detail/common.h (PYBIND11_CHECK_PYTHON_VERSION)
    "extension-built-for-other-python": ("library-version", _worker(
        "ImportError: Python version mismatch: module was compiled for Python 3.11, but the "
        "interpreter version is incompatible: 3.12.3 (main, Nov  6 2024, 18:32:19) [GCC 13.2.0].",
        [(f"{SP}/vllm/model_executor/layers/quantization/utils/marlin_utils.py", 8, "<module>",
          "import custom_quant_ops")])),
    # CPython v3.12.0 Python/importdl.c: an extension module without PyInit_<name>
    "extension-no-module-init": ("library-version", _worker(
        "ImportError: dynamic module does not define module export function (PyInit__C)",
        [(f"{SP}/vllm/_custom_ops.py", 10, "<module>", "import vllm._C")])),
    # torch v2.5.1 torch/__init__.py: torch/_C of a source checkout imported
    "torch-c-extensions-not-loaded": ("library-version", _tb(_CLI + [
        (f"{SP}/vllm/__init__.py", 6, "<module>", "import torch"),
        ("/workspace/pytorch/torch/__init__.py", 451, "<module>",
         "raise ImportError(textwrap.dedent('''")],
        "ImportError: Failed to load PyTorch C extensions:\n"
        "    It appears that PyTorch has loaded the `torch/_C` folder\n"
        "    of the PyTorch repository rather than the C extensions which\n"
        "    are expected in the `torch._C` namespace. This can occur when\n"
        "    using the `install` workflow. e.g.\n"
        "        $ python setup.py install && python -c \"import torch\"")),
    # CPython v3.12.0 Objects/moduleobject.c (module_getattro); vllm-project/vllm#1719
    "python-module-shadowed": ("library-version", _worker(
        "AttributeError: partially initialized module 'torch' has no attribute 'Tensor' (most "
        "likely due to a circular import)",
        [("/workspace/torch.py", 1, "<module>", "import torch")])),
    # CPython v3.9.18 Objects/abstract.c (binop_type_error); vllm-project/vllm-ascend#3728
    "python-too-old-for-union-syntax": ("library-version", _tb(_CLI + [
        (f"{SP}/vllm/config.py", 212, "ModelConfig",
         "def maybe_pull_model(self, model: str) -> str | None:")],
        "TypeError: unsupported operand type(s) for |: 'type' and 'NoneType'")),
    # numpy v1.24.4 headers' import_array() under numpy 2.x; QwenAudio/CosyVoice#1398
    "numpy-c-api-missing": ("library-version", _worker(
        "AttributeError: _ARRAY_API not found",
        [(f"{SP}/onnxruntime/capi/_pybind_state.py", 32, "<module>",
          "from .onnxruntime_pybind11_state import *  # noqa")])),
    # torch v2.5.1 torch/csrc/utils/tensor_numpy.cpp (tensor_to_numpy); QwenLM/Qwen3-VL#2078
    "torch-numpy-unavailable": ("library-version", _worker(
        "RuntimeError: Numpy is not available",
        [(f"{SP}/vllm/multimodal/processing.py", 1120, "apply",
          "pixel_values = images.numpy()")])),
    # setuptools v70.0.0 pkg_resources/__init__.py (ContextualVersionConflict)
    "pkg-resources-version-conflict": ("library-version", _tb([
        ("/usr/local/bin/vllm", 33, "<module>",
         "sys.exit(load_entry_point('vllm', 'console_scripts', 'vllm')())"),
        (f"{SP}/pkg_resources/__init__.py", 899, "resolve",
         "raise VersionConflict(dist, req).with_context(dependent_req)")],
        "pkg_resources.ContextualVersionConflict: (torch 2.5.1 (/usr/local/lib/python3.12/"
        "dist-packages), Requirement.parse('torch==2.4.0'), {'vllm'})")),
    # pip 24.2 commands/install.py (_warn_about_conflicts): an install log pasted as the
    # report, the conflicts its only evidence; PRIME-RL/SimpleVLA-RL#53, allenai/open-instruct#172
    "pip-dependency-conflict": ("library-version", (
        "Installing collected packages: torch, torchvision\n"
        "ERROR: pip's dependency resolver does not currently take into account all the packages "
        "that are installed. This behaviour is the source of the following dependency "
        "conflicts.\n"
        "vllm 0.6.3 requires torch==2.4.0, but you have torch 2.2.0 which is incompatible.\n"
        "vllm 0.6.3 requires torchvision==0.19, but you have torchvision 0.17.0 which is "
        "incompatible.\n"
        "Successfully installed torch-2.2.0 torchvision-0.17.0\n")),
    # pip 24.2 resolution/resolvelib/factory.py (_report_requires_python_error)
    "pip-requires-different-python": ("library-version", (
        "Looking in indexes: https://download.pytorch.org/whl/cu128\n"
        "Collecting typing-extensions>=4.10.0 (from torch)\n"
        "  Downloading https://download.pytorch.org/whl/typing_extensions-4.15.0-py3-none-any.whl "
        "(44 kB)\n"
        "ERROR: Package 'typing-extensions' requires a different Python: 3.8.10 not in "
        "'>=3.9'\n")),
    # transformers v4.46.0 utils/import_utils.py (_LazyModule._get_module) with a missing module
    # underneath; Dao-AILab/flash-attention#723 shows the same wrapper
    "transformers-lazy-import-failed": ("library-version", _worker(
        "RuntimeError: Failed to import transformers.models.auto.modeling_auto because of the "
        "following error (look up to see its traceback):\n"
        "cannot import name 'cached_download' from 'huggingface_hub' "
        f"({SP}/huggingface_hub/__init__.py)",
        [(f"{SP}/transformers/utils/import_utils.py", 1778, "_get_module",
          "raise RuntimeError(")])),
    # transformers v4.46.0 modeling_utils.py (from_pretrained)
    "transformers-accelerate-required": ("library-version", _worker(
        "ImportError: Using `low_cpu_mem_usage=True` or a `device_map` requires Accelerate: "
        "`pip install 'accelerate>=0.26.0'`",
        [(f"{SP}/transformers/modeling_utils.py", 3577, "from_pretrained",
          "raise ImportError(")])),
    # pydantic v2.7.0 pydantic/fields.py (Field, removed-kwargs)
    "pydantic-v1-field-kwarg-on-v2": ("library-version", _tb(_CLI + [
        (f"{SP}/outlines/fsm/json_schema.py", 40, "Schema",
         "version: str = Field(const=True)"),
        (f"{SP}/pydantic/fields.py", 766, "Field",
         "raise PydanticUserError('`const` is removed, use `Literal` instead', "
         "code='removed-kwargs')")],
        "pydantic.errors.PydanticUserError: `const` is removed, use `Literal` instead")),
    # sgl-kernel 0.3.16.post3 sgl_kernel/__init__.py (_load_architecture_specific_ops);
    # sgl-project/sglang#18203
    "sgl-kernel-ops-not-loaded": ("library-version", _SGLANG + _tb(
        [(f"{SP}/sglang/srt/layers/activation.py", 44, "<module>",
          "from sgl_kernel import gelu_and_mul, gelu_tanh_and_mul, silu_and_mul"),
         (f"{SP}/sgl_kernel/__init__.py", 179, "_load_architecture_specific_ops",
          "raise ImportError(error_msg)")],
        "ImportError: \n[sgl_kernel] CRITICAL: Could not load any common_ops library!\n\n"
        "Attempted locations:\n"
        f"1. Architecture-specific pattern: {SP}/sgl_kernel/sm100/common_ops.* - found files: []\n"
        "GPU Info:\n- Compute capability: 121\n- Expected variant: SM100")),
    # glibc's loader for the driver's libcuda.so.1; xorbitsai/inference#2604 (fixed by --gpus all)
    "cuda-driver-library-absent": ("config-invalid", _worker(
        "ImportError: libcuda.so.1: cannot open shared object file: No such file or directory",
        [(f"{SP}/vllm/_custom_ops.py", 10, "<module>", "import vllm._C")])),
}

# name -> (category, rule, log): tracebacks through vLLM worker frames whose exception line an
# older entry already names; the new file must not take them over
KEPT: dict[str, tuple[str, str, str]] = {
    # vllm-project/vllm#21226
    "vllm-c-undefined-symbol": ("library-version", "binary-mismatch", _worker(
        f"ImportError: {SP}/vllm/_C.abi3.so: undefined symbol: "
        "_ZN3c106ivalue14ConstantString6createENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
        [(f"{SP}/vllm/_custom_ops.py", 10, "<module>", "import vllm._C")])),
    # Dao-AILab/flash-attention#975
    "flash-attn-undefined-symbol": ("library-version", "binary-mismatch", _worker(
        f"ImportError: {SP}/flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so: undefined symbol: "
        "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE")),
    "glibcxx-not-found": ("library-version", "binary-mismatch", _worker(
        "ImportError: /lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.32' not found "
        f"(required by {SP}/vllm/_C.abi3.so)")),
    # vllm-project/vllm#36099
    "libcudart-missing": ("library-version", "binary-mismatch", _worker(
        "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory")),
    "vllm-c-not-built": ("library-version", "module-missing", _worker(
        "ModuleNotFoundError: No module named 'vllm._C'")),
    "triton-key-skew": ("library-version", "import-name-missing", _worker(
        "ImportError: cannot import name 'triton_key' from 'triton.compiler.compiler' "
        f"({SP}/triton/compiler/compiler.py)")),
}

# name -> log that must stay exit 0: import warnings of runs that then serve
HEALTHY: dict[str, str] = {
    # vLLM v0.8.5 vllm/_custom_ops.py logs the failed import as a WARNING; on a platform plugin
    # (Ascend) the run goes on: vllm-project/vllm-ascend#1033 ("The whole process was not
    # disturbed by this import failure")
    "vllm-c-import-warning-on-plugin-platform": (
        "INFO 05-30 14:36:50 [__init__.py:230] Platform plugin ascend is activated\n"
        "WARNING 05-30 14:36:52 [_custom_ops.py:21] Failed to import from vllm._C with "
        "ModuleNotFoundError(\"No module named 'vllm._C'\")\n"
        "INFO 05-30 14:36:53 [api_server.py:1043] vLLM API server version 0.8.5\n"
        "INFO 05-30 14:37:40 [worker_v1.py:234] Available memory: 38824469708, total memory: "
        "46431260672\n") + _READY,
    # pynvml 13's import hook (gpuopenanalytics/pynvml site-packages/_pynvml_redirector.py)
    # warns when torch imports pynvml; SGLang then serves
    "pynvml-deprecated-warning": _SGLANG + (
        f"{SP}/torch/cuda/__init__.py:63: FutureWarning: The pynvml package is deprecated. "
        "Please install nvidia-ml-py instead. If you did not install pynvml directly, please "
        "report this to the maintainers of the package that installed pynvml for you.\n"
        "  import pynvml  # type: ignore[import]\n"
        "[2025-03-01 10:00:30] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, "
        "avail mem=60.12 GB\n") + _SGLANG_READY,
    # DeepGEMM's deep_gemm/__init__.py prints the legacy-kernel import failure and goes on
    # (a later DeepGEMM silences exactly this PyInit__C case); SGLang's docs runs then serve
    "deepgemm-legacy-kernels-notice": _SGLANG + (
        "Failed to load legacy DeepGEMM A100 Triton kernels: dynamic module does not define "
        "module export function (PyInit__C)\n") + _SGLANG_READY,
    # torch v2.5.1 torch/csrc/utils/tensor_numpy.cpp warns at import when numpy cannot be
    # initialised; a text-only serve never converts tensors to numpy
    "torch-numpy-init-warning": (
        f"{SP}/torch/_subclasses/functional_tensor.py:295: UserWarning: Failed to initialize "
        "NumPy: _ARRAY_API not found (Triggered internally at ../torch/csrc/utils/"
        "tensor_numpy.cpp:84.)\n"
        "  cpu = _conversion_method_template(device=torch.device(\"cpu\"))\n") + _VLLM + _READY,
}


# pip's conflict report (pip 24.2 commands/install.py) before a start that serves:
# hiyouga/EasyR1#27, PRIME-RL/SimpleVLA-RL#53 ("Despite the error, it still works")
_PIP_THEN_SERVES = (
    "ERROR: pip's dependency resolver does not currently take into account all the packages "
    "that are installed. This behaviour is the source of the following dependency conflicts.\n"
    "vllm 0.7.3 requires torch==2.5.1, but you have torch 2.4.0+cu124 which is incompatible.\n"
) + _VLLM + _READY


def test_pip_conflicts_before_a_start_that_serves_are_not_the_cause(tmp_path: Path) -> None:
    """The conflict lines count only where the server does not reach ready. (pip's preamble is
    at ERROR level and still reads as an unrecognised failure, as it did before this file.)"""
    log = tmp_path / "pip.log"
    log.write_text(_PIP_THEN_SERVES)
    rules = [f.rule for f in diagnose([log]).findings]
    assert "pip-dependency-conflict" not in rules, rules
    bare = tmp_path / "pip-only.log"
    bare.write_text(_PIP_THEN_SERVES.split(_VLLM)[0])
    assert diagnose([bare]).findings[0].rule == "pip-dependency-conflict"


@pytest.mark.parametrize("name", sorted(FIXED))
def test_python_env_message_names_its_cause(name: str, tmp_path: Path) -> None:
    category, text = FIXED[name]
    assert_named(KNOWN, name, category, text, tmp_path)


@pytest.mark.parametrize("name", sorted(KEPT))
def test_older_entries_keep_their_import_failures(name: str, tmp_path: Path) -> None:
    category, rule, text = KEPT[name]
    assert_top(category, rule, text, tmp_path, name)


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_python_env_healthy_run_stays_exit_0(name: str, tmp_path: Path) -> None:
    assert_healthy(name, HEALTHY[name], tmp_path)


def test_every_entry_has_a_case() -> None:
    """Each entry of known-python-env.toml is exercised by at least one log above."""
    from sm120kit.diagnose.catalogue.schema import parse_file
    texts = "\n".join(t for _c, t in FIXED.values())
    missing = [e.id for e in parse_file(KNOWN) if not any(e.match(ln) for ln in texts.splitlines())]
    assert not missing, missing


# vLLM v0.5.0 vllm/_custom_ops.py: the warning as vllm-project/vllm#5501 shows it (field-logs-e)
_C_WARN = ("WARNING 06-13 11:42:20 _custom_ops.py:11] Failed to import from vllm._C with "
           "ImportError('/usr/local/lib/python3.8/dist-packages/vllm/_C.abi3.so: undefined symbol: "
           "_ZN5torch7LibraryC1ENS0_4KindESsSt8optionalIN3c1011DispatchKeyEEPKcj')\n")


def test_vllm_compiled_ops_not_loadable_is_the_cause_unless_the_start_gets_ready(
        tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    log.write_text("INFO 06-13 11:42:19 __init__.py:190] Automatically detected platform cuda.\n"
                   + _C_WARN)
    res = diagnose([log])
    assert (res.findings[0].category, res.findings[0].rule) == (
        "library-version", "vllm-compiled-ops-not-loadable"), res.findings
    log.write_text(_C_WARN + "INFO:     Application startup complete.\n")
    res = diagnose([log])
    assert res.exit_code == 0 and not res.findings, res.verdict
