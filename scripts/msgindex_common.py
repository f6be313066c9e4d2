"""The record every message-index extractor emits, and the helpers that turn its parts into a
regex and literal anchors.

Shared by ``scripts/msgindex_py.py`` (Python ``ast``) and ``scripts/msgindex_c.py`` (C/C++/CUDA);
``scripts/build_message_index.py`` deduplicates the templates across releases and writes the
shipped index. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HOLE_TYPES = ("int", "float", "num", "hex", "word", "path", "any")

# the regex each typed hole stands for (a hole never spans a line)
HOLE_REGEX: dict[str, str] = {
    "int": r"-?\d+",
    "float": r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?",
    "num": r"-?(?:0[xX][0-9a-fA-F]+|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)",
    "hex": r"(?:0[xX])?[0-9a-fA-F]+",
    "word": r"\S+",
    "path": r"\S+",
    "any": r".*?",
}

# an anchor word: 4+ characters of letters/digits/underscore, starting with a letter
ANCHOR_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]{3,}")


@dataclass(frozen=True)
class RawTemplate:
    project: str          # "vllm" | "torch" | "nccl" | "cuda" | "flashinfer" | "ray" | "sglang" | "hami" |
                          # "transformers" | "safetensors" | "tgi" ...
    version: str          # release the source came from, e.g. "0.34.0", "2.9.1", "2.27.7"
    file: str             # path inside the project, e.g. "vllm/config/parallel.py", "src/transport/p2p.cc"
    line: int
    function: str         # enclosing function ("" if none)
    kind: str             # "raise" | "log" | "check" | "warn-macro" | "error-string" | "print"
    exc: str | None       # exception type / C++ error class (ValueError, c10::DistBackendError) or None
    level: str | None     # "error" | "warning" | "critical" | "fatal" | "warn" | "info" ... or None
    parts: tuple[tuple[str, str], ...]   # ("lit", "text") or ("hole", TYPE) in order;
                          # TYPE in {"int","float","num","hex","word","path","any"}; "any" when unknown


def normalize_parts(parts: tuple[tuple[str, str], ...] | list[tuple[str, str]]
                    ) -> tuple[tuple[str, str], ...]:
    """Merge adjacent literals, collapse runs of holes (two holes in a row become one ``any``
    unless both are the same type), drop empty literals; cut at the first newline-bearing
    literal's line break (log lines are matched one at a time: only the first line counts)."""
    out: list[tuple[str, str]] = []
    for kind, val in parts:
        if kind == "lit":
            if not val:
                continue
            if out and out[-1][0] == "lit":
                out[-1] = ("lit", out[-1][1] + val)
            else:
                out.append(("lit", val))
        else:
            t = val if val in HOLE_TYPES else "any"
            if out and out[-1][0] == "hole":
                if out[-1][1] != t:
                    out[-1] = ("hole", "any")
            else:
                out.append(("hole", t))
    # keep the first line only
    cut: list[tuple[str, str]] = []
    for kind, val in out:
        if kind == "lit" and "\n" in val:
            head = val.split("\n", 1)[0]
            if head:
                cut.append(("lit", head))
            if any(k == "lit" and v.strip() for k, v in cut):
                break
            cut = []  # the message starts with a newline: the next line is the message
            rest = val.split("\n")[-1]
            if rest:
                cut.append(("lit", rest))
            continue
        cut.append((kind, val))
    return tuple(cut)


def literal_text(parts: tuple[tuple[str, str], ...]) -> str:
    """The literal runs joined by one space (what a reader sees of the template)."""
    return " ".join(v.strip() for k, v in parts if k == "lit" and v.strip())


def display(parts: tuple[tuple[str, str], ...]) -> str:
    """The template as a person reads it: holes as ``{int}``, ``{...}``."""
    return "".join(v if k == "lit" else ("{...}" if v == "any" else "{" + v + "}")
                   for k, v in parts)


def _lit_regex(text: str) -> str:
    """A literal run as a regex: whitespace runs match any whitespace run."""
    chunks = re.split(r"(\s+)", text)
    return "".join(r"\s+" if c and c.isspace() else re.escape(c) for c in chunks)


def parts_to_regex(parts: tuple[tuple[str, str], ...]) -> str:
    """An unanchored regex source for ``re.search`` on one log line. Leading/trailing holes are
    dropped (a search finds the literal core anywhere in the line); a trailing ``any`` hole would
    match the empty string anyway."""
    ps = list(normalize_parts(parts))
    while ps and ps[0][0] == "hole":
        ps.pop(0)
    while ps and ps[-1][0] == "hole":
        ps.pop()
    out = []
    for kind, val in ps:
        out.append(_lit_regex(val) if kind == "lit" else HOLE_REGEX[val])
    return "".join(out)


def parts_to_anchors(parts: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """The literal runs, stripped, in order (each one must occur in a matching line)."""
    return tuple(v.strip() for k, v in normalize_parts(parts) if k == "lit" and v.strip())


def anchor_words(parts: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """The whole words (>= 4 characters, lower-cased) inside the literal runs, in order, without
    repeats. A word glued to a hole is left out (``"rank{int}"`` gives no ``rank``: the log line
    holds ``rank3``)."""
    ps = normalize_parts(parts)
    seen: dict[str, None] = {}
    for i, (k, v) in enumerate(ps):
        if k != "lit":
            continue
        hole_before = i > 0 and ps[i - 1][0] == "hole"
        hole_after = i + 1 < len(ps) and ps[i + 1][0] == "hole"
        for m in ANCHOR_WORD.finditer(v):
            s, e = m.span()
            if (s > 0 and (v[s - 1].isalnum() or v[s - 1] == "_")) or (s == 0 and hole_before):
                continue
            if (e < len(v) and (v[e].isalnum() or v[e] == "_")) or (e == len(v) and hole_after):
                continue
            seen.setdefault(m.group(0).lower())
    return tuple(seen)


def literal_length(parts: tuple[tuple[str, str], ...]) -> int:
    """How many literal characters the template has (a template with few is too vague)."""
    return sum(len(v.strip()) for k, v in parts if k == "lit")
