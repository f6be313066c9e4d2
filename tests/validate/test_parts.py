"""The pure parts of validate: the comparison and its verdict, needle placement, KV figures."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from sm120kit.cli import run
from sm120kit.errors import UserError
from sm120kit.validate.client import Completion, normalize_url, parse_completion
from sm120kit.validate.compare import diff, judge_diff
from sm120kit.validate.kv import kv_capacity
from sm120kit.validate.model import (
    DcpLayout,
    NeedlePlacement,
    NoiseFloor,
    Thresholds,
    Verdict,
)
from sm120kit.validate.probes import Probe, auto_lengths, build_probe, target_start
from sm120kit.validate.run import Planned, judge, placement_notes
from sm120kit.validate.texts import PROMPT_KINDS, Tokens, make_needle, reference_prompt


def comp(tokens: str, lps: list[float], tops: list[dict[str, float]] | None = None) -> Completion:
    return Completion(text=tokens, tokens=list(tokens), logprobs=lps,
                      top=tops or [{t: lp} for t, lp in zip(tokens, lps, strict=True)])


def test_identical_completions_pass() -> None:
    a = comp("abc", [-0.1, -0.2, -0.3])
    d = diff(a, a)
    assert (d.compared, d.max_abs, d.first_divergence) == (3, 0.0, None)
    assert judge_diff(d, Thresholds()) == (Verdict.PASS, [])


def test_noise_drift_and_error_levels() -> None:
    ref = comp("abcdefgh", [-0.5] * 8)
    th = Thresholds()
    noisy = comp("abcdefgh", [-0.51, -0.49, -0.5, -0.52] * 2)
    assert judge_diff(diff(noisy, ref), th)[0] is Verdict.PASS
    drift = comp("abcdefgh", [-0.53, -0.47, -0.54, -0.46] * 2)  # mean 0.035: between the lines
    v, why = judge_diff(diff(drift, ref), th)
    assert v is Verdict.SUSPICIOUS and why[0].startswith("logprobs drift: mean|Δ| 0.035")
    # the same drift over fewer tokens than the mean needs is not judged by its mean
    assert judge_diff(diff(comp("abcd", drift.logprobs[:4]), comp("abcd", [-0.5] * 4)),
                      th)[0] is Verdict.PASS
    off = comp("abcdefgh", [-1.9] + [-0.5] * 7)  # one token 1.4 nats off
    v, why = judge_diff(diff(off, ref), th)
    assert v is Verdict.FAIL and "max|Δ| 1.400 nats at token 0" in why[0]


def test_divergence_judged_by_reference_margin() -> None:
    th = Thresholds()
    ref_tie = comp("ab", [-0.7, -0.1], [{"a": -0.7, "x": -0.8}, {"b": -0.1}])
    flip = comp("xb", [-0.75, -0.1], [{"x": -0.75, "a": -0.76}, {"b": -0.1}])
    d = diff(flip, ref_tie)
    assert d.first_divergence == 0 and math.isclose(d.margin or 0, 0.1, abs_tol=1e-9)
    assert judge_diff(d, th)[0] is Verdict.PASS  # a near-tie flip is noise
    ref_sure = comp("ab", [-0.01, -0.1], [{"a": -0.01, "x": -4.0}, {"b": -0.1}])
    d = diff(flip, ref_sure)
    v, why = judge_diff(d, th)
    assert v is Verdict.FAIL and "diverge at generated token 0 (reference margin 3.99)" in why[0]
    # DCP's token outside the reference's top-k: the margin is a lower bound, still a failure
    other = comp("zb", [-0.2, -0.1], [{"z": -0.2}, {"b": -0.1}])
    d = diff(other, ref_sure)
    assert d.margin_is_bound and judge_diff(d, th)[0] is Verdict.FAIL
    assert "margin ≥ 3.99" in judge_diff(d, th)[1][0]


@pytest.mark.parametrize("dcp,inter", [(2, 1), (4, 64), (4, 16), (8, 64), (3, 32)])
def test_target_start_lands_on_every_rank(dcp: int, inter: int) -> None:
    lay = DcpLayout(dcp=dcp, interleave=inter, block_size=64, source="options")
    for length in (4 * dcp * inter + 200, 5000, 131072):
        for rank in range(dcp):
            s = target_start(lay, length, rank, needle_tokens=12, tail_tokens=30)
            assert s is not None and lay.rank_of(s) == rank and 2 <= s <= length - 42
            if inter >= 12:  # the whole needle inside one chunk of that rank
                assert {lay.rank_of(t) for t in range(s, s + 12)} == {rank}
    # too short for the last rank's first chunk after the BOS chunk
    assert target_start(lay, dcp * inter // 2, dcp - 1, 12, 30) is None


class CharTokenizer:
    """A character tokenizer with a BOS (id 0), as the test server's; counts its calls."""

    def __init__(self, chars_per_token: int = 1) -> None:
        self.cpt = chars_per_token
        self.calls = 0

    def __call__(self, text: str, special: bool) -> list[int]:
        self.calls += 1
        ids = [1 + (hash(text[i:i + self.cpt]) % 50000) for i in range(0, len(text), self.cpt)]
        return ([0] if special else []) + ids


