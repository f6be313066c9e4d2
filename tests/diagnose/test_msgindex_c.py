"""The C/C++/CUDA extractor of the message index (scripts/msgindex_c.py, issue 29).

The fixture tree tests/data/msgindex-fixture/c/ holds short snippets in the call shapes of the
real sources (NCCL src/, torch c10d, HAMi-core, FlashInfer csrc, the CUDA headers). The log lines
the templates are matched against are the shapes NCCL and torch print (the NCCL WARN prefix
``host:pid:tid [dev] file:line NCCL WARN``, torch's ``[rank0]:[E ...]`` glog prefix).
The committed extraction scripts/msgindex-sources/c-templates.jsonl.gz is checked for the
inputs it names and for messages each input must hold.
"""
from __future__ import annotations

import ctypes.util
import glob
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import msgindex_c as mc  # noqa: E402

FIXTURE = ROOT / "tests" / "data" / "msgindex-fixture" / "c"
COMMITTED = ROOT / "scripts" / "msgindex-sources" / "c-templates.jsonl.gz"

try:  # the index's own regex builder, once the two helpers' branches meet
    from msgindex_common import parts_to_regex
except ImportError:  # a minimal one of the same contract: literals escaped, typed holes
    _HOLE = {"int": r"-?\d+", "float": r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?",
             "num": r"-?(?:0[xX][0-9a-fA-F]+|\d+(?:\.\d+)?)", "hex": r"(?:0[xX])?[0-9a-fA-F]+",
             "word": r"\S+", "path": r"\S+", "any": r".*?"}

    def parts_to_regex(parts):
        ps = []
        for k, v in parts:  # a log line is matched alone: the message's first line counts
            if k == "lit" and "\n" in v:
                ps.append((k, v.split("\n", 1)[0]))
                break
            ps.append((k, v))
        while ps and ps[0][0] == "hole":
            ps.pop(0)
        while ps and ps[-1][0] == "hole":
            ps.pop()
        return "".join(re.escape(v) if k == "lit" else _HOLE[v] for k, v in ps)


@pytest.fixture(scope="module")
def templates() -> list:
    return mc.extract_c(FIXTURE, "fixture", "0")


def _find(templates: list, needle: str) -> list:
    return [t for t in templates if any(k == "lit" and needle in v for k, v in t.parts)]


def test_nccl_warn_in_a_macro_definition_gets_the_prefix_and_a_hole(templates) -> None:
    (t,) = _find(templates, "Cuda failure")
    assert t.file == "nccl/src/include/checks.h" and t.line == 5
    assert t.parts == (("lit", "NCCL WARN Cuda failure '"), ("hole", "any"), ("lit", "'"))
    assert (t.kind, t.level) == ("warn-macro", "warn")


def test_nccl_warn_regex_matches_real_nccl_lines(templates) -> None:
    (t,) = _find(templates, "Cuda failure")
    rx = re.compile(parts_to_regex(t.parts))
    # without and with the file:line NCCL prints before "NCCL WARN" since 2.19
    assert rx.search("node1:2345:2401 [3] NCCL WARN Cuda failure 'out of memory'")
    assert rx.search("node1:2345:2401 [3] enqueue.cc:1556 NCCL WARN Cuda failure 'out of memory'")
    assert not rx.search("node1:2345:2401 [3] NCCL INFO Cuda failure 'out of memory'")
    (c,) = _find(templates, "Connect to ")
    assert re.search(parts_to_regex(c.parts), "gpu-7:1:9 [0] misc/socket.cc:484 NCCL WARN Net : "
                     "Connect to 10.0.0.2<45967> failed : Software caused connection abort")


def test_printf_holes_are_typed_and_adjacent_literals_join_over_lines(templates) -> None:
    (t,) = _find(templates, "Connecting to ")
    assert t.line == 17 and t.function == "ncclSocketConnect" and t.level == "info"
    assert t.parts == (("lit", "NCCL INFO Connecting to "), ("hole", "any"),
                       ("lit", " (magic 0x"), ("hole", "hex"), ("lit", ") with timeout "),
                       ("hole", "int"), ("lit", ' ms, "retry" at 100%'))
    (p,) = _find(templates, "NCCL socket ")
    assert p.kind == "print"
    assert [v for k, v in p.parts if k == "hole"] == ["int", "int", "float"]
    assert not _find(templates, "goes to a file")  # fprintf to a file is not a message
    assert not [t for t in templates if t.parts[:2] == (("hole", "any"), ("lit", ": "))]


