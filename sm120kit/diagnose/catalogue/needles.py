"""A literal that every match of a pattern contains (its "needle"), so the one-pass gate can test
cheap substrings first. ``None`` when a branch of the pattern has no literal run of 3+ chars at
its top level (such patterns stay in the regex gate)."""

from __future__ import annotations

_META = set(".^$*+?{}[]()|")
_QUANT = set("*+?{")


def branches(pattern: str) -> list[str]:
    """The top-level alternatives of a regex (``a|b(c|d)`` → ``a``, ``b(c|d)``)."""
    out, cur, depth, i, cls = [], [], 0, 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            cur.append(pattern[i:i + 2])
            i += 2
            continue
        if cls:
            cls = c != "]"
        elif c == "[":
            cls = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            out.append("".join(cur))
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    return out + ["".join(cur)]


def _runs(branch: str) -> list[str]:
    runs, cur, depth, i, cls = [], "", 0, 0, False
    while i < len(branch):
        c = branch[i]
        nxt = branch[i + 1] if i + 1 < len(branch) else ""
        if c == "\\":
            lit = nxt if nxt and not nxt.isalnum() else None
            i += 2
            if lit is not None and depth == 0 and not cls and branch[i:i + 1] not in _QUANT:
                cur += lit
                continue
            runs.append(cur)
            cur = ""
            continue
        if c == "{" and not cls and "}" in branch[i:]:  # a {m,n} count is no literal
            runs.append(cur)
            cur = ""
            i = branch.index("}", i) + 1
            continue
        if cls or depth or c in _META:
            cls = (cls and c != "]") or (c == "[" and not depth)
            depth += (c == "(") - (c == ")") if not cls else 0
            runs.append(cur)
            cur = ""
        elif nxt in _QUANT:  # an optional / repeated char ends the run before it
            runs.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    return runs + [cur]


def needles(pattern: str) -> list[str] | None:
    """One literal per top-level branch, or None when some branch has none of 3+ chars."""
    if pattern.startswith("(?") and pattern[2:3].isalpha():
        return None  # global flags (case-insensitive...): no exact literal
    out = []
    for b in branches(pattern):
        best = max(_runs(b), key=len, default="")
        if len(best) < 3:
            return None
        out.append(best)
    return out