def _tok(cpt: int = 1) -> Tokens:
    return Tokens(CharTokenizer(cpt))


def test_needle_placement_exact_with_char_tokenizer() -> None:
    lay = DcpLayout(dcp=4, interleave=64, block_size=64, source="options")
    tok = _tok()
    for rank in range(4):
        p = build_probe(tok, lay, 3000, rank, seed=rank, answer_tokens=12)
        assert not isinstance(p, str)
        assert p.placement.ranks == [rank] and p.tokens == len(p.ids) == 3000 - 12
        sentence = tok.piece(p.needle.sentence)
        s = p.placement.start
        assert p.ids[0] == 0 and p.ids[s:s + len(sentence)] == sentence
        assert p.ids[-len(tok.piece(p.needle.question)):] == tok.piece(p.needle.question)


def test_needle_placement_with_coarse_tokenizer_is_exact_too() -> None:
    lay = DcpLayout(dcp=4, interleave=64, block_size=64, source="options")
    tok = _tok(4)  # 4 characters a token: joined ids, not padded text, so still exact
    for rank in range(4):
        p = build_probe(tok, lay, 8000, rank, seed=rank, answer_tokens=12)
        assert not isinstance(p, str) and p.placement.on_target
        assert p.placement.ranks == [rank] and p.tokens == 8000 - 12


def test_short_length_names_the_rank() -> None:
    lay = DcpLayout(dcp=8, interleave=64, block_size=64, source="options")
    assert build_probe(_tok(), lay, 300, 7, seed=0, answer_tokens=12) == (
        "300 tokens are too few to put a needle on rank 7")


def test_prompts_fit_their_budget() -> None:
    for cpt in (1, 4):
        tok = _tok(cpt)
        for kind in PROMPT_KINDS:
            for budget in (200, 1500):
                ids = reference_prompt(kind, 3, tok, budget)
                assert len(ids) == budget and ids[0] == 0, (kind, cpt)


def test_a_stream_denser_or_sparser_than_guessed_grows_to_size() -> None:
    """The first guess is 4 characters a token; a tokenizer far off it in either direction still
    yields the asked length, in a few requests (records: digits, short words)."""
    for cpt in (1, 4, 16):
        tok = _tok(cpt)
        ids = reference_prompt("records", 1, tok, 3000)
        # BOS prefix 2 + the tail 1 + the stream 1, or 2 when the first guess was short
        assert len(ids) == 3000 and tok.calls <= 5, (cpt, tok.calls)
        prose = reference_prompt("prose", 1, tok, 5000)
        assert len(prose) == 5000


def test_a_plan_tokenizes_each_piece_once() -> None:
    """Item 7 of issue 24: fewer /tokenize requests than prompts (was ~9 per prompt). A plan
    of 2 prompt lengths x 3 kinds and 2 needle lengths x (4 ranks + tail)."""
    lay = DcpLayout(dcp=4, interleave=64, block_size=64, source="options")
    for cpt in (1, 4):
        fetch = CharTokenizer(cpt)
        tok = Tokens(fetch)
        tok.reserve("filler", 8000 + 61 * 8)
        tok.reserve("prompt", 1024)
        prompts = [reference_prompt(k, i, tok, n) for n in (256, 1024)
                   for i, k in enumerate(PROMPT_KINDS)]
        probes = [build_probe(tok, lay, n, r % 4, seed=r, answer_tokens=12, tail=r == 4)
                  for n in (2028, 8000) for r in range(5)]
        assert all(not isinstance(p, str) for p in probes) and len(prompts) == 6
        # the BOS prefix 2, filler 1, records 1 + its tail 1, code 1 + its tail 1, the question
        # 1, the tail probe's recall question 1, 5 needle sentences (one code each): 14 for 16
        assert fetch.calls == tok.calls == 14 < len(prompts) + len(probes), (cpt, fetch.calls)


def test_auto_lengths() -> None:
    assert auto_lengths(2048, 12) == [1024, 2028]
    assert auto_lengths(202752, 12) == [1024, 4096, 16384, 65536, 202732]


