"""``validate`` against running servers: the DCP one (``url``) and a DCP-1 reference.

:func:`validate` sends the generated prompts and needle probes greedily to both, compares the
chosen-token logprobs, and returns a :class:`ValidateResult`; it prints nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sm120kit.errors import UserError
from sm120kit.validate.client import Completion, ServerClient
from sm120kit.validate.compare import Diff, diff, forced_diff, judge_diff, token_id
from sm120kit.validate.identity import (
    Identity,
    address_identity,
    check_options,
    counters_tell,
    decide,
    refuse_same,
)
from sm120kit.validate.kv import kv_capacity
from sm120kit.validate.model import (
    Check,
    CheckKind,
    DcpLayout,
    KvCapacity,
    NoiseFloor,
    ServerFacts,
    Thresholds,
    ValidateResult,
    Verdict,
    worst,
)
from sm120kit.validate.probes import Probe, auto_lengths, build_probe
from sm120kit.validate.texts import PROMPT_KINDS, SEED_STRIDE, Tokens, reference_prompt


@dataclass
class ValidateOptions:
    url: str
    reference_url: str | None = None
    model: str | None = None
    dcp: int | None = None
    interleave: int | None = None
    block_size: int | None = None
    layout_source: str = "options"
    lengths: list[int] | None = None  # needle probe lengths (tokens); None = automatic
    prompt_lengths: list[int] | None = None  # reference prompt lengths; None = automatic
    max_tokens: int = 32
    answer_tokens: int = 12
    top_logprobs: int = 5
    timeout: float = 600.0
    seed: int = 0
    thresholds: Thresholds = field(default_factory=Thresholds)
    log_text: str | None = None  # the DCP server's launch log, when validate launched it
    api_key: str | None = None  # Bearer token for --url (vLLM's --api-key)
    reference_api_key: str | None = None  # for --reference-url; None = api_key
    assume_distinct: bool = False  # --assume-distinct: a pass without proof of two servers

    def check(self) -> None:
        check_options(top_logprobs=self.top_logprobs, max_tokens=self.max_tokens,
                      answer_tokens=self.answer_tokens, dcp=self.dcp,
                      interleave=self.interleave, block_size=self.block_size)

    def client(self, url: str, label: str, model: str | None = None) -> ServerClient:
        key = self.reference_api_key if label == "reference" else None
        return ServerClient(url, label=label, timeout=self.timeout, model=model or self.model,
                            api_key=key or self.api_key)


Progress = Callable[[str], None]


def dcp_layout(opts: ValidateOptions, notes: list[str]) -> DcpLayout:
    opts.check()
    dcp = 1 if opts.dcp is None else opts.dcp
    inter = 1 if opts.interleave is None else opts.interleave
    bs = 64 if opts.block_size is None else opts.block_size
    if bs % inter:
        raise UserError(f"block size {bs} is not a multiple of interleave {inter}",
                        hint="vLLM requires cp_kv_cache_interleave_size to divide the block size")
    src = opts.layout_source
    if opts.dcp is None:
        src = "default"
        notes.append("DCP size not given (--dcp): every needle sits on rank 0, which cannot catch "
                     "a rank-mapping error")
    return DcpLayout(dcp=dcp, interleave=inter, block_size=bs, source=src)


def _prompt_lengths(opts: ValidateOptions, max_len: int) -> list[int]:
    if opts.prompt_lengths:
        return opts.prompt_lengths
    cap = max_len - opts.max_tokens - 8
    return sorted({min(256, cap), min(2048, cap // 2)})


def _needle_lengths(opts: ValidateOptions, max_len: int | None, url: str) -> list[int]:
    if opts.lengths:
        return opts.lengths
    if max_len is None:
        raise UserError(f"server {url}/v1/models does not report max_model_len",
                        hint="pass the probe lengths: --lengths 4096,32768")
    return auto_lengths(max_len, opts.answer_tokens)


def _check_lengths(lengths: list[int], max_len: int | None, answer: int) -> None:
    for n in lengths:
        if n < 64:
            raise UserError(f"length {n} is too short for a probe (at least 64 tokens)")
        if max_len is not None and n + answer > max_len:
            raise UserError(f"length {n} + {answer} answer tokens exceeds max_model_len "
                            f"{max_len} (of the server, or of the reference when smaller)")


def _compare(name: str, kind: Any, tokens: int, mine: Completion, ref: Completion | None,
             th: Thresholds, forced: Diff | None = None) -> Check:
    chk = Check(name=name, kind=kind, context_tokens=tokens, verdict=Verdict.PASS,
                dcp_text=mine.text, reference_text=None if ref is None else ref.text)
    if ref is None:
        return chk
    d = diff(mine, ref)
    chk.verdict, chk.reasons = judge_diff(d, th)
    chk.compared_positions = d.compared
    chk.max_abs_diff, chk.mean_abs_diff, chk.max_diff_position = d.max_abs, d.mean_abs, d.max_at
    chk.first_divergence, chk.divergence_margin = d.first_divergence, d.margin
    if forced is not None:
        _add_forced(chk, forced, th)
    return chk


def _add_forced(chk: Check, f: Diff, th: Thresholds) -> None:
    """The teacher-forced comparison: every position of the reference's continuation."""
    v, why = judge_diff(f, th)
    chk.verdict = worst([chk.verdict, v])
    chk.reasons += [f"teacher-forced over the reference's {f.compared} tokens: {r}".replace(
        "greedy tokens diverge at generated token", "top-1 token ids differ at position")
        for r in why]
    chk.forced_positions = f.compared
    chk.compared_positions = f.compared
    chk.max_abs_diff, chk.mean_abs_diff, chk.max_diff_position = f.max_abs, f.mean_abs, f.max_at