def test_nccl_error_path_trace_is_kept_under_its_prefix(templates) -> None:
    # NCCLCHECK's INFO(NCCL_ALL, "%s:%d -> %d", ...): no word of its own, but the shape of the
    # trace NCCL prints along a failure's path
    (t,) = _find(templates, " -> ")
    assert t.function == "#define NCCLCHECK" and t.level == "info"
    assert t.parts == (("lit", "NCCL INFO "), ("hole", "any"), ("lit", ":"), ("hole", "int"),
                       ("lit", " -> "), ("hole", "int"))
    assert re.search(parts_to_regex(t.parts),
                     "h100-2:146:209 [0] NCCL INFO transport/shm.cc:551 -> 2")


def test_watchdog_timeout_built_in_a_variable_matches_the_torch_line(templates) -> None:
    (t,) = _find(templates, "Watchdog caught collective operation timeout")
    assert (t.kind, t.level) == ("log", "error")
    assert t.function == "ProcessGroupNCCL::WorkNCCL::checkTimeout"
    line = ("[rank0]:[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
            "Timeout(ms)=600000) ran for 600000 milliseconds before timing out.")
    assert re.search(parts_to_regex(t.parts), line)
    assert not re.search(parts_to_regex(t.parts), "Watchdog caught collective operation timeout")


def test_stream_pieces_and_an_ostringstream_variable(templates) -> None:
    (t,) = _find(templates, "Some NCCL operations have failed")
    assert t.parts[-1] == ("lit", "Some NCCL operations have failed or timed out. Due to the "
                           "asynchronous nature of CUDA kernels, subsequent GPU operations "
                           "might run on corrupted/incomplete data.")
    (h,) = _find(templates, "Heartbeat monitor timed out")
    assert h.level == "warning" and h.parts[0] == ("hole", "any")
    assert not _find(templates, "below warning level")  # LOG(INFO) is not kept


def test_torch_checks_name_their_error_class(templates) -> None:
    (plain,) = _find(templates, "Expected rank >= 0")
    assert plain.parts == (("lit", "Expected rank >= 0 to be true, but got false."),)
    (multi,) = _find(templates, "Invalid rank ")
    assert multi.exc == "c10::Error" and multi.line == 30
    assert multi.parts == (("lit", "Invalid rank "), ("hole", "any"),
                           ("lit", " for a group of size "), ("hole", "any"), ("lit", "\t(tab)"))
    (dist,) = _find(templates, "communicator was aborted")
    assert dist.exc == "c10::DistBackendError" and dist.kind == "check"
    (thrown,) = _find(templates, "is not available")
    assert thrown.exc == "c10::DistBackendError" and thrown.kind == "raise"
    (asrt,) = _find(templates, "INTERNAL ASSERT FAILED")
    assert asrt.parts[0] == ("lit", "comm != nullptr INTERNAL ASSERT FAILED at ")
    (warn,) = _find(templates, "unbatched P2P op")
    assert (warn.kind, warn.level) == ("warn-macro", "warning")


def test_c10d_fmt_logging_and_throw_concatenation(templates) -> None:
    (t,) = _find(templates, "server socket on")
    assert t.parts == (("lit", "[c10d] The server socket on "), ("hole", "any"),
                       ("lit", " has timed out, will retry."))
    (r,) = _find(templates, "Failed to open ")
    assert r.exc == "std::runtime_error"
    assert r.parts == (("lit", "Failed to open "), ("hole", "any"), ("lit", ": errno "),
                       ("hole", "num"))
    assert not [x for x in templates if x.exc == "std::runtime_error" and x is not r]


def test_nccl_check_macro_message_through_a_variable(templates) -> None:
    (t,) = _find(templates, "NCCL error in: ")
    assert t.exc == "c10::DistBackendError" and t.file == "torch/c10d/NCCLUtils.hpp"
    line = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
            "NCCLUtils.hpp:317, unhandled cuda error (run with NCCL_DEBUG=INFO for details), "
            "NCCL version 2.20.5")
    assert re.search(parts_to_regex(t.parts), line)


def test_hami_and_flashinfer_shapes(templates) -> None:
    (oom,) = _find(templates, " OOM ")
    assert oom.level == "error"
    assert re.search(parts_to_regex(oom.parts),
                     "[HAMI-core ERROR (pid:25 thread=140 allocator.c:49)]: Device 0 OOM "
                     "24000000000 / 23000000000")
    (fi,) = _find(templates, "Batch size mismatch")
    assert fi.exc == "flashinfer::Error"
    assert fi.parts == (("lit", "Batch size mismatch: "), ("hole", "any"), ("lit", " vs "),
                        ("hole", "any"))
    assert _find(templates, "Check failed: eps > 0")
    (ic,) = _find(templates, "RMSNorm failed")
    assert ic.parts[0] == ("lit", "Check failed: (status == cudaSuccess) is false: "
                                  "RMSNorm failed with error code ")
    (th,) = _find(templates, "Unsupported dtype")
    assert (th.kind, th.exc) == ("raise", "ValueError")


