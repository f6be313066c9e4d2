"""Generated prompts and needles (no datasets): deterministic from a seed.

Filler is sentences of common words; the needle is a sentence naming a secret code of a
"<colour> <animal>" pair that never occurs in the filler, asked for at the end of the prompt.
Prompts are token ids, built by joining the ids of a few pieces, each tokenized once by the
server's own ``/tokenize`` (:class:`Tokens`): every size and every needle position is exact by
construction, whatever tokenizer the server runs, and a whole plan costs fewer tokenize
requests than it has prompts (a 16-check plan: about a dozen).
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from sm120kit.errors import UserError

#: the server's tokenizer: ids of a text, with or without its special tokens (BOS)
Fetch = Callable[[str, bool], list[int]]
WORDS = (
    "river stone window garden morning paper table light music field market bridge letter "
    "station winter summer kitchen engine forest harbor mountain village teacher doctor island "
    "painter story number circle corner silver golden quiet early simple careful gentle bright "
    "heavy narrow distant ancient modern local public private sudden steady walks carries "
    "builds finds keeps opens watches reads writes moves holds turns brings follows leaves "
    "under over beside behind across through around toward near after before during while "
    "the a every some many few another each this that their our"
).split()
COLOURS = ("crimson", "violet", "amber", "indigo", "scarlet", "teal", "ochre", "magenta")
ANIMALS = ("otter", "falcon", "lynx", "heron", "badger", "gecko", "walrus", "ibis")


@functools.lru_cache(maxsize=8)
def sentences(seed: int) -> tuple[str, ...]:
    """An endless-enough supply (4096, cycled) of filler sentences, each with a leading space."""
    rng = random.Random(seed)
    out = []
    for _ in range(4096):
        n = rng.randint(6, 12)
        words = [rng.choice(WORDS) for _ in range(n)]
        out.append(" " + " ".join(words).capitalize() + ".")
    return tuple(out)


def filler(seed: int, n: int) -> str:
    pool = sentences(seed)
    return "".join(pool[i % len(pool)] for i in range(n))


@dataclass(frozen=True)
class Needle:
    key: str  # "crimson otter"
    code: str  # "4831"

    @property
    def sentence(self) -> str:
        return f" The secret code of the {self.key} is {self.code}."

    @property
    def question(self) -> str:
        return (f"\n\nQuestion: What is the secret code of the {self.key}?\n"
                f"Answer: The secret code of the {self.key} is")

    @property
    def recall(self) -> str:
        """The tail probe's short question: the needle's own lead-in, to be completed with the
        code (a copy any model makes). Short, so the needle stays among the prompt's newest
        rows of its rank (see probes.tail_hidden)."""
        return f"\nThe secret code of the {self.key} is"

    def found_in(self, text: str) -> bool:
        return self.code in text.replace(" ", "")


def make_needle(seed: int, key_seed: int = 0) -> Needle:
    """The code from ``seed``; the key from ``key_seed``, shared by a run's probes (one prompt
    holds one needle, so probes need not differ in the key; its question is tokenized once)."""
    key = random.Random(key_seed * 7919 + 17)
    code = random.Random(seed * 7919 + 29)
    return Needle(key=f"{key.choice(COLOURS)} {key.choice(ANIMALS)}",
                  code=str(code.randint(1000, 9999)))


PROMPT_KINDS = ("prose", "records", "code")


def _records(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [f"Record {i}: the {rng.choice(WORDS)} {rng.choice(WORDS)} is {rng.randint(100, 999)}.\n"
            for i in range(1, n + 1)]


def _defs(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [f"def f_{i}(x):\n    return x * {rng.randint(2, 9)} + {rng.randint(1, 99)}\n\n"
            for i in range(1, n + 1)]


#: filler offset between seeds, in tokens (prime: never a multiple of an interleave)
SEED_STRIDE = 61


def _leading(full: list[int], plain: list[int]) -> list[int]:
    """The special tokens ``full`` (tokenized with them) has before ``plain`` (without)."""
    for i in range(len(full) - len(plain) + 1):
        if full[i:i + len(plain)] == plain:
            return full[:i]
    return []


@dataclass
class Tokens:
    """Token ids by the server's tokenizer, one request per distinct piece of text.

    Long material (filler, records, code) is a *stream*: one text long enough for the longest
    prompt of the plan (``reserve``), tokenized once and cut at a token; a prompt joins slices of
    streams and short pieces (needle sentence, question) after the tokenizer's special prefix.
    """

    fetch: Fetch
    calls: int = 0
    chars_per_token: float = 4.0  # first guess for sizing a stream; learned from each answer
    horizon: dict[str, int] = field(default_factory=dict)
    _pieces: dict[str, list[int]] = field(default_factory=dict)
    _streams: dict[str, list[int]] = field(default_factory=dict)
    _prefix: list[int] | None = None

    def _get(self, text: str, special: bool) -> list[int]:
        self.calls += 1
        return self.fetch(text, special)

    def reserve(self, kind: str, n: int) -> None:
        """Size the first request for streams of ``kind`` to ``n`` tokens (the plan's longest)."""
        self.horizon[kind] = max(self.horizon.get(kind, 0), n)

    def piece(self, text: str) -> list[int]:
        if text not in self._pieces:
            self._pieces[text] = self._get(text, False)
        return self._pieces[text]

    def prefix(self) -> list[int]:
        """What the tokenizer puts before a prompt (BOS; empty for tokenizers without one)."""
        if self._prefix is None:
            probe = " Hello"
            self._prefix = _leading(self._get(probe, True), self.piece(probe))
        return self._prefix

    def stream(self, key: str, kind: str, make: Callable[[int], str], n: int) -> list[int]:
        """At least ``n`` ids of ``make(k)`` (k units of text), or more when ``kind`` is
        reserved longer; one request unless the tokenizer is denser than guessed."""
        have = self._streams.get(key)
        if have is not None and len(have) >= n:
            return have
        want = max(n, self.horizon.get(kind, 0))
        unit = max(len(make(64)) / 64, 1.0)  # characters per unit
        k = max(1, math.ceil(want * self.chars_per_token * 1.1 / unit) + 2)
        for _ in range(8):
            text = make(k)
            ids = self._get(text, False)
            if ids:
                self.chars_per_token = len(text) / len(ids)  # the next stream's first guess
            if len(ids) >= n:
                self._streams[key] = ids
                return ids
            k = max(k + 1, math.ceil(k * want / max(len(ids), 1) * 1.1))
        raise UserError(f"the server's tokenizer returned too few tokens for {n} tokens of "
                        f"{kind} text", hint="is /tokenize answering for the served model?")

    def filler(self, seed: int, n: int, *, shift: int = 0) -> list[int]:
        """``n`` filler ids; each seed starts at its own offset of one shared stream."""
        if n <= 0:
            return []
        off = seed * SEED_STRIDE + shift
        return self.stream("filler", "filler", lambda k: filler(0, k), off + n)[off:off + n]


def reference_prompt(kind: str, seed: int, tok: Tokens, budget: int) -> list[int]:
    """A prompt of ``budget`` tokens whose continuation a model can predict (it repeats an
    earlier record or function head, so the answer is in the context)."""
    pre = tok.prefix()
    if kind == "prose":
        return pre + tok.filler(seed, budget - len(pre), shift=29)
    if kind == "records":
        line = _records(seed, 3)[random.Random(seed).randrange(3)]
        tail = tok.piece("\n" + line.split(" is ")[0] + " is")
        body = tok.stream(f"records:{seed}", "prompt", lambda k: "".join(_records(seed, k)),
                          budget)
    elif kind == "code":
        pick = random.Random(seed).randrange(3) + 1
        tail = tok.piece(f"\n\ndef f_{pick}(x):\n    return")
        body = tok.stream(f"code:{seed}", "prompt", lambda k: "".join(_defs(seed, k)), budget)
    else:
        raise ValueError(f"unknown prompt kind {kind!r}")
    return pre + body[:max(0, budget - len(pre) - len(tail))] + tail
