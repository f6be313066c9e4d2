"""Long-context needle probes placed so that the needle's KV lands on a chosen DCP rank.

Token ``t`` of a request lives on rank ``(t // I) % N`` (``I`` = interleave, ``N`` = DCP size).
For each probe length and each rank we pick an interleave chunk owned by that rank near the middle
of the context (past the first KV blocks, so block-table translation is exercised too), put the
needle inside it. Prompts are token ids joined from pieces the server tokenized
(:class:`~sm120kit.validate.texts.Tokens`), so the needle sits exactly where it was placed.
"""

from __future__ import annotations

from dataclasses import dataclass

from sm120kit.validate.model import DcpLayout, NeedlePlacement
from sm120kit.validate.texts import Needle, Tokens, make_needle


@dataclass
class Probe:
    name: str
    ids: list[int]
    tokens: int
    needle: Needle
    placement: NeedlePlacement


def owners(layout: DcpLayout, start: int, end: int) -> list[int]:
    seen: list[int] = []
    for t in range(start, end):
        r = layout.rank_of(t)
        if r not in seen:
            seen.append(r)
        if len(seen) == layout.dcp:
            break
    return seen


def target_start(layout: DcpLayout, length: int, rank: int, needle_tokens: int,
                 tail_tokens: int, depth: float = 0.5) -> int | None:
    """First token of the needle: centred in a chunk of ``rank`` near ``depth``; None if a prompt
    of ``length`` tokens has no such chunk before its last ``tail_tokens``."""
    i, n = layout.interleave, layout.dcp
    pad = max(0, (i - needle_tokens) // 2)
    c = int(length * depth) // i
    c += (rank - c % n) % n
    while c >= 0 and c * i + pad + needle_tokens + tail_tokens > length:
        c -= n
    if c < 0 or (c == 0 and pad < 2):
        # chunk 0 holds the BOS: keep at least a couple of filler tokens ahead of the needle
        c += n
        if c * i + pad + needle_tokens + tail_tokens > length:
            return None
    return c * i + pad


def tail_start(layout: DcpLayout, length: int, needle_tokens: int,
               tail_tokens: int) -> int | None:
    """First token of a needle at the end of rank 0's last interleave chunk that still leaves
    ``tail_tokens`` (question and answer) in the prompt: the newest rows of rank 0, the rows a
    rank misses when the top-k ids are converted with a smaller interleave (see
    docs/validate.md, "error models"); None if the length has no such chunk."""
    i, n = layout.interleave, layout.dcp
    if n < 2 or i < needle_tokens + 4:  # the needle must fit in one chunk
        return None
    c = (length - tail_tokens - i) // i
    c -= c % n  # rank 0 owns chunks 0, n, 2n, ...
    if c < n:
        return None
    return c * i + i - needle_tokens - 2


def rows_read(layout: DcpLayout, rank: int, context: int, interleave: int) -> int:
    """How many local rows ``rank`` reads for a dense top-k (every token of ``context``) when it
    converts the token ids with ``interleave``: the tokens it owns under that interleave."""
    n, i = layout.dcp, interleave
    full, rest = divmod(context, n * i)
    return full * i + min(max(rest - rank * i, 0), i)


def tail_hidden(layout: DcpLayout, token: int, context: int, wrong_interleave: int = 1) -> bool:
    """Whether ``token``'s KV row lies beyond the rows its rank reads at ``context`` tokens when
    the ids are converted with ``wrong_interleave``: what the tail probe needs for the code's
    tokens (a dense top-k with a wrong interleave misses only a rank's newest rows)."""
    n, i = layout.dcp, layout.interleave
    local = (token // (n * i)) * i + token % i
    return local >= rows_read(layout, layout.rank_of(token), context, wrong_interleave)


def build_probe(tok: Tokens, layout: DcpLayout, length: int, rank: int, seed: int,
                answer_tokens: int, tail: bool = False, key_seed: int = 0) -> Probe | str:
    """The probe prompt, or a one-line reason why this length cannot hold a needle on ``rank``.
    ``tail``: the needle at the end of rank 0's last chunk and right after it the short recall
    question (the needle's lead-in): a long question would push the needle out of rank 0's
    newest rows at DCP 2 (``tail_hidden``)."""
    needle = make_needle(seed, key_seed)
    sentence = tok.piece(needle.sentence)
    question = tok.piece(needle.recall if tail else needle.question)
    n_needle, n_question = len(sentence), len(question)
    start = (tail_start(layout, length, n_needle, n_question + answer_tokens) if tail else
             target_start(layout, length - answer_tokens, rank, n_needle, n_question + 8))
    if start is None:
        return (f"{length} tokens, interleave {layout.interleave}: no tail chunk for a needle"
                if tail else f"{length} tokens are too few to put a needle on rank {rank}")
    pre = tok.prefix()
    head = pre + tok.filler(seed, start - len(pre))
    body = head + sentence
    if not tail:
        body += tok.filler(seed + 1, length - answer_tokens - n_question - len(body))
    ids = body + question
    s, e = len(head), len(head) + n_needle
    place = NeedlePlacement(target_rank=rank, start=s, end=e, ranks=owners(layout, s, e))
    name = f"needle@{length} tail rank {rank}" if tail else f"needle@{length} rank {rank}"
    return Probe(name=name, ids=ids, tokens=len(ids), needle=needle, placement=place)


def auto_lengths(max_model_len: int, answer_tokens: int, smallest: int = 1024) -> list[int]:
    """1K, 4K, 16K, ... below the server's limit, and the limit itself (less the answer)."""
    cap = max_model_len - answer_tokens - 8
    out = []
    n = smallest
    while n < cap * 0.75:
        out.append(n)
        n *= 4
    out.append(cap)
    return out
