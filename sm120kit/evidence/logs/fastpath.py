"""Boring call sites: a vLLM call site that said nothing beyond its phase for a while skips the
parsers (the per-line cost of a long serving log)."""

from __future__ import annotations

from sm120kit.evidence.logs.prefix import Origin

BORING_AFTER = 16  # a call site is "boring" after this many lines with nothing but a phase
NEVER = -(1 << 40)
MAX_TEMPLATES = 50_000
_NODIGITS = str.maketrans("", "", "0123456789")
# lines with these words always take the full path, whatever their call site did before
_RISKY = ("rror", "xception", "imeout", "imed out", "died", "atchdog", "NCCL", "Killed", "ault",
          "bort", "raceback", "atal", "ssert", "ailed", "emory", "nccl", "ersion", "DCP", "LSE",
          "rank", "utotun", "arm", "vailable", "P2P", "shm", "space", "SIG", "oom", "OOM",
          "RROR", "RITICAL", "anic", "CrashLoop", "xited", "xit Code", "etry", "etrie")

Site = tuple[str, str]


def site_of(o: Origin, msg: str) -> Site | None:
    """The call-site key of an ordinary vLLM/plain line, or None when it must be fully parsed."""
    if o.kind not in ("vllm", "plain") or o.level in ("ERROR", "CRITICAL"):
        return None
    if not msg or msg[0] in " \t":
        return None
    for w in _RISKY:
        if w in msg:
            return None
    return (o.name or "", o.loc or msg[:40].translate(_NODIGITS))


class CallSites:
    def __init__(self) -> None:
        self._seen: dict[Site, tuple[int, str | None]] = {}
        self.fast_lines = 0  # lines of learned boring call sites (parsers skipped)

    def boring(self, site: Site) -> tuple[bool, str | None]:
        """(True, its phase) when the site is boring: the line counts as a fast line."""
        c = self._seen.get(site)
        if c is not None and c[0] >= BORING_AFTER:
            self.fast_lines += 1
            return True, c[1]
        return False, None

    def learn(self, site: Site, changed: bool, phase: str | None) -> None:
        """After a fully parsed line: ``changed`` when it changed anything besides its phase."""
        c = self._seen.get(site)
        if changed:
            self._seen[site] = (NEVER, phase)
        elif c is None:
            if len(self._seen) < MAX_TEMPLATES:
                self._seen[site] = (1, phase)
        elif c[0] != NEVER:
            self._seen[site] = (c[0] + 1, phase) if c[1] == phase else (0, phase)
