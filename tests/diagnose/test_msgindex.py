"""The message index (issue 29 item 1): the Python extractor and the generator on a fixture tree
of two releases (since/until, dedup, categories), the shipped index (loads, current for its
inputs and for ``index_map.toml``, covers vLLM 0.34), and ``--explain-line`` on real messages
read from vLLM 0.34.0's released source."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import build_message_index as bmi  # noqa: E402
from msgindex_common import anchor_words, display, parts_to_regex  # noqa: E402
from msgindex_py import extract_file, extract_python  # noqa: E402

from sm120kit.diagnose.msgindex import SHIPPED, MessageIndex, version_key  # noqa: E402
from sm120kit.diagnose.msgindex.mapping import load_map  # noqa: E402

FIXTURE = ROOT / "tests" / "data" / "msgindex-fixture"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _by_text(root: Path, version: str) -> dict[str, tuple[str, str, str | None, str | None]]:
    return {display(t.parts): (t.function, t.kind, t.exc, t.level)
            for t in extract_python(root / f"vllm-{version}", "vllm", version)}


def test_extractor_reads_every_shape() -> None:
    got = _by_text(FIXTURE, "0.1.0")
    want = {
        # a variable assigned earlier (implicit concatenation of two f-strings)
        "World size ({...}) is not divisible by tensor_parallel_size ({...}).":
            ("ParallelConfig.verify", "raise", "ValueError", None),
        # % formatting with a typed hole, concatenation, .format
        "tensor_parallel_size={int} exceeds the {...} limit":
            ("ParallelConfig.verify", "raise", "ValueError", None),
        "Pipeline parallelism of {...} stages is unsupported here":
            ("ParallelConfig.pipeline", "raise", "ValueError", None),
        "Attention backend {...} is not supported on this platform":
            ("check_backend", "raise", "NotImplementedError", None),
        # logging's own % arguments; warnings.warn with its category
        "Using {int} GPUs per node; expected {int}": ("ParallelConfig.verify", "log", None, "warning"),
        "The flag --old-parallel is deprecated and will be removed":
            ("deprecated_flag", "log", "DeprecationWarning", "warning"),
        # name += more text, raise ... from
        "Cannot find any model weights in {...} (expected *.safetensors)":
            ("load_weights", "raise", "RuntimeError", None),
        "Weight name {...} is not an identifier": ("iterate", "check", "AssertionError", None),
        "Empty weight name at position {int} of {int}": ("iterate", "log", None, "error"),
        # helpers whose name says error / warning, warning_once, exception, a typed f-string hole
        "Worker failed to start after {float} GiB were allocated":
            ("Runner.start", "log", None, "error"),
        "Custom allreduce is disabled because this box has no NVLink":
            ("Runner.start", "log", None, "warning"),
        "Falling back to eager mode for {...}": ("Runner.start", "log", None, "warning"),
        "Unexpected failure in worker loop: {...}": ("Runner.start", "log", None, "error"),
    }
    for text, meta in want.items():
        assert got.get(text) == meta, text
    # info-level logging and a raise without a message are not messages of the index
    assert not any("verified" in t for t in got)


def test_regex_and_anchor_words() -> None:
    parts = (("lit", "Invalid rank"), ("hole", "int"), ("lit", " of world_size "),
             ("hole", "int"), ("lit", ": check NCCL_SOCKET_IFNAME"))
    rx = parts_to_regex(parts)
    import re
    assert re.search(rx, "ERROR 12-02 [x.py:1] Invalid rank12 of  world_size 8: check NCCL_SOCKET_IFNAME")
    assert not re.search(rx, "Invalid rank twelve of world_size 8: check NCCL_SOCKET_IFNAME")
    # "rank" is glued to the number in a log line: not an anchor word
    assert anchor_words(parts) == ("invalid", "world_size", "check", "nccl_socket_ifname")


def _row(idx: MessageIndex, text: str) -> list[tuple]:
    return list(idx.db.execute("SELECT file, line, since, until, nrel, category FROM templates "
                               "WHERE text = ?", (text,)))


def test_generator_on_two_releases(tmp_path: Path) -> None:
    out = tmp_path / "index.sqlite"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_message_index.py"),
                           "--fixture", str(FIXTURE), "--out", str(out)],
                          capture_output=True, text=True, env=ENV, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "vllm            0.1.0" in proc.stdout and "vllm            0.2.0" in proc.stdout
    idx = MessageIndex(out)
    # the inputs and their versions are written into the data
    assert [(i["project"], i["version"]) for i in idx.meta["inputs"]] == [("vllm", "0.1.0"),
                                                                          ("vllm", "0.2.0")]
    assert idx.meta["releases"] == {"vllm": ["0.1.0", "0.2.0"]}
    # unchanged message: one row, both releases, the newest release's line
    assert _row(idx, "World size ({...}) is not divisible by tensor_parallel_size ({...}).") == [
        ("vllm/config/parallel.py", 16, "0.1.0", "0.2.0", 2, "config-invalid")]
    # reworded: the old wording ends in 0.1.0, the new one starts in 0.2.0
    assert _row(idx, "tensor_parallel_size={int} exceeds the {...} limit")[0][2:4] == ("0.1.0",
                                                                                    "0.1.0")
    assert _row(idx, "tensor_parallel_size={...} is larger than one node allows")[0][2:4] == (
        "0.2.0", "0.2.0")
    # the meaning comes from the module and the words (index_map.toml)
    assert _row(idx, "Cannot find any model weights in {...} (expected *.safetensors)")[0][5] == \
        "checkpoint-config"
    assert _row(idx, "decode_context_parallel_size={...} is not supported with this attention "
                     "backend")[0][5] == "dcp-unsupported"
    assert _row(idx, "Custom allreduce is disabled because this box has no NVLink")[0][5] == \
        "p2p-transport"
    assert _row(idx, "Falling back to eager mode for {...}")[0][5] == "none"
    m = idx.match("(EngineCore_DP0 pid=7) ValueError: World size (6) is not divisible by "
                  "tensor_parallel_size (4).")
    assert m and m[0].template.category == "config-invalid"
    assert m[0].template.source() == ("raised by vllm/config/parallel.py:16 in "
                                      "ParallelConfig.verify (ValueError), vLLM 0.1.0\u20130.2.0")
    assert idx.match("INFO 12-02 Parallel config verified for 8 ranks") == []


def test_shipped_index_loads_and_is_current() -> None:
    # opening the index must not read the file: a ratio against reading its bytes, measured
    # here (scripts/bench_diagnose.py measures the absolute 50 ms target)
    t0 = time.perf_counter()
    SHIPPED.read_bytes()
    anchor = time.perf_counter() - t0
    t0 = time.perf_counter()
    idx = MessageIndex(SHIPPED)
    meta = idx.meta
    load = time.perf_counter() - t0
    assert load < anchor, (load, anchor)
    want = {(p, v) for p, _d, vs, _g in bmi.INPUTS for v in vs}
    have = {(i["project"], i["version"]) for i in meta["inputs"] if i["dist"] != "c-extractor"}
    assert have == want, "regenerate: python scripts/build_message_index.py"
    assert meta["releases"]["vllm"] == bmi.VLLM
    assert meta["map_sha256"] == bmi.map_digest(), "index_map.toml changed: regenerate the index"
    assert meta["extractor"] == bmi.EXTRACTOR_VERSION
    # the stored categories are what the mapping says (a sample of every 50th row)
    imap = load_map()
    for row in idx.db.execute("SELECT project, file, function, exc, level, text, category "
                              "FROM templates WHERE id % 50 = 0"):
        assert imap.category(*row[:6]) == row[6], row


def test_shipped_index_covers_vllm_034() -> None:
    meta = MessageIndex(SHIPPED).meta
    (v034,) = [i for i in meta["inputs"] if i["project"] == "vllm" and i["version"] == "0.34.0"]
    assert v034["counted"] > 2000
    assert v034["indexed"] / v034["counted"] >= 0.95, v034


def _fill(parts: tuple[tuple[str, str], ...]) -> str:
    sample = {"int": "4", "float": "1.5", "num": "8", "hex": "0x7f", "word": "x", "path": "/m",
              "any": "GLM-5"}
    return "".join(v if k == "lit" else sample[v] for k, v in parts)


@pytest.mark.network
@pytest.mark.parametrize(("rel", "needle", "category"), [
    ("vllm/config/parallel.py", "communicator is incompatible with async EPLB", "config-invalid"),
    ("vllm/model_executor/model_loader/default_loader.py", "Cannot find any model weights",
     "checkpoint-config"),
    ("vllm/v1/core/kv_cache_planning.py", "No available memory for the cache blocks",
     "kv-cache-insufficient"),
])
def test_explain_line_on_real_vllm_034_messages(rel: str, needle: str, category: str) -> None:
    from tests.support.releases import tree
    root = tree("vllm", "0.34.0")
    tpl = [t for t in extract_file(root / rel, rel, "vllm", "0.34.0") if needle in display(t.parts)]
    assert tpl, f"{needle!r} not in vLLM 0.34.0's {rel}"
    exc = tpl[0].exc or "ERROR"
    line = f"(EngineCore_DP0 pid=412) {exc}: {_fill(tpl[0].parts)}"
    proc = subprocess.run([sys.executable, "-m", "sm120kit", "diagnose", "--json",
                           "--explain-line", line], capture_output=True, text=True, env=ENV,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    top = res["matches"][0]
    assert (top["file"], top["category"]) == (rel, category), top
    assert version_key(top["since"]) <= (0, 34, 0) and top["until"] == "0.34.0"
    assert f"{rel}:{tpl[0].line}" in top["source"]
    human = subprocess.run([sys.executable, "-m", "sm120kit", "diagnose", "--explain-line", line],
                           capture_output=True, text=True, env=ENV, timeout=60)
    assert f"[{category}]" in human.stdout and rel in human.stdout


def test_explain_line_no_match_and_empty() -> None:
    proc = subprocess.run([sys.executable, "-m", "sm120kit", "diagnose", "--json",
                           "--explain-line", "hello there, nothing failed"],
                          capture_output=True, text=True, env=ENV, timeout=60)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["matches"] == []
    bad = subprocess.run([sys.executable, "-m", "sm120kit", "diagnose", "--json",
                          "--explain-line", "  "], capture_output=True, text=True, env=ENV,
                         timeout=60)
    assert bad.returncode == 2
    assert json.loads(bad.stdout)["status"] == "error"


# vLLM 0.34.0's vllm/config/parallel.py raises this (ParallelConfig._validate_numa_bind_cpus);
# no catalogue entry knows it, so the index names it
_NUMA = ("(EngineCore_DP0 pid=90) ValueError: numa_bind_cpus entries must use numactl CPU list "
         "syntax, for example '0-3' or '0,2,4-7'.")


def _numa_log(tmp_path: Path, version: str) -> Path:
    p = tmp_path / "vllm.log"
    p.write_text("\n".join([
        "INFO 12-02 10:00:00 [utils.py:240] non-default args: {'model': 'm', "
        "'tensor_parallel_size': 4}",
        f"(EngineCore_DP0 pid=90) INFO 12-02 10:00:05 [core.py:109] Initializing a V1 LLM engine "
        f"(v{version}) with config: model='m', speculative_config=None",
        "(EngineCore_DP0 pid=90) ERROR 12-02 10:00:06 [core.py:700] EngineCore failed to start.",
        "(EngineCore_DP0 pid=90) Traceback (most recent call last):",
        '(EngineCore_DP0 pid=90)   File "/x/vllm/v1/engine/core.py", line 690, in run_engine_core',
        "(EngineCore_DP0 pid=90)     engine_core = EngineCoreProc(*args, **kwargs)",
        _NUMA, ""]), encoding="utf-8")
    return p


def test_index_match_names_the_module_and_the_release_range(tmp_path: Path) -> None:
    from sm120kit.diagnose.engine import diagnose
    res = diagnose([_numa_log(tmp_path, "0.34.0")])
    top = res.findings[0]
    assert (top.rule, top.category) == ("index-match", "config-invalid")
    assert "raised by vllm/config/parallel.py:" in top.summary and "(ValueError)" in top.summary
    assert "consistent with this log's vllm 0.34.0" in top.summary
    assert 0.5 <= top.confidence < 0.8  # below a curated catalogue entry
    # a log of a release that never had the message: a fork or a patched tree
    old = diagnose([_numa_log(tmp_path, "0.10.0")]).findings[0]
    assert old.rule == "index-match" and "outside those releases" in old.summary


def test_index_shipped_with_the_c_templates() -> None:
    meta = MessageIndex(SHIPPED).meta
    assert bool(meta["pending"]) == (not bmi.C_TEMPLATES.exists())
    if bmi.C_TEMPLATES.exists():
        assert {"nccl", "cuda", "hami"} <= set(meta["releases"])
        # current for the committed C extraction too
        assert meta["c_templates_sha256"] == hashlib.sha256(
            bmi.C_TEMPLATES.read_bytes()).hexdigest(), "regenerate the index"
    idx = MessageIndex(SHIPPED)
    m = idx.match("node1:77:90 [3] NCCL WARN P2P is disabled between NVLINK connected GPUs 1 and "
                  "3. This should not be the case given their connectivity, and is probably due "
                  "to a hardware issue. If you still want to proceed, you can set "
                  "NCCL_IGNORE_DISABLED_P2P=1.")
    assert m and m[0].template.project == "nccl" and m[0].template.category == "p2p-transport"


def test_explain_line_names_the_catalogue_entry_and_its_conditions() -> None:
    """--explain-line reads the curated catalogue too: a torch OOM is named by its entry (id,
    category, file, source), an advice line is said to be advice, and the index part stays."""
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
           "total capacity of 94.97 GiB of which 1.06 GiB is free.")
    proc = subprocess.run([sys.executable, "-m", "sm120kit", "diagnose", "--json",
                           "--explain-line", oom], capture_output=True, text=True, env=ENV,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    assert res["entries"] and res["entries"][0]["category"] == "out-of-memory", res["entries"]
    assert res["entries"][0]["file"].endswith(".toml") and res["entries"][0]["sources"]
    assert res["advice"] is False and any(m["category"] == "out-of-memory" for m in res["matches"])
    human = subprocess.run([sys.executable, "-m", "sm120kit", "diagnose", "--explain-line", oom],
                           capture_output=True, text=True, env=ENV, timeout=60)
    assert f"catalogue entry {res['entries'][0]['id']}" in human.stdout
    hint = ("If you are running out of memory, consider decreasing `gpu_memory_utilization` or "
            "enforcing eager mode.")
    adv = json.loads(subprocess.run([sys.executable, "-m", "sm120kit", "diagnose", "--json",
                                     "--explain-line", hint], capture_output=True, text=True,
                                    env=ENV, timeout=60).stdout)
    assert adv["advice"] is True and adv["entries"] == []
