"""What the software says it is: failure lines matched in the message index (``diagnose.msgindex``).

A failure line (an ERROR/CRITICAL line, an exception, a process's first error) that is a message
vLLM, torch.distributed, NCCL, CUDA, FlashInfer, Ray, SGLang or a weight loader raises or logs at
error level names its category through the module that prints it (``catalogue/index_map.toml``).
Moderate confidence, below a curated catalogue entry, so curated knowledge wins where both match;
warnings and templates without a category are never findings. The template's releases are version
evidence: a log whose vLLM lies outside them runs a fork or a patched tree.
"""

from __future__ import annotations

from sm120kit.diagnose.msgindex import Match, try_load
from sm120kit.diagnose.rules.base import Finding, Rule, RuleContext
from sm120kit.evidence.logs.analyze import Evidence

MIN_COVER = 0.3  # the template's literal text must be this share of the line at least
MIN_LITERAL = 16


def _lines(ctx: RuleContext) -> list[Evidence]:
    lg = ctx.logs
    if not lg.failures:
        return []
    out = list(lg.failures)
    for p in lg.procs.values():
        out += [e for e in (p.exception_ev, p.first_error) if e is not None]
    seen: set[str] = set()
    return [e for e in out if not (e.ref in seen or seen.add(e.ref))][:16]  # type: ignore[func-returns-value]


def _best(line: str) -> Match | None:
    idx = try_load()
    if idx is None:
        return None
    for m in idx.match(line):
        t = m.template
        if t.is_error and t.category != "none" and t.litlen >= MIN_LITERAL and \
                m.coverage >= MIN_COVER:
            return m
    return None


def _version_note(ctx: RuleContext, m: Match) -> str:
    have = ctx.versions.get(m.template.project)
    if not isinstance(have, str):
        return ""
    inside = m.template.in_range(have)
    if inside is False:
        return (f"; this log's {m.template.project} {have} is outside those releases (a fork, "
                "a patched tree or a newer release)")
    return f"; consistent with this log's {m.template.project} {have}" if inside else ""


def check(ctx: RuleContext) -> list[Finding]:
    by_cat: dict[str, list[tuple[Evidence, Match]]] = {}
    for ev in _lines(ctx):
        m = _best(ev.text)
        if m is not None:
            by_cat.setdefault(m.template.category, []).append((ev, m))
    out = []
    for cat, hits in by_cat.items():
        ev, m = hits[0]
        t = m.template
        conf = 0.55 if t.kind in ("raise", "check") else 0.45
        out.append(RULE.finding(
            conf, f"{t.source()}: \"{t.text[:160]}\"" + _version_note(ctx, m),
            [ev] + [e for e, _ in hits[1:4]], category=cat, role="cause",
            fix=f"The message comes from {t.file} ({t.function or 'module level'}): read the "
                "condition there for what it checks; the category follows from that module."))
    return out


RULE = Rule(
    id="index-match",
    category="unknown",
    needs="a failure line that is a message of the message index (error level or a raise) "
          "whose module or wording has a category",
    tier="dead-rank",
    check=check,
    role="cause",
)
