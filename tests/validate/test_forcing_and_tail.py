"""The teacher-forced comparison and the tail probe's placement, as pure functions (numbers from
the interleave error model in docs/validate.md)."""

from __future__ import annotations

from sm120kit.validate.client import Completion
from sm120kit.validate.compare import forced_diff, judge_diff, token_id
from sm120kit.validate.model import DcpLayout, Thresholds, Verdict
from sm120kit.validate.probes import tail_start


def _scored(vals: list[float | None], tops: list[dict[str, float] | None]) -> Completion:
    toks = [f"token_id:{i}" for i in range(len(vals))]
    return Completion(text="", tokens=toks,
                      logprobs=[float("nan") if v is None else v for v in vals],
                      top=[t or {} for t in tops])


def test_token_id() -> None:
    assert token_id("token_id:42") == 42 and token_id("token_id:x") is None
    assert token_id("42") is None


def test_forced_diff_compares_every_continuation_position() -> None:
    # prompt of 3 tokens (the first has no logprob), continuation of 3
    ref = _scored([None, -1.0, -1.0, -0.1, -0.2, -0.3],
                  [None, {"a": -1.0}, {"a": -1.0}, {"x": -0.1, "y": -3.0},
                   {"y": -0.2, "x": -2.5}, {"z": -0.3}])
    same = forced_diff(ref, ref, 3, 6)
    assert same.compared == 3 and same.max_abs == 0.0 and same.first_divergence is None
    assert judge_diff(same, Thresholds())[0] is Verdict.PASS
    # DCP prefers another token at continuation position 1, where the reference was sure
    dcp = _scored([None, -1.0, -1.0, -0.1, -3.2, -0.3],
                  [None, {"a": -1.0}, {"a": -1.0}, {"x": -0.1, "y": -3.0},
                   {"x": -0.05, "y": -3.2}, {"z": -0.3}])
    d = forced_diff(dcp, ref, 3, 6)
    assert d.compared == 3 and abs(d.max_abs - 3.0) < 1e-9 and d.max_at == 1
    assert d.first_divergence == 1 and abs(d.margin - 2.3) < 1e-9 and not d.margin_is_bound
    verdict, why = judge_diff(d, Thresholds())
    assert verdict is Verdict.FAIL and any("diverge at generated token 1" in w for w in why)


def test_tail_start_is_in_rank_0s_newest_rows() -> None:
    lay = DcpLayout(dcp=4, interleave=64, block_size=64, source="options")
    s = tail_start(lay, 1024, needle_tokens=15, tail_tokens=30)
    assert s is not None
    chunk = s // 64
    assert lay.rank_of(s) == 0 and lay.rank_of(s + 14) == 0 and chunk % 4 == 0
    assert s + 15 == chunk * 64 + 62  # ends 2 tokens before the chunk does
    # the question and answer fit after the chunk, and no later chunk of rank 0 would
    assert (chunk + 1) * 64 + 30 <= 1024 < (chunk + 5) * 64 + 30
    # rank 0 converting ids with interleave 1 reads ceil(T/4) local rows; the needle's local
    # rows lie beyond that for the whole answer (T up to the chunk end + 30 tokens)
    local = (chunk // 4) * 64 + (s % 64)
    assert local >= -(-((chunk + 1) * 64 + 30) // 4)
    assert tail_start(lay, 300, 15, 30) is None  # no full round before the chunk
    assert tail_start(DcpLayout(1, 64, 64, "options"), 1024, 15, 30) is None
    assert tail_start(DcpLayout(4, 16, 64, "options"), 1024, 15, 30) is None  # needle > chunk


def test_tail_probe_code_is_hidden_from_rank_0_under_interleave_1() -> None:
    """Issue 31: at DCP 2 the long question pushed the needle out of rank 0's newest rows (a
    dense top-k read with interleave 1 still saw it: the wrong interleave passed). The tail probe
    asks with the short recall question, so the code's rows lie beyond what rank 0 reads under
    interleave 1 for every DCP size and interleave that has a tail chunk, with a character
    tokenizer (the test server's) and a coarser one."""
    from sm120kit.validate.probes import build_probe, rows_read, tail_hidden
    from sm120kit.validate.texts import Tokens
    from tests.validate.test_parts import CharTokenizer

    placed = 0
    for cpt in (1, 4):
        for n in (2, 4, 8):
            for inter in (64, 128):
                for length in (1004, 2036, 8180):
                    tok = Tokens(CharTokenizer(cpt))
                    lay = DcpLayout(dcp=n, interleave=inter, block_size=128, source="options")
                    p = build_probe(tok, lay, length, 0, seed=n, answer_tokens=12, tail=True)
                    if isinstance(p, str):
                        continue
                    placed += 1
                    code = len(tok.piece(p.needle.code + "."))
                    rows = range(p.placement.end - code, p.placement.end - 1)
                    # every answer step that writes the code (prompt + 0..3 generated tokens)
                    assert all(tail_hidden(lay, t, p.tokens + k) for k in range(4) for t in rows), (
                        cpt, n, inter, length)
                    # and the right layout reads them (the probe tests the error, not the setup)
                    assert not any(tail_hidden(lay, t, p.tokens, inter) for t in rows)
    assert placed >= 30
    # rows_read: interleave 64, DCP 2, 200 tokens: rank 0 owns 0-63 and 128-191, rank 1 64-127+8
    lay = DcpLayout(dcp=2, interleave=64, block_size=64, source="options")
    assert rows_read(lay, 0, 200, 64) == 128 and rows_read(lay, 1, 200, 64) == 72
    assert rows_read(lay, 0, 200, 1) == rows_read(lay, 1, 200, 1) == 100
