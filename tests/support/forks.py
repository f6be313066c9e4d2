"""Forks with real drift, made from real vLLM releases (the cached PyPI wheels).

``make_fork`` builds a git repository whose history does *not* contain the release's blobs:
the first commit imports the release's ``vllm/`` tree with a fork header line added to every file
the series touches (so ``git am -3`` has no preimage to fall back on), then one commit applies the
drift under test. Nothing is mocked.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from sm120kit.models.series import load_series
from sm120kit.patchset.release import release_tree
from tests.support import gitrepo
from tests.support.paths import SM, WS, WU

__all__ = ["SM", "WS", "WU", "blob_present", "drift_patched_lines", "drift_renamed_context",
           "drift_unrelated", "edit", "git", "make_fork", "touched_files"]


def git(cwd: Path, *args: str, check: bool = True) -> str:
    """``git`` as the fork's maintainer (fixed identity and dates)."""
    return gitrepo.git(cwd, *args, check=check, identity=gitrepo.FORK_IDENTITY)


def edit(root: Path, rel: str, old: str, new: str, count: int = 1) -> None:
    """Replace ``old`` by ``new`` in ``root/rel``."""
    gitrepo.edit(root / rel, old, new, count)


def touched_files() -> list[str]:
    series = load_series()
    out: dict[str, None] = {}
    for v in series.variants.values():
        for f in v.touched_files():
            out.setdefault(f, None)
    return list(out)


def make_fork(path: Path, version: str, drift: Callable[[Path], None] | None,
              branch: str = "main") -> Path:
    """A fork of vLLM ``version`` at ``path`` (branch ``branch``) with ``drift`` committed."""
    tree = release_tree("vllm", version)
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", branch)
    shutil.copytree(tree / "vllm", path / "vllm")
    for rel in touched_files():
        p = path / rel
        if p.is_file():
            p.write_text(f"# example-lab fork of vLLM {version}\n" + p.read_text())
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", f"fork: import vLLM {version}")
    if drift is not None:
        drift(path)
        git(path, "commit", "-q", "-am", "fork: local changes")
    return path


def blob_present(repo: Path, data: bytes) -> bool:
    sha = subprocess.run(["git", "hash-object", "--stdin"], input=data, capture_output=True,
                         cwd=repo, check=True).stdout.decode().strip()
    return subprocess.run(["git", "cat-file", "-e", sha], cwd=repo).returncode == 0


def drift_unrelated(root: Path) -> None:
    """(a) unrelated imports and methods in the patched files."""
    edit(root, SM, "import torch\n", "import functools\nimport torch\n")
    # an import right below the import block patch 3 extends, and a method right above the
    # method patch 5 edits: both sit in those hunks' context, so `git am` cannot apply them
    edit(root, SM, ")\n\nif TYPE_CHECKING:",
         ")\nfrom vllm.logger import init_logger  # fork\n\nif TYPE_CHECKING:")
    edit(root, SM, "\n    def _run_mqa_kernel(",
         "\n    def fork_debug_name(self) -> str:\n"
         "        return f\"{type(self).__name__}@{_fork_build_tag()}\"\n"
         "\n    def _run_mqa_kernel(")
    edit(root, SM, '    return "pow2_fp32"\n',
         '    return "pow2_fp32"\n\n\n@functools.cache\ndef _fork_build_tag() -> str:\n'
         '    init_logger(__name__).debug("fork build")\n    return "example-lab"\n')
    edit(root, WS, "import torch\n", "import torch\nimport itertools  # fork\n")
    edit(root, WS, "\n\n\nclass FlashInferMLASparseTRTLLMBackend(",
         "\n\n    @staticmethod\n    def fork_backend_note() -> str:\n"
         "        return next(itertools.repeat(\"fork\"))\n"
         "\n\nclass FlashInferMLASparseTRTLLMBackend(")
    with open(root / WU, "a") as fh:
        fh.write("\n\ndef fork_warmup_banner() -> str:\n    return \"example-lab warmup\"\n")


def drift_renamed_context(root: Path) -> None:
    """(b) a variable renamed inside a context line of a patch (and its uses)."""
    p = root / WU
    text = p.read_text()
    # `prefill_req_id` sits in the context of the warmup hunk that sets the DCP prompt length
    assert "prefill_req_id" in text
    p.write_text(text.replace("prefill_req_id", "prefill_request_id"))


def drift_patched_lines(root: Path) -> None:
    """(c) the exact lines a patch edits are changed."""
    edit(root, SM, "(num_actual_toks, self.num_heads, self.kv_lora_rank)",
         "(num_actual_toks, self.num_heads, self.kv_lora_rank)  # fork: fixed heads")
