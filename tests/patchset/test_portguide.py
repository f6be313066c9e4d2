"""The port guide (what to do by hand after a conflict in forward_mqa) on real vLLM sources.

The release files come from the cached PyPI wheels; the patched ones are those files with the
series applied by ``git am`` (the port engine's own release side). Snippets isolate one rule.
"""

from __future__ import annotations

import pytest

from sm120kit.models.portguide import guide
from sm120kit.models.series import load_series
from sm120kit.patchset.port import series_steps
from tests.support import releases

SM120 = "vllm/v1/attention/backends/mla/flashinfer_mla_sparse_sm120.py"
ALL = {"0003", "0004", "0005"}

pytestmark = pytest.mark.network  # release trees from PyPI wheels


def _release_and_patched(version: str, variant: str) -> tuple[str, str]:
    v = load_series().variant(variant)
    tree = releases.tree("vllm", version)
    files = {f: (tree / f).read_bytes() if (tree / f).is_file() else None
             for f in v.touched_files()}
    after = series_steps(files, v)[-1].after[SM120]
    assert files[SM120] is not None and after is not None
    return files[SM120].decode(), after.decode()


@pytest.mark.parametrize(("version", "variant"), [("0.29.0", "v0.26-0.29"),
                                                   ("0.25.1", "v0.25")])
def test_release_is_all_to_do_and_the_series_all_done(version: str, variant: str) -> None:
    release, patched = _release_and_patched(version, variant)
    before = {s.patch: s for s in guide(release, ALL)}
    assert [before[p].state for p in sorted(ALL)] == ["to-do"] * 3
    assert "triton_filter_and_convert_dcp_index" in before["0003"].what
    assert before["0003"].line > 0 and "line " in before["0005"].what
    assert "seq_lens=None" in before["0004"].what
    after = {s.patch: s.state for s in guide(patched, ALL)}
    assert after == dict.fromkeys(sorted(ALL), "done-in-fork")


def test_constant_rank_and_padded_rows_are_named() -> None:
    fork = '''
class FlashInferMLASparseSM120Impl(Base):
    def forward_mqa(self, q, kv, md, layer):
        n = q.shape[0]
        phys, lens = triton_filter_and_convert_dcp_index(
            md.req, md.bt, top, dcp_size=1, dcp_rank=0, return_valid_counts=True)
        out = decode(query=q, block_tables=phys, seq_lens=lens)
        return out[:n], None
'''
    steps = {s.patch: s for s in guide(fork, ALL)}
    assert steps["0003"].state == "to-do" and steps["0003"].line == 5
    assert "dcp_size=1, dcp_rank=0" in steps["0003"].what
    assert "dcp_rank=self.dcp_rank" in steps["0003"].what
    assert steps["0004"].state == "done-in-fork" and "valid counts of line 5" in steps["0004"].what
    assert "out[:n]" in steps["0005"].what and "q.shape[0] rows" in steps["0005"].what
    assert guide("def broken(:\n", ALL) == [] and guide("x = 1\n", ALL) == []
