"""Compare a DCP server's greedy completion with the reference's, and judge it.

Positions are compared up to the first greedy divergence: after it the two servers continue
different texts and their logprobs no longer measure the same thing. At the divergence the
reference's own top-k says how sure it was (top-1 minus the logprob it gave DCP's token); a flip
where it was not sure is a near-tie (noise), a flip where it was sure is an error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sm120kit.validate.client import Completion
from sm120kit.validate.model import Thresholds, Verdict


@dataclass
class Diff:
    compared: int
    max_abs: float | None
    mean_abs: float | None
    max_at: int | None
    first_divergence: int | None
    margin: float | None  # reference top-1 minus its logprob of DCP's token (a lower bound when
    margin_is_bound: bool  # DCP's token is outside the reference's top-k)


def diff(dcp: Completion, ref: Completion) -> Diff:
    n = min(len(dcp.tokens), len(ref.tokens))
    first = next((i for i in range(n) if dcp.tokens[i] != ref.tokens[i]), None)
    upto = n if first is None else first
    at = [i for i in range(upto)
          if math.isfinite(dcp.logprobs[i]) and math.isfinite(ref.logprobs[i])]
    deltas = [abs(dcp.logprobs[i] - ref.logprobs[i]) for i in at]
    margin: float | None = None
    bound = False
    if first is not None:
        top = ref.top[first] if first < len(ref.top) else {}
        mine = top.get(dcp.tokens[first])
        if mine is None:
            bound = True
            mine = min(top.values()) if top else None
        margin = None if mine is None else max(ref.logprobs[first] - mine, 0.0)
        # the logprob DCP gave the reference's token, when it is in DCP's top-k
        theirs = dcp.top[first].get(ref.tokens[first]) if first < len(dcp.top) else None
        if theirs is not None and math.isfinite(ref.logprobs[first]):
            deltas.append(abs(theirs - ref.logprobs[first]))
            at.append(first)
    mx = max(deltas) if deltas else None
    return Diff(
        compared=len(deltas),
        max_abs=mx,
        mean_abs=sum(deltas) / len(deltas) if deltas else None,
        max_at=at[deltas.index(mx)] if mx is not None else None,
        first_divergence=first,
        margin=margin,
        margin_is_bound=bound,
    )


def token_id(token: str) -> int | None:
    """``token_id:N`` (vLLM's return_tokens_as_token_ids) as N."""
    head, _, tail = token.partition(":")
    return int(tail) if head == "token_id" and tail.lstrip("-").isdigit() else None


def _argmax(top: dict[str, float]) -> str | None:
    return max(top, key=lambda t: top[t]) if top else None


def forced_diff(dcp: Completion, ref: Completion, start: int, end: int) -> Diff:
    """Both servers scored the same tokens (teacher forcing): at every position in
    ``[start, end)`` compare the forced token's logprob, and each server's own top-1 token id;
    where they differ, the reference's margin over DCP's choice says near-tie or error."""
    n = min(end, len(dcp.logprobs), len(ref.logprobs))
    at = [i for i in range(start, n)
          if math.isfinite(dcp.logprobs[i]) and math.isfinite(ref.logprobs[i])]
    deltas = [abs(dcp.logprobs[i] - ref.logprobs[i]) for i in at]
    first = margin = None
    bound = False
    for i in at:
        a = _argmax(dcp.top[i]) if i < len(dcp.top) else None
        b = _argmax(ref.top[i]) if i < len(ref.top) else None
        if a is not None and b is not None and a != b:
            rtop = ref.top[i]
            mine = rtop.get(a)
            bound = mine is None
            mine = min(rtop.values()) if mine is None else mine
            first, margin = i - start, max(rtop[b] - mine, 0.0)
            break
    mx = max(deltas) if deltas else None
    return Diff(compared=len(deltas), max_abs=mx,
                mean_abs=sum(deltas) / len(deltas) if deltas else None,
                max_at=at[deltas.index(mx)] - start if mx is not None else None,
                first_divergence=first, margin=margin, margin_is_bound=bound)


def judge_diff(d: Diff, th: Thresholds) -> tuple[Verdict, list[str]]:
    """Verdict and reasons from the numbers alone (needle retrieval is judged separately)."""
    fails: list[str] = []
    warns: list[str] = []
    if d.mean_abs is not None and d.max_abs is not None:
        stats = f"mean|Δ| {d.mean_abs:.3f}, max|Δ| {d.max_abs:.3f} nats at token {d.max_at}"
        mean = d.mean_abs if d.compared >= th.mean_min_positions else 0.0
        if mean > th.fail_mean or d.max_abs > th.fail_max:
            fails.append(f"logprobs off: {stats}")
        elif mean > th.pass_mean or d.max_abs > th.pass_max:
            warns.append(f"logprobs drift: {stats}")
    if d.first_divergence is not None:
        m = "unknown" if d.margin is None else f"{'≥ ' if d.margin_is_bound else ''}{d.margin:.2f}"
        where = f"greedy tokens diverge at generated token {d.first_divergence} (reference margin {m})"
        if d.margin is None or d.margin >= th.sure_margin:
            fails.append(where)
        elif d.margin >= th.tie_margin:
            warns.append(where)
    if fails:
        return Verdict.FAIL, fails + warns
    if warns:
        return Verdict.SUSPICIOUS, warns
    return Verdict.PASS, []
