"""Generated prompts and needles (no datasets): deterministic from a seed.

Filler is sentences of common words; the needle is a sentence naming a secret code of a
"<colour> <animal>" pair that never occurs in the filler, asked for at the end of the prompt.
Sizes are in the server's tokens, measured through a ``count(text) -> int`` callable (the
server's ``/tokenize``), so placement is exact for whatever tokenizer the server runs.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass

Counter = Callable[[str], int]

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
PAD_WORDS = (" and", " the", " of", " to", " in")


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


def fit_units(count: Counter, budget: int, make: Callable[[int], str]) -> str:
    """The longest ``make(n)`` (n units) that stays within ``budget`` tokens (a few counts)."""
    c1 = count(make(1))
    per_unit = max((count(make(33)) - c1) / 32, 0.5)
    lo, lo_text = 0, make(0)
    n = max(1, 1 + int((budget - c1) / per_unit))
    for _ in range(8):
        text = make(n)
        c = count(text)
        if c <= budget:
            lo, lo_text = n, text
            if budget - c < per_unit:
                break
            n += max(1, int((budget - c) / per_unit) - 1)
        else:
            n = max(lo + 1, n - max(1, int((c - budget) / per_unit) + 1))
            if n == lo + 1 and count(make(n)) > budget:
                break
    return lo_text


def fit_filler(count: Counter, budget: int, seed: int, *, lead: str = "") -> str:
    """``lead`` + filler sentences, as many tokens as fit in ``budget`` (never more)."""
    return fit_units(count, budget, lambda n: lead + filler(seed, n))


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

    def found_in(self, text: str) -> bool:
        return self.code in text.replace(" ", "")


def make_needle(seed: int) -> Needle:
    rng = random.Random(seed * 7919 + 17)
    return Needle(key=f"{rng.choice(COLOURS)} {rng.choice(ANIMALS)}",
                  code=str(rng.randint(1000, 9999)))


PROMPT_KINDS = ("prose", "records", "code")


def _records(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [f"Record {i}: the {rng.choice(WORDS)} {rng.choice(WORDS)} is {rng.randint(100, 999)}.\n"
            for i in range(1, n + 1)]


def _defs(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [f"def f_{i}(x):\n    return x * {rng.randint(2, 9)} + {rng.randint(1, 99)}\n\n"
            for i in range(1, n + 1)]


def reference_prompt(kind: str, seed: int, count: Counter, budget: int) -> str:
    """A prompt of at most ``budget`` tokens whose continuation a model can predict (it repeats
    an earlier record or function head, so the answer is in the context)."""
    if kind == "prose":
        return fit_filler(count, budget, seed)
    if kind == "records":
        def rec(n: int) -> str:
            lines = _records(seed, max(n, 2))
            pick = lines[random.Random(seed + n).randrange(len(lines) // 2)]
            return "".join(lines) + pick.split(" is ")[0] + " is"
        return fit_units(count, budget, rec)
    if kind == "code":
        def code(n: int) -> str:
            defs = _defs(seed, max(n, 2))
            pick = random.Random(seed + n).randrange(len(defs) // 2) + 1
            return "".join(defs) + f"def f_{pick}(x):\n    return"
        return fit_units(count, budget, code)
    raise ValueError(f"unknown prompt kind {kind!r}")