def teacher_force(dcp: ServerClient, ref: ServerClient, planned: list[Planned],
                  mine: list[Completion | None], theirs: list[Completion | None],
                  opts: ValidateOptions, say: Progress) -> list[Diff | None]:
    """Where the greedy texts diverge, score the reference's continuation on both servers (one
    request each) and compare every position by token id; elsewhere the greedy answers already
    compared every generated position (None)."""
    out: list[Diff | None] = []
    for p, m, r in zip(planned, mine, theirs, strict=True):
        cont = [token_id(t) for t in r.tokens] if r is not None else []
        if m is None or r is None or m.tokens == r.tokens or None in cont:
            out.append(None)
            continue
        ids = p.ids + [c for c in cont if c is not None]
        say(f"teacher forcing: {p.name} ({len(cont)} tokens)")
        fm = dcp.score(ids, top_logprobs=opts.top_logprobs)
        fr = ref.score(ids, top_logprobs=opts.top_logprobs)
        out.append(forced_diff(fm, fr, len(p.ids), len(ids)))
    return out


def _judge_needle(chk: Check, probe: Probe) -> None:
    chk.needle = probe.placement
    chk.needle_found = probe.needle.found_in(chk.dcp_text)
    if chk.reference_text is not None:
        chk.reference_needle_found = probe.needle.found_in(chk.reference_text)
    ranks = ",".join(map(str, probe.placement.ranks))
    where = f"needle at tokens {probe.placement.start}-{probe.placement.end} (rank {ranks})"
    if chk.needle_found is False and chk.reference_needle_found:
        chk.verdict = Verdict.FAIL
        chk.reasons.insert(0, f"{where}: the reference retrieves it, DCP does not")
    elif chk.needle_found is False:
        chk.verdict = worst([chk.verdict, Verdict.SUSPICIOUS])
        chk.reasons.insert(0, f"{where}: not retrieved (by the reference either)"
                           if chk.reference_needle_found is False else f"{where}: not retrieved")
    if not probe.placement.on_target:
        chk.reasons.append(f"needle meant for rank {probe.placement.target_rank} starts on rank "
                           f"{probe.placement.ranks[0]} (tokenizer drift)")


