"""What an indexed message means (``catalogue/index_map.toml``) and how a diagnosis reads it
(``msgindex/lines.py``, ``rules/index_match.py``): the mapping's rule kinds and text filters on a
small map of its own, the shipped index's categories for messages the sources really print
(CUDA's error strings, NCCL's WARN formats, torch's store sockets, vLLM's and SGLang's raises),
and the line an engineer reads first: the exception line after a long traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import build_message_index as bmi  # noqa: E402

from sm120kit.diagnose.msgindex import SHIPPED, MessageIndex  # noqa: E402
from sm120kit.diagnose.msgindex.lines import cause_match, is_frame, message_core  # noqa: E402
from sm120kit.diagnose.msgindex.mapping import MappingError, load_map  # noqa: E402

_MAP = r"""
[[keyword]]
project = ["nccl"]
regex = '(?i)unhandled system error'
category = "none"

[[keyword]]
regex = '(?i)no kernel image'
category = "library-version"

[[exception]]
type = ["TimeoutError"]
category = "none"

[[path]]
project = "vllm"
glob = ["vllm/sampling_params.py"]
category = "none"

[[path]]
project = "vllm"
glob = ["vllm/**"]
exc = ["ValueError"]
function = ["*__init__"]
text = '(?i)not supported|requires'
category = "config-invalid"
"""


def test_mapping_says_which_rule_decided(tmp_path: Path) -> None:
    f = tmp_path / "map.toml"
    f.write_text(_MAP, encoding="utf-8")
    m = load_map(f)
    # a path rule limited to the message's words: only a refusal in words is config-invalid
    assert m.decide("vllm", "vllm/v1/x.py", "Foo.__init__", "ValueError", None,
                    "FP8 KV cache is not supported with {...}") == ("config-invalid", "path")
    assert m.decide("vllm", "vllm/v1/x.py", "Foo.__init__", "ValueError", None,
                    "{...} must be contiguous") == ("none", "default")
    # "none" given by a rule is a judgment, told apart from no judgment
    assert m.decide("vllm", "vllm/sampling_params.py", "SamplingParams._verify_args",
                    "ValueError", None, "temperature must be non-negative, got {...}.") == (
        "none", "path")
    assert m.decide("vllm", "vllm/v1/x.py", "f", "TimeoutError", None,
                    "RPC call timed out") == ("none", "exception")
    # a keyword limited to a project applies to that project only
    assert m.decide("nccl", "src/init.cc", "ncclGetErrorString", None, "error",
                    "unhandled system error (run with NCCL_DEBUG=INFO for details)") == (
        "none", "keyword")
    assert m.category("cuda", "include/cuda.h", "", None, "error",
                      "no kernel image is available for execution on the device") == "library-version"
    f.write_text(_MAP.replace("(?i)not supported|requires", "(unclosed"), encoding="utf-8")
    with pytest.raises(MappingError, match="path #2: text"):
        load_map(f)


# (line as a log prints it, project of the top template, its category, the cause a diagnosis
# takes from it or None). The messages are the sources' own: CUDA's driver_types.h strings,
# NCCL src/init.cc WARNs and ncclGetErrorString, torch c10d socket.cpp / elastic rendezvous,
# vLLM sampling_params.py, SGLang's model runner.
_LINES = [
    ("(Worker_TP1 pid=412) RuntimeError: CUDA error: no kernel image is available for "
     "execution on the device", "cuda", "library-version", "library-version"),
    ("RuntimeError: CUDA error: peer access is not supported between these two devices",
     "cuda", "p2p-transport", "p2p-transport"),
    ("RuntimeError: CUDA error: operation not permitted when stream is capturing",
     "cuda", "cudagraph-capture", "cudagraph-capture"),
    ("node1:77:90 [1] NCCL WARN Mismatched NCCL version detected : rank 0 version 22703 rank 1 "
     "version 21903", "nccl", "library-version", "library-version"),
    ("node1:3954408:3954408 [0] init.cc:871 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 "
     "both on CUDA device 98000", "nccl", "config-invalid", "config-invalid"),
    ("torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the "
     "C10d store has failed. See inner exception for details.", "torch", "config-invalid",
     "config-invalid"),
    ("[2025-05-16 13:12:16 TP0] RuntimeError: Not enough memory. Please try to increase "
     "--mem-fraction-static.", "sglang", "kv-cache-insufficient", "kv-cache-insufficient"),
    # messages whose cause is elsewhere: recognised, shown, never a cause by themselves
    ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
     "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), "
     "NCCL version 2.21.5", "nccl", "none", None),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda", "none", None),
    ("ValueError: temperature must be non-negative, got -1.0.", "vllm", "none", None),
    # "DevSideSync" is no desync
    ("RuntimeError: CUDA error: cudaErrorUnsupportedDevSideSync", "cuda", "none", None),
]


@pytest.mark.parametrize(("line", "project", "category", "cause"), _LINES)
def test_shipped_index_means_what_the_source_says(line: str, project: str, category: str,
                                                  cause: str | None) -> None:
    top = MessageIndex(SHIPPED).match(line)[0].template
    assert (top.project, top.category) == (project, category), top.source()
    got = cause_match(line)
    assert (got.template.category if got else None) == cause


def test_shipped_index_records_its_error_level_coverage() -> None:
    cover = MessageIndex(SHIPPED).meta["coverage"]
    for p, c in cover.items():
        assert c["error"] == c.get("categorized", 0) + c.get("none-by-rule", 0) + c.get(
            "none-default", 0), p
    # measured on the shipped index (docs/diagnose.md): a floor, so a mapping edit that
    # drops a module's meaning shows here
    for p, floor in (("vllm", 0.45), ("sglang", 0.40), ("nccl", 0.70), ("cuda", 0.30)):
        assert cover[p]["categorized"] / cover[p]["error"] >= floor, (p, cover[p])
    assert bmi.is_error(bmi.Merged("nccl", "src/init.cc", 1, "f", "warn-macro", None, "warn", ()))


def test_message_core_and_frames() -> None:
    line = ("(EngineCore_DP0 pid=90) ERROR 12-02 10:00:06 [core.py:700] ValueError: numa_bind_cpus "
            "entries must use numactl CPU list syntax")
    assert message_core(line) == "numa_bind_cpus entries must use numactl CPU list syntax"
    # another engine's or a collector's stamp (SGLang, journald) is no part of the message
    assert message_core("[2025-05-16 13:12:16 TP0] RuntimeError: Not enough memory. Please try "
                        "to increase --mem-fraction-static.") == (
        "Not enough memory. Please try to increase --mem-fraction-static.")
    assert message_core("May 16 13:12:16 host vllm[123]: ERROR 05-16 13:12:16 [core.py:700] "
                        "ValueError: No compilation mode is set.") == "No compilation mode is set."
    assert is_frame('(EngineCore_DP0 pid=90) ERROR 12-02 10:00:06 [core.py:700]   File '
                    '"/x/vllm/v1/engine/core.py", line 690, in run_engine_core')
    assert is_frame("(EngineCore_DP0 pid=90) ERROR 12-02 10:00:06 [core.py:700]     ^^^^^^^^")
    assert not is_frame(line)


def test_the_exception_after_a_long_traceback_names_the_cause(tmp_path: Path) -> None:
    """The first recorded failure lines are the traceback's frames; the exception line after
    them is the one read, and its short message (vLLM 0.34.0's vllm/config/compilation.py
    CompilationConfig.init_backend) is measured without the line's log prefix."""
    from sm120kit.diagnose.engine import diagnose
    pre = "(EngineCore_DP0 pid=90) ERROR 12-02 10:00:06 [core.py:700] "
    frames = []
    for i in range(14):
        frames += [f'{pre}  File "/x/vllm/v1/engine/mod{i}.py", line {100 + i}, in step{i}',
                   f"{pre}    return self.step{i + 1}(*args, **kwargs)"]
    log = tmp_path / "vllm.log"
    log.write_text("\n".join([
        "INFO 12-02 10:00:00 [utils.py:240] non-default args: {'model': 'm', "
        "'tensor_parallel_size': 4}",
        f"{pre}EngineCore failed to start.", f"{pre}Traceback (most recent call last):", *frames,
        f"{pre}ValueError: No compilation mode is set.", ""]), encoding="utf-8")
    top = diagnose([log]).findings[0]
    assert (top.rule, top.category) == ("index-match", "config-invalid"), top.summary
    assert "vllm/config/compilation.py" in top.summary