def test_kv_capacity_from_log_and_metrics() -> None:
    # vLLM 0.34 log lines (field-notes §5) with the DCP-4 figures of field-notes §2
    # (github.com/hermia-ai/glm-5.2-sm120-stock-vllm, measured 2026-07-15)
    log = ("(Worker_TP0 pid=81) INFO [gpu_worker.py:298] Available KV cache memory: 6.96 GiB\n"
           "(EngineCore pid=70) INFO [kv_cache_utils.py:1087] GPU KV cache size: 554,759 tokens, "
           "Maximum concurrency for 250,000 tokens per request: 2.22x\n")
    cap = kv_capacity(log, None)
    assert cap is not None and cap.source == "log"
    assert (cap.available_kv_gib, cap.gpu_kv_cache_tokens) == (6.96, 554759)
    assert (cap.max_concurrency_len, cap.max_concurrency) == (250000, 2.22)
    metrics = ('# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n'
               'vllm:cache_config_info{block_size="64",cache_dtype="fp8_ds_mla",'
               'num_gpu_blocks="2167"} 1.0\n')
    cap = kv_capacity("no kv lines here", metrics)
    assert cap is not None and (cap.source, cap.block_size, cap.num_gpu_blocks) == ("metrics", 64, 2167)
    assert kv_capacity(None, "vllm:num_requests_running 0\n") is None


def test_url_and_answer_parsing() -> None:
    assert normalize_url("127.0.0.1:8000/v1/") == "http://127.0.0.1:8000"
    with pytest.raises(UserError, match="answer has no choices"):
        parse_completion({"error": "x"}, "server u")
    with pytest.raises(UserError, match="logprobs lists of different lengths"):
        parse_completion({"choices": [{"text": "a", "logprobs": {
            "tokens": ["a", "b"], "token_logprobs": [-1.0]}}]}, "server u")


def test_needle_verdicts() -> None:
    needle = make_needle(1)
    probe = Probe(name="needle@4096 rank 2", ids=[0] * 4000, tokens=4000, needle=needle,
                  placement=NeedlePlacement(target_rank=2, start=2100, end=2114, ranks=[2]))
    planned = [Planned(probe.name, "needle", probe.ids, 4, probe=probe)]
    hit = comp(f" {needle.code}", [-0.01] * 5)
    miss = comp(" 1234", [-0.01] * 5)
    th = Thresholds()
    # found by both: pass; found by the reference only: fail, naming tokens and rank
    assert judge(planned, [hit], [hit], th)[0].verdict is Verdict.PASS
    c = judge(planned, [miss], [hit], th)[0]
    assert c.verdict is Verdict.FAIL
    assert c.reasons[0] == ("needle at tokens 2100-2114 (rank 2): the reference retrieves it, "
                            "DCP does not")
    # missed by both (the model cannot at this length): suspicious, not a DCP failure
    c = judge(planned, [miss], [miss], th)[0]
    assert c.verdict is Verdict.SUSPICIOUS and "(by the reference either)" in c.reasons[0]
    # no reference: retrieval alone
    assert judge(planned, [hit], None, th)[0].verdict is Verdict.PASS
    skipped = [Planned("needle@300 rank 7", "needle", [], 0, skipped="too few tokens",
                       length=300)]
    c = judge(skipped, [None], [None], th)[0]
    assert c.verdict is Verdict.SUSPICIOUS and c.reasons == ["too few tokens"]


def test_core_imports_without_httpx_and_cli_says_how_to_install(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code = ("import sys; sys.modules['httpx'] = None; import sm120kit.validate, "
            "sm120kit.validate.launch, sm120kit.cli.validate; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
    monkeypatch.setitem(sys.modules, "httpx", None)  # import httpx -> ImportError
    assert run(["validate", "--url", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["error: sm120kit validate needs httpx, which is not installed",
                   "hint: install the HTTP client: pip install 'sm120kit[validate]' (httpx)"]


def test_interleave_1_needles_span_ranks_and_say_so() -> None:
    lay = DcpLayout(dcp=4, interleave=1, block_size=64, source="options")
    tok = _tok()
    planned = []
    for rank in range(4):
        p = build_probe(tok, lay, 2000, rank, seed=rank, answer_tokens=12)
        assert not isinstance(p, str)
        assert p.placement.ranks[0] == rank and sorted(p.placement.ranks) == [0, 1, 2, 3]
        planned.append(Planned(p.name, "needle", p.ids, 12, probe=p))
    assert placement_notes(planned, lay)[0].startswith(
        "interleave 1 is shorter than the 45-token needle: every needle spans several ranks")


def test_thresholds_widen_to_a_noisy_box_never_narrow() -> None:
    th = Thresholds()
    quiet = NoiseFloor(prompts=3, compared=48, mean_abs=0.0004, max_abs=0.002, flips=0)
    assert th.widened(quiet) == th and th.widened(None) == th
    noisy = NoiseFloor(prompts=3, compared=48, mean_abs=0.03, max_abs=0.4, flips=1)
    w = th.widened(noisy)
    assert (w.pass_mean, w.pass_max) == pytest.approx((0.09, 1.2))
    assert (w.fail_mean, w.fail_max) == pytest.approx((0.225, 4.8))
    assert w.sure_margin == th.sure_margin