def server_facts(client: ServerClient) -> ServerFacts:
    model, mml = client.models()
    return ServerFacts(url=client.url, model=model, max_model_len=mml)


def _summary(checks: list[Check], verdict: Verdict, has_ref: bool) -> str:
    bad = [c for c in checks if c.verdict is not Verdict.PASS]
    if not bad and verdict is Verdict.PASS:
        return f"PASS: {len(checks)} checks agree with the reference within noise"
    if not bad:
        return (f"{verdict.value.upper()}: {len(checks)} needle probes retrieved, but without a "
                "reference (--reference-url) the numerics are unproven")
    first = sorted(bad, key=lambda c: c.verdict is not Verdict.FAIL)[0]
    why = first.reasons[0] if first.reasons else ""
    return (f"{verdict.value.upper()}: {len(bad)} of {len(checks)} checks off; "
            f"first: {first.name}: {why}")


@dataclass
class Planned:
    """One prompt to send to both servers (a needle probe when ``probe`` is set)."""

    name: str
    kind: CheckKind
    ids: list[int]  # the prompt, as token ids of the server's tokenizer
    max_tokens: int
    probe: Probe | None = None
    skipped: str | None = None  # why this check could not be built
    length: int | None = None  # the planned length of a skipped check

    @property
    def tokens(self) -> int:
        return self.length if self.length is not None else len(self.ids)


def usable_len(server: ServerFacts, reference: ServerFacts | None) -> int | None:
    """The longest context both servers accept (the reference's limit counts too)."""
    lens = [f.max_model_len for f in (server, reference) if f is not None and f.max_model_len]
    return min(lens) if lens else None


def plan(opts: ValidateOptions, dcp: ServerClient, server: ServerFacts, layout: DcpLayout,
         with_reference: bool, reference: ServerFacts | None = None) -> list[Planned]:
    """The prompts, as token ids of the DCP server's tokenizer (the reference runs the same
    model): a few pieces tokenized once each, joined (see ``texts.Tokens``)."""
    tok = Tokens(lambda text, special: dcp.token_ids(text, special=special))
    mml = usable_len(server, reference)
    plens: list[int] = []
    if with_reference:
        plens = _prompt_lengths(opts, mml) if mml else (opts.prompt_lengths or [256])
        _check_lengths(plens, mml, opts.max_tokens)
    lengths = _needle_lengths(opts, mml, server.url)
    _check_lengths(lengths, mml, opts.answer_tokens)
    # one filler stream serves every probe and prose prompt, each seed at its own offset
    tok.reserve("filler", max(lengths + plens) + SEED_STRIDE * (layout.dcp + 4))
    tok.reserve("prompt", max(plens, default=0))
    out: list[Planned] = []
    for n in plens:
        for i, kind in enumerate(PROMPT_KINDS):
            out.append(Planned(f"{kind}@{n}", "prompt",
                               reference_prompt(kind, opts.seed + i, tok, n), opts.max_tokens))
    for n in lengths:
        for rank in range(layout.dcp + 1):
            tail = rank == layout.dcp  # + the tail probe: rank 0's newest rows
            probe = build_probe(tok, layout, n, 0 if tail else rank, opts.seed + rank,
                                opts.answer_tokens, tail=tail, key_seed=opts.seed)
            if isinstance(probe, str):
                if not tail:  # no tail chunk (DCP 1, interleave shorter than the needle): nothing to add
                    out.append(Planned(f"needle@{n} rank {rank}", "needle", [], 0,
                                       skipped=probe, length=n))
            else:
                out.append(Planned(probe.name, "needle", probe.ids, opts.answer_tokens,
                                   probe=probe))
    return out