def test_escapes_raw_strings_and_comments() -> None:
    src = ('// WARN("commented out %d", 1);\n'
           'void f() {\n'
           '  /* TORCH_CHECK(false, "in a block comment"); */\n'
           '  TORCH_WARN(R"(raw "quoted" text)", x);\n'
           '  TORCH_WARN("tab\\there \\x41\\101 \\"q\\"");\n'
           '}\n')
    found = [f.parts for f, _fn in mc.find_messages(src)]
    assert found == [(("lit", 'raw "quoted" text'), ("hole", "any")),
                     (("lit", 'tab\there AA "q"'),)]


def test_cuda_headers_without_a_library_use_the_doc_comment() -> None:
    got = mc.cuda_error_strings(FIXTURE / "cuda/include/driver_types.h",
                                FIXTURE / "cuda/include/cuda.h", None, "test")
    by = {(t.exc, t.function): t.parts[0][1] for t in got}
    assert by[("cudaErrorMemoryAllocation", "cudaGetErrorName")] == "cudaErrorMemoryAllocation"
    assert by[("cudaErrorMemoryAllocation", "doc-comment")] == (
        "The API call failed because it was unable to allocate enough memory or other resources "
        "to perform the requested operation")
    assert by[("CUDA_ERROR_ILLEGAL_ADDRESS", "cuGetErrorName")] == "CUDA_ERROR_ILLEGAL_ADDRESS"
    # a driver code with no runtime code of its value: its doc comment
    assert by[("CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "doc-comment")].startswith(
        "This indicates that the provided PTX was compiled")
    assert all(t.project == "cuda" and t.line > 0 for t in got)


def _libcudart() -> str | None:
    found = (glob.glob("/usr/local/cuda*/lib*/libcudart.so*")
             + glob.glob(str(Path(sys.prefix) / "lib/python3*/site-packages/nvidia/cuda_runtime/"
                                               "lib/libcudart.so*")))
    return found[0] if found else ctypes.util.find_library("cudart")


@pytest.mark.skipif(_libcudart() is None, reason="no libcudart on this machine (the CUDA runtime "
                    "wheel or toolkit brings one; the committed extraction used it)")
def test_cuda_runtime_strings_come_from_the_real_library() -> None:
    lib = _libcudart()
    assert lib is not None
    got = mc.cuda_error_strings(FIXTURE / "cuda/include/driver_types.h",
                                FIXTURE / "cuda/include/cuda.h", Path(lib), "test")
    by = {(t.exc, t.function): t.parts[0][1] for t in got}
    assert by[("cudaErrorMemoryAllocation", "cudaGetErrorString")] == "out of memory"
    assert by[("cudaErrorIllegalAddress", "cudaGetErrorString")] == (
        "an illegal memory access was encountered")
    assert by[("CUDA_ERROR_ILLEGAL_ADDRESS", "cudaGetErrorString@same-code")] == (
        "an illegal memory access was encountered")
    assert by[("CUDA_ERROR_OUT_OF_MEMORY", "cudaGetErrorString@same-code-other-name")] == (
        "out of memory")


def test_command_line_writes_a_header_and_templates(tmp_path) -> None:
    out = tmp_path / "c.jsonl.gz"
    assert mc.main(["--source", f"nccl@2.0={FIXTURE / 'nccl'}",
                    "--cuda", f"t={FIXTURE / 'cuda/include'}", "--out", str(out)]) == 0
    header, got = mc.read_jsonl(out)
    counts: Any = header["counts"]
    inputs: Any = header["inputs"]
    assert [c["templates"] for c in counts] == [
        len(mc.extract_c(FIXTURE / "nccl", "nccl", "2.0")), 14]  # 3 runtime + 4 driver codes, x2
    assert {t.project for t in got} == {"nccl", "cuda"}
    assert {s["project"] for s in inputs} >= {"nccl", "torch", "cuda", "flashinfer",
                                                       "hami"}


@pytest.fixture(scope="module")
def committed() -> tuple[dict, list]:
    return mc.read_jsonl(COMMITTED)


def test_committed_extraction_covers_every_input(committed) -> None:
    header, got = committed
    counts: Any = header["counts"]
    made = {(c["project"], c["version"]) for c in counts}
    for spec in mc.c_inputs():
        for version in spec.versions:
            assert (spec.project, version) in made, (spec.project, version)
    assert all(c["templates"] > 0 for c in counts)
    projects = {t.project for t in got}
    assert projects == {"nccl", "torch", "flashinfer", "hami", "cuda"}


@pytest.mark.parametrize(("project", "needle"), [
    ("nccl", "NCCL WARN Cuda failure '"),
    ("nccl", "NCCL WARN NET/IB : "),
    ("nccl", "unhandled cuda error (run with NCCL_DEBUG=INFO for details)"),
    ("torch", "Watchdog caught collective operation timeout: "),
    ("torch", "Detected mismatch between collectives on ranks"),
    ("torch", "NCCL error in: "),
    ("torch", "CUDA out of memory. Tried to allocate "),
    ("cuda", "an illegal memory access was encountered"),
    ("cuda", "no kernel image is available for execution on the device"),
    ("cuda", "CUDA_ERROR_OUT_OF_MEMORY"),
    ("hami", "[HAMI-core ERROR ("),
    ("flashinfer", "Check failed: "),
])
def test_committed_extraction_holds_known_messages(committed, project, needle) -> None:
    _header, got = committed
    assert any(t.project == project and any(k == "lit" and needle in v for k, v in t.parts)
               for t in got), needle


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build the library")
def test_library_strings_are_attributed_to_their_translation_unit(tmp_path) -> None:
    # two translation units built into one real shared library, each with the __FILE__ path its
    # checks embed (the build folder /__w/pytorch/pytorch/ as in torch's CI-built wheels); the
    # compiler orders a unit's strings its own way, so only the unit's first message next to its
    # path is asserted (the attribution is a heuristic, see attribute_files)
    (tmp_path / "a.c").write_text(
        '#line 1 "/__w/pytorch/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"\n'
        'const char* fa(int i) {\n'
        '  static const char* m[] = {__FILE__, "rank %d of %d timed out", "abc",\n'
        '    "Watchdog caught collective operation timeout: ", " milliseconds before timing out."};\n'
        '  return m[i];\n}\n')
    (tmp_path / "b.c").write_text(
        '#line 1 "/__w/pytorch/pytorch/aten/src/ATen/native/Linear.cpp"\n'
        'const char* fb(int i) {\n'
        '  static const char* m[] = {__FILE__, "mat1 and mat2 shapes cannot be multiplied"};\n'
        '  return m[i];\n}\n')
    lib = tmp_path / "libx.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(lib), str(tmp_path / "a.c"),
                    str(tmp_path / "b.c")], check=True, timeout=60)
    strings = mc.rodata_strings(lib, min_len=4)
    assert mc.build_root(strings) == "/__w/pytorch/pytorch/"
    got = mc.extract_binary_strings(lib, "torch", "9.9", mc.torch_c10d_file)
    by = {t.parts: t for t in got}
    t = by[(("lit", "Watchdog caught collective operation timeout: "),)]
    assert (t.file, t.kind, t.line) == ("torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp",
                                        "binary-string", 0)
    # a printf format among the strings gets typed holes
    assert mc._clean(mc.printf_parts("rank %d of %d timed out")) == (
        ("lit", "rank "), ("hole", "int"), ("lit", " of "), ("hole", "int"), ("lit", " timed out"))
    assert not [x for x in got if "mat1" in str(x.parts)]  # aten's, not kept
    assert not [x for x in got if x.parts == (("lit", "abc"),)]  # not a message


def test_a_message_in_a_macro_definition_names_the_macro(templates) -> None:
    (t,) = _find(templates, "NCCL error in: ")
    assert t.function == "#define C10D_NCCL_CHECK"


def test_command_line_refuses_a_missing_input(tmp_path) -> None:
    with pytest.raises(SystemExit, match="no such file or folder"):
        mc.main(["--source", f"nccl@2.0={tmp_path / 'absent'}", "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit, match="PROJECT@VERSION=PATH"):
        mc.main(["--source", "nccl=/tmp", "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


def test_error_string_switch_gives_one_template_per_code(templates) -> None:
    got = {t.exc: t for t in templates if t.kind == "error-string"}
    assert set(got) == {"ncclSuccess", "ncclUnhandledCudaError", "ncclRemoteError"}
    t = got["ncclUnhandledCudaError"]
    assert t.function == "ncclGetErrorString" and t.line == 32
    assert re.search(parts_to_regex(t.parts),
                     "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/"
                     "c10d/NCCLUtils.hpp:317, unhandled cuda error (run with NCCL_DEBUG=INFO for "
                     "details), NCCL version 2.20.5")
