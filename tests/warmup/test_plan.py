"""The pure planner: ownership formulas, warmup prompt length, per-rank tables, serve args."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sm120kit.errors import UserError
from sm120kit.models import dcp as P
from sm120kit.models.serve_args import parse_human_int, parse_serve_args
from tests.support.paths import PATCHES


def test_ownership_hand_cases() -> None:
    # I = 1: round robin
    assert [P.owner(t, 4) for t in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert [P.local_index(t, 4) for t in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    # I = 2, N = 2: tokens 0,1 -> r0; 2,3 -> r1; 4,5 -> r0 (local 2,3)
    assert [P.owner(t, 2, 2) for t in range(6)] == [0, 0, 1, 1, 0, 0]
    assert [P.local_index(t, 2, 2) for t in range(6)] == [0, 1, 0, 1, 2, 3]
    # I = 64, N = 8: token 64*8 + 5 is back on rank 0, local 64 + 5
    assert P.owner(517, 8, 64) == 0 and P.local_index(517, 8, 64) == 69
    assert P.owner(130, 8, 64) == 2 and P.local_index(130, 8, 64) == 2


def test_local_len_hand_cases() -> None:
    # the unpatched decode step: S = 2 + 1 = 3
    assert [P.local_len(3, r, 4) for r in range(4)] == [1, 1, 1, 0]
    assert [P.local_len(3, r, 8) for r in range(8)] == [1, 1, 1, 0, 0, 0, 0, 0]
    assert [P.local_len(3, r, 4, 2) for r in range(4)] == [2, 1, 0, 0]
    assert [P.local_len(3, r, 2, 64) for r in range(2)] == [3, 0]
    # one full virtual block: every rank exactly B (section F check)
    for n, b, i in [(2, 64, 1), (4, 64, 1), (8, 64, 1), (8, 64, 64), (4, 128, 8)]:
        assert [P.local_len(n * b, r, n, i) for r in range(n)] == [b] * n
        assert P.local_len(n * b - 1, n - 1, n, i) == b - 1
    assert [P.local_len(257, r, 4) for r in range(4)] == [65, 64, 64, 64]


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 16),
    i_exp=st.integers(0, 7),
    s=st.integers(0, 5000),
)
def test_local_len_sums_and_matches_owner(n: int, i_exp: int, s: int) -> None:
    i = 2**i_exp
    lens = [P.local_len(s, r, n, i) for r in range(n)]
    assert sum(lens) == s
    if s <= 1500:
        counts = [0] * n
        for t in range(s):
            counts[P.owner(t, n, i)] += 1
        assert counts == lens


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 16), i_exp=st.integers(0, 6), t=st.integers(0, 100_000))
def test_local_index_inverse(n: int, i_exp: int, t: int) -> None:
    i = 2**i_exp
    r, li = P.owner(t, n, i), P.local_index(t, n, i)
    assert P.global_index(li, r, n, i) == t
    # the local index is dense: it is the count of earlier tokens on the same rank
    assert li == P.local_len(t, r, n, i)


def test_warmup_prompt_len() -> None:
    assert P.warmup_decode_prompt_len(1, 64) == 2
    assert P.warmup_decode_prompt_len(1, 64, max_model_len=10) == 2
    assert P.warmup_decode_prompt_len(2, 64) == 128
    assert P.warmup_decode_prompt_len(8, 64) == 512
    assert P.warmup_decode_prompt_len(4, 256) == 1024
    assert P.warmup_decode_prompt_len(8, 64, max_model_len=300) == 298  # L + q + 1 <= 300
    assert P.warmup_decode_prompt_len(8, 64, max_model_len=300, decode_query_len=4) == 295
    assert P.warmup_decode_prompt_len(8, 64, max_num_batched_tokens=256) == 256
    assert P.warmup_decode_prompt_len(8, 64, max_model_len=2) == 2  # never below upstream's 2
    with pytest.raises(ValueError):
        P.warmup_decode_prompt_len(0, 64)


def test_plan_table_dcp8() -> None:
    wp = P.plan_warmup(8, 64)
    assert wp.fixed_prompt_len == 512 and wp.unpatched_prompt_len == 2
    assert [r.decode_tokens for r in wp.fixed.ranks] == [65] + [64] * 7
    assert [r.prefill_tokens for r in wp.fixed.ranks] == [64] * 8
    assert [r.prefill_blocks for r in wp.fixed.ranks] == [1] * 8
    assert [r.decode_blocks for r in wp.fixed.ranks] == [2] + [1] * 7
    assert [r.full_blocks for r in wp.fixed.ranks] == [1] * 8
    assert wp.fixed.zero_local_kv_ranks == []
    assert wp.unpatched.zero_local_kv_ranks == [3, 4, 5, 6, 7]
    assert wp.unpatched.zero_local_kv_prefill_ranks == [2, 3, 4, 5, 6, 7]
    assert not wp.unpatched.symmetric
    assert wp.status == "ok"
    d = wp.to_dict()
    assert d["fixed_prompt_len"] == 512 and d["unpatched"]["zero_local_kv_ranks"] == [3, 4, 5, 6, 7]


def test_plan_interleave_and_mtp() -> None:
    wp = P.plan_warmup(4, 64, interleave=64, mtp=2)
    assert wp.decode_query_len == 3
    assert wp.fixed_prompt_len == 256
    assert [r.decode_tokens for r in wp.fixed.ranks] == [67, 64, 64, 64]
    assert [r.decode_tokens for r in wp.unpatched.ranks] == [5, 0, 0, 0]
    assert any("MTP" in n for n in wp.notes)
    clamped = P.plan_warmup(8, 64, max_model_len=100)
    assert clamped.fixed_prompt_len == 98
    assert clamped.fixed.zero_local_kv_ranks == []  # 99 tokens over 8 ranks: all >= 12
    assert any("clamped" in n for n in clamped.notes)
    with pytest.raises(ValueError):
        P.plan_warmup(2, 64, interleave=48)


def test_parse_serve_args_full_line() -> None:
    sa = parse_serve_args(
        [
            "--",
            "vllm",
            "serve",
            "zai-org/GLM-5",
            "--trust-remote-code",
            "-tp",
            "8",
            "--decode-context-parallel-size=8",
            "--block_size",
            "64",
            "--cp-kv-cache-interleave-size",
            "1",
            "--max-num-seqs",
            "16",
            "--max-model-len",
            "128k",
            "--max-num-batched-tokens",
            "8K",
            "--speculative-config",
            '{"method": "mtp", "num_speculative_tokens": 3}',
            "--kv-cache-dtype",
            "fp8_ds_mla",
            "--gpu-memory-utilization",
            "0.9",
        ]
    )
    assert sa.model == "zai-org/GLM-5"
    assert (sa.tensor_parallel_size, sa.dcp, sa.block_size, sa.interleave) == (8, 8, 64, 1)
    assert (sa.max_num_seqs, sa.max_model_len, sa.max_num_batched_tokens) == (16, 128_000, 8192)
    assert sa.num_speculative_tokens == 3
    assert sa.kv_cache_dtype == "fp8_ds_mla"
    assert sa.unknown == [] and sa.trust_remote_code and sa.gpu_memory_utilization == 0.9


def test_parse_serve_args_variants() -> None:
    sa = parse_serve_args(
        [
            "m",
            "-dcp",
            "4",
            "--dcp-kv-cache-interleave-size",
            "16",
            "-sc.num_speculative_tokens",
            "2",
        ]
    )
    assert sa.dcp == 4 and sa.interleave == 16 and sa.num_speculative_tokens == 2
    assert sa.block_size is None and sa.effective_block_size == 64
    sa2 = parse_serve_args(
        ["m", "--cp-kv-cache-interleave-size", "8", "--dcp-kv-cache-interleave-size", "16"]
    )
    assert sa2.interleave == 8
    assert parse_serve_args([]).dcp == 1
    assert parse_human_int("25.6k") == 25600 and parse_human_int("2M") == 2 * 2**20
    with pytest.raises(UserError):
        parse_serve_args(["m", "-tp", "eight"])
    with pytest.raises(UserError):
        parse_serve_args(["m", "--speculative-config", "{bad"])
    with pytest.raises(UserError):
        parse_serve_args(["m", "-tp"])


def _patch_helpers() -> list[tuple[str, str]]:
    """(variant, source of dcp_decode_prompt_len) from every warmup patch of the series."""
    root = PATCHES
    out = []
    for patch in sorted(root.glob("*/*warmup*.patch")):
        added = [
            line[1:]
            for line in patch.read_text().splitlines()
            if line.startswith("+") and not line.startswith("+++")
        ]
        src = "\n".join(added)
        start = src.find("def dcp_decode_prompt_len(")
        if start < 0:
            continue
        end = src.find("\n\n\n", start)
        out.append((patch.parent.name, src[start : end if end > 0 else None]))
    return out


def test_patch_series_warmup_hunk_uses_the_same_formula() -> None:
    """The patch's warmup hunk and the planner agree on every configuration (one formula)."""
    helpers = _patch_helpers()
    if not helpers:
        pytest.skip("no warmup patch with dcp_decode_prompt_len in patches/")
    for variant, src in helpers:
        ns: dict[str, object] = {}
        exec(compile(src, f"patches/{variant}/warmup", "exec"), ns)
        fn = ns["dcp_decode_prompt_len"]
        assert callable(fn)
        for n in (1, 2, 3, 4, 8, 16):
            for b in (64, 128, 256):
                for mml in (3, 10, 200, 513, 514, 100_000):
                    for mnbt in (1, 64, 512, 8192):
                        for q in (1, 2, 4):
                            got = fn(n, b, max_model_len=mml, max_num_batched_tokens=mnbt,
                                     decode_query_len=q)  # fmt: skip
                            exp = P.warmup_decode_prompt_len(
                                n, b, max_model_len=mml, max_num_batched_tokens=mnbt,
                                decode_query_len=q,
                            )  # fmt: skip
                            assert got == exp, (variant, n, b, mml, mnbt, q)


def test_planner_and_supervisor_never_import_torch() -> None:
    """models.dcp/models.serve_args/warmup.config are pure; a CPU reference run keeps torch out of the supervisor."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import sm120kit.models.dcp, sm120kit.models.serve_args, sm120kit.warmup.config\n"
        "import sm120kit.cli.warmup\n"
        "assert 'torch' not in sys.modules, 'planner imported torch'\n"
        "from sm120kit.warmup.config import RunConfig\n"
        "from sm120kit.warmup.runner import run_warmup\n"
        "res = run_warmup(RunConfig(dcp=2))\n"
        "assert res.passed, res.message\n"
        "assert 'torch' not in sys.modules, 'supervisor imported torch'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