def placement_notes(planned: list[Planned], layout: DcpLayout) -> list[str]:
    """Say so when needles cannot sit on one rank (interleave shorter than the needle)."""
    spans = [p.probe.placement for p in planned if p.probe is not None]
    if layout.dcp > 1 and spans and all(len(s.ranks) > 1 for s in spans):
        n = spans[0].end - spans[0].start
        return [f"interleave {layout.interleave} is shorter than the {n}-token needle: every "
                "needle spans several ranks (each probe still starts on its own rank)"]
    return []


def answers(client: ServerClient, planned: list[Planned], opts: ValidateOptions,
            say: Progress) -> list[Completion | None]:
    """Greedy completions of every planned prompt on one server (None for a skipped check)."""
    out: list[Completion | None] = []
    for p in planned:
        if p.skipped:
            out.append(None)
            continue
        say(f"{client.label}: {p.name}")
        out.append(client.complete(p.ids, max_tokens=p.max_tokens,
                                   top_logprobs=opts.top_logprobs))
    return out


def judge(planned: list[Planned], mine: list[Completion | None],
          theirs: list[Completion | None] | None, th: Thresholds,
          forced: list[Diff | None] | None = None) -> list[Check]:
    checks = []
    for i, p in enumerate(planned):
        got = mine[i]
        if p.skipped or got is None:
            checks.append(Check(name=p.name, kind=p.kind, context_tokens=p.tokens,
                                verdict=Verdict.SUSPICIOUS, reasons=[p.skipped or "no answer"]))
            continue
        chk = _compare(p.name, p.kind, p.tokens, got, None if theirs is None else theirs[i], th,
                       forced[i] if forced else None)
        if p.probe is not None:
            _judge_needle(chk, p.probe)
        checks.append(chk)
    return checks


def noise_floor(ref: ServerClient, planned: list[Planned], solo: list[Completion | None],
                opts: ValidateOptions, say: Progress, batch: int = 4) -> NoiseFloor | None:
    """Answer up to ``batch`` of the compared prompts again on the reference, in one request,
    and measure how far those answers are from the same prompts answered alone."""
    idx = [i for i, p in enumerate(planned)
           if p.kind == "prompt" and not p.skipped and solo[i] is not None][:batch]
    if len(idx) < 2:
        return None
    say(f"{ref.label}: noise floor ({len(idx)} prompts in one batch)")
    again = ref.complete_batch([planned[i].ids for i in idx], max_tokens=opts.max_tokens,
                               top_logprobs=opts.top_logprobs)
    diffs = []
    for i, got in zip(idx, again, strict=True):
        first = solo[i]
        assert first is not None
        diffs.append(diff(got, first))
    n = sum(d.compared for d in diffs)
    means = [d.mean_abs * d.compared for d in diffs if d.mean_abs is not None]
    maxes = [d.max_abs for d in diffs if d.max_abs is not None]
    return NoiseFloor(prompts=len(idx), compared=n,
                      mean_abs=sum(means) / n if n else None, max_abs=max(maxes, default=None),
                      flips=sum(d.first_divergence is not None for d in diffs))


