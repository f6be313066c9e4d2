"""The message index's newer inputs and meanings: TGI (its Python server and its Rust launcher,
router and backends, read from the release tags of huggingface/text-generation-inference),
huggingface_hub, vLLM 0.5.x and torch.cuda, and modules the mapping judges since (LoRA checks,
SGLang's scheduler process, NCCL's environment variables, FlashInfer's kernel-DSL requirement).

The lines below are the messages as the sources print them (the template's holes filled with
plausible values); each test names the file that holds it. ``--explain-line`` is run as a real
process on the shipped index."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import build_message_index as bmi  # noqa: E402
from msgindex_common import display  # noqa: E402
from msgindex_fetch import Source, tree  # noqa: E402
from msgindex_rs import RS_EXTRACTOR, extract_rust, format_parts  # noqa: E402

from sm120kit.diagnose.msgindex import SHIPPED, MessageIndex  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

# (line, project, file of the top template, category)
_EXPLAIN = [
    # TGI's Rust launcher (launcher/src/main.rs, spawn_shards): a shard process died
    ("2024-10-09T11:12:13.123456Z ERROR text_generation_launcher: Shard 1 failed to start",
     "tgi", "launcher/src/main.rs", "rank-crashed"),
    # TGI's Python server (server/text_generation_server/utils/weights.py, Weights.get_filename)
    ("RuntimeError: weight lm_head.weight does not exist", "tgi",
     "server/text_generation_server/utils/weights.py", "checkpoint-config"),
    # TGI's warmup (flash_causal_lm.py): the prefill batch does not fit the memory left
    ("Error: Backend(Warmup(Generation(\"Not enough memory to handle 16000 prefill tokens. You "
     "need to decrease `--max-batch-prefill-tokens`\")))", "tgi",
     "server/text_generation_server/models/flash_causal_lm.py", "out-of-memory"),
    # huggingface_hub (_snapshot_download.py): offline and not in the cache
    ("huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot "
     "folder for the specified revision on the local disk and outgoing traffic has been "
     "disabled. To enable repo look-ups and downloads online, set 'HF_HUB_OFFLINE=0' as "
     "environment variable.", "huggingface_hub", "huggingface_hub/_snapshot_download.py",
     "checkpoint-config"),
    # vLLM 0.5.0 only (vllm/model_executor/model_loader/tensorizer.py): an engine option
    ("ValueError: Loading to multiple GPUs is not currently supported with vLLM-serialized "
     "models. Please set tensor_parallel_size=1. or use a non-vLLM-serialized model, such as a "
     "serialized Hugging Face `PretrainedModel`.", "vllm",
     "vllm/model_executor/model_loader/tensorizer.py", "config-invalid"),
    # torch/cuda/__init__.py _lazy_init: CUDA used before fork
    ("RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with "
     "multiprocessing, you must use the 'spawn' start method", "torch", "torch/cuda/__init__.py",
     "config-invalid"),
    # torch/cuda/__init__.py _check_capability: a torch build without sm_120 kernels
    ("UserWarning: NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with "
     "the current PyTorch installation.", "torch", "torch/cuda/__init__.py", "library-version"),
    # vllm/lora/worker_manager.py: the adapter against --max-lora-rank
    ("ValueError: LoRA rank 64 is greater than max_lora_rank 16.", "vllm",
     "vllm/lora/worker_manager.py", "config-invalid"),
    # sglang/srt/managers/scheduler.py run_scheduler_process: the scheduler process stopped
    ("[2025-05-16 13:12:16 TP0] Scheduler hit an exception: Traceback (most recent call last):",
     "sglang", "sglang/srt/managers/scheduler.py", "rank-crashed"),
    # NCCL src/init.cc: an environment variable NCCL ignores
    ("node1:77:90 [1] NCCL WARN NCCL_WORK_FIFO_BYTES=3000 is being ignored because it is not a "
     "power of 2.", "nccl", "src/init.cc", "config-invalid"),
    # FlashInfer 0.7.4 flashinfer/gemm/gemm_base.py: the kernel DSL is not installed
    ("ValueError: The cute_dsl backend requires nvidia-cutlass-dsl", "flashinfer",
     "flashinfer/gemm/gemm_base.py", "library-version"),
]


@pytest.mark.parametrize(("line", "project", "file", "category"), _EXPLAIN)
def test_explain_line_names_new_inputs_and_modules(line: str, project: str, file: str,
                                                   category: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "sm120kit", "diagnose", "--json",
                           "--explain-line", line], capture_output=True, text=True, env=ENV,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    top = json.loads(proc.stdout)["matches"][0]
    assert (top["project"], top["file"], top["category"]) == (project, file, category), top


def test_shipped_index_holds_the_new_inputs() -> None:
    meta = MessageIndex(SHIPPED).meta
    got = {(i["project"], i["version"]) for i in meta["inputs"]}
    for v in ("0.5.0", "0.5.5"):
        assert ("vllm", v) in got
    for p, v in (("tgi", "1.4.5"), ("tgi", "3.3.7"), ("huggingface_hub", "2.5.0")):
        assert (p, v) in got
    assert "tgi" not in (meta.get("skipped") or {})
    assert meta["rust_extractor"] == RS_EXTRACTOR, "regenerate: python scripts/build_message_index.py"
    # TGI's Rust sources are read too, not only its Python server
    idx = MessageIndex(SHIPPED)
    files = {r[0] for r in idx.db.execute("SELECT DISTINCT file FROM templates WHERE project = 'tgi'")}
    assert any(f.startswith("launcher/src/") for f in files)
    assert any(f.startswith("server/text_generation_server/") for f in files)
    cover = meta["coverage"]
    assert cover["tgi"]["error"] > 400 and cover["huggingface_hub"]["error"] > 400


def test_rust_extractor_reads_tracing_panic_and_thiserror() -> None:
    src = '''
use thiserror::Error;

#[derive(Debug, Error)]
enum LauncherError {
    #[error("Invalid argument: {0}")]
    ArgumentValidation(String),
    #[error("not enough cuda devices: {0}")]
    NotEnoughCUDADevices(String),
}

fn spawn_shards(rank: usize) {
    tracing::error!("Shard {rank} failed to start");
    warn!(target: "launcher", "Unexpected memory unit {unit:?}, expected MiB");
    tracing::error!("{}", err);
    error!(err);
    panic!(
        "Cannot {} the \\"{{x}}\\" \\
         part", verb
    );
    let s = r#"error!("not a macro")"#;
}

#[cfg(test)]
mod tests {
    fn test_it() { panic!("Expected plain message"); }
}
'''
    got = [(t.kind, t.exc, t.level, t.function, display(t.parts))
           for t in extract_rust(src, "launcher/src/main.rs", "tgi", "3.3.7")]
    assert got == [
        ("raise", "LauncherError", None, "LauncherError", "Invalid argument: {...}"),
        ("raise", "LauncherError", None, "LauncherError", "not enough cuda devices: {...}"),
        ("log", None, "error", "spawn_shards", "Shard {...} failed to start"),
        ("log", None, "warning", "spawn_shards", "Unexpected memory unit {...}, expected MiB"),
        ("log", None, "error", "spawn_shards", "{...}"),
        ("raise", "panic", None, "spawn_shards", 'Cannot {...} the "{x}" part'),
    ]
    assert format_parts("a {{b}} {c:?}") == (("lit", "a {b} "), ("hole", "any"))


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, timeout=60,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})


def test_a_git_input_is_read_at_its_release_tag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                ) -> None:
    """A ``git:owner/name`` input (TGI) is read from the mirror with ``git archive`` at tag
    ``v<version>``, keeping only the members its globs name; the generator indexes both the
    Python and the Rust files of that tree."""
    work = tmp_path / "work"
    (work / "server" / "text_generation_server" / "utils").mkdir(parents=True)
    (work / "launcher" / "src").mkdir(parents=True)
    (work / "docs").mkdir()
    (work / "server" / "text_generation_server" / "utils" / "weights.py").write_text(
        "def get_filename(tensor_name):\n"
        "    raise RuntimeError(f\"weight {tensor_name} does not exist\")\n", encoding="utf-8")
    (work / "launcher" / "src" / "main.rs").write_text(
        'fn spawn_shards() {\n    tracing::error!("Shard {rank} failed to start");\n}\n',
        encoding="utf-8")
    (work / "docs" / "x.py").write_text("raise ValueError('not kept: outside the globs')\n",
                                        encoding="utf-8")
    _git("init", "-q", cwd=work)
    _git("add", "-A", cwd=work)
    _git("commit", "-qm", "r", cwd=work)
    _git("tag", "v9.9.9", cwd=work)
    mirrors = tmp_path / "mirrors"
    (mirrors / "acme+tgi").mkdir(parents=True)
    _git("clone", "-q", "--mirror", str(work), str(mirrors / "acme+tgi" / "repo"), cwd=tmp_path)
    monkeypatch.setenv("SM120KIT_GIT_MIRRORS", str(mirrors))
    src = Source("tgi", "git:acme/tgi", "9.9.9",
                 ("server/text_generation_server/*.py", "launcher/src/*.rs"))
    root = tree(src, tmp_path / "cache")
    kept = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert kept == [".complete", "launcher/src/main.rs",
                    "server/text_generation_server/utils/weights.py"]
    raw = bmi.extract_tree(root, "tgi", "9.9.9", bmi.ExtractCache(None))
    assert sorted(display(t.parts) for t in raw) == ["Shard {...} failed to start",
                                                     "weight {...} does not exist"]
    with pytest.raises(RuntimeError, match="no git mirror"):
        tree(Source("tgi", "git:acme/missing", "1.0.0", ("x",)), tmp_path / "cache")