def result(server: ServerFacts, reference: ServerFacts | None, layout: DcpLayout,
           opts: ValidateOptions, planned: list[Planned], mine: list[Completion | None],
           theirs: list[Completion | None] | None, floor: NoiseFloor | None,
           notes: list[str], kv: KvCapacity | None,
           forced: list[Diff | None] | None = None,
           identity: Identity | None = None) -> ValidateResult:
    """Judge the answers against the lines (raised to the measured noise floor) and sum up."""
    th = opts.thresholds.widened(floor)
    if floor is not None and th != opts.thresholds:
        floor.widened = True
        notes.append("the reference's own noise floor is above the default lines: lines raised "
                     "to 3x it")
    checks = judge(planned, mine, theirs, th, forced)
    verdict = worst([c.verdict for c in checks])
    if reference is None and verdict is Verdict.PASS:
        verdict = Verdict.SUSPICIOUS
        notes.append("verdict held at 'suspicious': without a reference the numerics are unproven")
    summary = _summary(checks, verdict, reference is not None)
    if identity is not None and identity.status == "unproven":
        if opts.assume_distinct:
            notes.append(f"identity unproven ({identity.how}): taken as two servers "
                         "(--assume-distinct)")
        elif verdict is Verdict.PASS:
            verdict = Verdict.SUSPICIOUS
            summary = (f"SUSPICIOUS: identity unproven: {len(checks)} checks agree, but nothing "
                       f"shows the reference is another server ({identity.how}); pass "
                       "--assume-distinct if you know it is")
    return ValidateResult(server=server, reference=reference, layout=layout,
                          thresholds=th, checks=checks, verdict=verdict, summary=summary,
                          kv_capacity=kv, noise_floor=floor, notes=notes,
                          identity=identity.to_dict() if identity is not None else None)


def validate(opts: ValidateOptions, progress: Progress | None = None) -> ValidateResult:
    """Both servers already running (``opts.url`` and, optionally, ``opts.reference_url``)."""
    say = progress or (lambda _m: None)
    notes: list[str] = []
    identity: Identity | None = None
    opts.check()
    with opts.client(opts.url, "server") as dcp:
        server = server_facts(dcp)
        layout = dcp_layout(opts, notes)
        metrics = dcp.metrics()
        reference = None
        ref_client = None
        if opts.reference_url:
            ref_client = opts.client(opts.reference_url, "reference", opts.model or server.model)
        else:
            notes.append("no reference server (--reference-url): logprobs are not compared and "
                          "only needle retrieval is judged")
        try:
            if ref_client is not None:
                identity = prove_distinct(dcp, ref_client, metrics, opts.dcp)
                reference = server_facts(ref_client)
            planned = plan(opts, dcp, server, layout, ref_client is not None, reference)
            notes += placement_notes(planned, layout)
            counts = announce(planned, dcp, ref_client is not None, say)
            mine = answers(dcp, planned, opts, say)
            theirs = floor = forced = None
            if ref_client is not None:
                theirs = answers(ref_client, planned, opts, say)
                forced = teacher_force(dcp, ref_client, planned, mine, theirs, opts, say)
                floor = noise_floor(ref_client, planned, theirs, opts, say)
        finally:
            if ref_client is not None:
                ref_client.close()
        counts["server"] = dcp.requests
        counts["reference"] = ref_client.requests if ref_client is not None else 0
    kv = kv_capacity(opts.log_text, metrics if layout.dcp > 1 else None)
    res = result(server, reference, layout, opts, planned, mine, theirs, floor, notes, kv, forced,
                 identity)
    res.requests = counts
    return res


def prove_distinct(dcp: ServerClient, ref: ServerClient, metrics: str | None,
                   dcp_size: int | None) -> Identity:
    """Refuse one server behind both URLs (UserError); else how the two are known to be two,
    or that they are not known to be."""
    by_address = address_identity(dcp.url, ref.url)
    ref_metrics = ref.metrics()
    told = refuse_same(dcp.url, ref.url, metrics, ref_metrics, dcp_size, counters_tell(dcp, ref),
                       by_address)
    return decide(by_address, metrics, ref_metrics, told)


def announce(planned: list[Planned], dcp: ServerClient, with_ref: bool,
             say: Progress) -> dict[str, int]:
    """Say what the run will cost before the long requests start."""
    n = sum(not p.skipped for p in planned)
    tok = dcp.requests
    say(f"plan: {len(planned)} checks sized with {tok} requests; now {n} completion requests "
        f"per server" + (" (+1 batched noise-floor request on the reference, +1 per server for "
                          "each check whose greedy texts diverge)" if with_ref else ""))
    return {"planning": tok, "planned_completions_per_server": n}
