"""The failure-signature catalogue: entries as data (``*.toml`` in this folder), compiled into
one scanner.

An entry names one cause by the lines that state it (``patterns``: several wordings across
releases), the lines that follow from it and are not separate causes (``symptoms``), the forms
that look alike but are advice, help or completion (``excludes``), its ``category`` (the fixed
list of ``sm120kit.diagnose.categories``), ``priority``, ``phase``, ``fix`` and the public
``sources`` that establish it. Users add entries with ``--catalogue FILE|DIR`` or
``$SM120KIT_CATALOGUE`` (``os.pathsep``-separated); an entry with a shipped id replaces it.

``Catalogue.scan(line)`` is one gate per line (the literals every pattern's match contains as
substring tests, plus one combined regex for the few patterns without one); only a line that
passes it is tried against the single entries. Advice (``If you are running out of memory,
consider ...``), help text and completion lines (``torch.compile takes N s in total``) are
never evidence, whatever an entry's patterns say.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sm120kit.diagnose.catalogue.conditions import When
from sm120kit.diagnose.catalogue.needles import needles
from sm120kit.diagnose.catalogue.schema import CatalogueError, Entry, read_file
from sm120kit.diagnose.catalogue.signal import Cue, Signal, SignalTable
from sm120kit.evidence.logs.cue import ProseCue
from sm120kit.evidence.phases import STALL_MESSAGES

#: the stall classifier's finer ids (heartbeat, engine-ready-timeout, gloo-timeout): written once
#: in sm120kit.evidence.phases, which reads them without a catalogue
_STALL_SIGNALS = tuple((fine, needle, rx) for _stall, fine, needle, rx in STALL_MESSAGES if fine)

SHIPPED = Path(__file__).resolve().parent
ENV = "SM120KIT_CATALOGUE"
PREFIX = "cat:"
# a line that only advises or helps (no error stated on it)
_ADVICE = re.compile(
    r"(?i)\b(?:consider(?:ing)? (?:increas|decreas|reduc|lower|rais|using|setting|adding)|"
    r"if you (?:are|want|see|encounter|need)|you (?:can|may|might|should) (?:try|set|use|increase|"
    r"decrease|reduce|lower|pass|add|disable|enable)|"
    r"is deprecated|will be removed|usage: |--help\b)")
# a line that reports a phase *finished*: progress, never "stopped in that phase"
_COMPLETION = re.compile(
    r"(?i)takes? [\d.]+ ?s in total|graph capturing finished|loading weights took|"
    r"model loading took|finished in [\d.]+ ?s|completed in [\d.]+ ?s")
_ERROR_STATED = re.compile(r"Error\b|Exception\b|error:|ERROR|FAILED|[Ff]ailed\b|Traceback")


# a line that states an error by its level or an exception (not one quoted in backticks inside
# advice: "fd limit errors like `OSError: [Errno 24] ...`"): never advice
_RAISED = re.compile(r"\b(?:ERROR|CRITICAL)\b|Traceback|(?:^|[\s\]:])[A-Z][\w.]*(?:Error|Exception): ")


def is_completion(line: str) -> bool:
    return bool(_COMPLETION.search(line)) and not _ERROR_STATED.search(line)


# a line that announces a long step before it starts ("cold cache JIT-compile may take several
# minutes", "It may take a long time (typically 10-20 mins)"): the quiet after it is expected
_ANNOUNCED = re.compile(r"\b(?:may|might|can|will) take (?:a (?:long )?while|a long time|several "
                        r"minutes|(?:up to |about )?\d+\s*(?:-\s*\d+\s*)?(?:min|minutes|s\b))")


def announces_long_step(line: str) -> bool:
    return bool(_ANNOUNCED.search(line)) and not _ERROR_STATED.search(line)


# a line that reports a wait still going on ("Waiting for creating a placement group of specs for
# 70 seconds ... make sure ... if you are running on a multi-node"): a state, whatever hint follows
_WAITING = re.compile(r"\bWaiting for .{0,80}\bfor \d+ seconds")


def not_evidence(line: str) -> bool:
    """Advice, help, deprecation or completion with no error stated on the same line."""
    if _WAITING.search(line):
        return False
    return bool(_ADVICE.search(line) or _COMPLETION.search(line)) and not _ERROR_STATED.search(line)


@dataclass
class Catalogue:
    entries: dict[str, Entry] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    signals: dict[str, Signal] = field(default_factory=dict)
    cues: dict[str, Cue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.compile()

    def compile(self) -> None:
        """The gate: the literal every match of a pattern contains (substring tests), and one
        combined regex for the patterns without such a literal."""
        causes = [e for e in self.entries.values() if e.role != "advice"]
        advice = [e for e in self.entries.values() if e.role == "advice"]
        self._needles, self._gate = _gate(causes)
        self._adv_needles, self._adv_gate = _gate(advice)
        self._order = sorted(causes, key=lambda e: (-e.priority, e.id))
        self._advice = sorted(advice, key=lambda e: e.id)
        # the entries that may still name an advice line: those whose conditions say when the
        # line counts (``when``/``requires``: "beside a stall", ...)
        self._conditional = [e for e in self._order if e.conditions() != When()]
        self.table = SignalTable(list(self.signals.values()), _STALL_SIGNALS)

    def advice(self, line: str) -> Entry | None:
        """The ``advice`` entry (benign.toml) naming this line: a warning or hint the software
        prints on healthy runs too, with no error stated on it; None otherwise (also for a line
        at ERROR level or one that raises: ``ValueError: Unknown vLLM environment variable``)."""
        for n in self._adv_needles:  # a plain loop: this runs on every parsed line
            if n in line:
                break
        else:
            if self._adv_gate is None or self._adv_gate.search(line) is None:
                return None
        if _RAISED.search(line) is not None:
            return None
        for e in self._advice:
            if e.match(line) is not None:
                return e
        return None

    def prose_cues(self) -> dict[str, ProseCue]:
        """The cues the analysis reads in what a person wrote (``cues.toml``)."""
        return {cid: c.cue for cid, c in self.cues.items()}

    def scan_line(self, line: str) -> list[tuple[str, re.Match[str]]]:
        """The analysis' scanner: the signals a line holds, then the entries naming it."""
        return self.table.hits(line) + self.scan(line)

    def passes(self, line: str) -> bool:
        for n in self._needles:
            if n in line:
                return True
        return self._gate is not None and self._gate.search(line) is not None

    def scan(self, line: str) -> list[tuple[str, re.Match[str]]]:
        """(``cat:<id>``, match) of every entry that names this line as evidence."""
        if not self.passes(line):
            return []
        # advice (a hint, a deprecation, a finished step, an advice entry) is named only by the
        # entries whose conditions say when such a line counts (``when``: "unless the start
        # reached ready", "beside a stall")
        hint = not_evidence(line) or self.advice(line) is not None
        out = []
        for e in self._conditional if hint else self._order:
            m = e.match(line)
            if m is not None:
                out.append((PREFIX + e.id, m))
        return out

    def get(self, eid: str) -> Entry | None:
        return self.entries.get(eid.removeprefix(PREFIX))


def _gate(entries: list[Entry]) -> tuple[tuple[str, ...], re.Pattern[str] | None]:
    """The literals every match of the entries' patterns contains, and one combined regex for
    the patterns without such a literal."""
    lits: set[str] = set()
    rest = []
    for p in (p for e in entries for p in e.patterns):
        n = needles(p)
        if n is None:
            rest.append(p)
        else:
            lits.update(n)
    return tuple(sorted(lits)), (re.compile("|".join(f"(?:{p})" for p in rest)) if rest else None)


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        # index_map.toml is the message index's category mapping (diagnose.msgindex), no entries
        return sorted(p for p in path.glob("*.toml") if p.name != "index_map.toml")
    if path.is_file():
        return [path]
    raise CatalogueError(f"{path}: no such catalogue file or directory")


def load(extra: Iterable[str | Path] = (), environ: dict[str, str] | None = None) -> Catalogue:
    """The shipped entries, then ``$SM120KIT_CATALOGUE``, then ``extra`` (later ids win)."""
    env = (os.environ if environ is None else environ).get(ENV, "")
    paths = [SHIPPED] + [Path(p) for p in env.split(os.pathsep) if p] + [Path(p) for p in extra]
    cat = Catalogue()
    for root in paths:
        for f in _files(root):
            got = read_file(f)
            cat.entries.update((e.id, e) for e in got.entries)
            cat.signals.update((sg.id, sg) for sg in got.signals)
            cat.cues.update((c.id, c) for c in got.cues)
            cat.files.append(str(f))
    cat.compile()
    return cat


def explain(cat: Catalogue, eid: str) -> dict[str, object]:
    """One entry or signal as a dict (``--explain ID``); ``CatalogueError`` naming the known ids."""
    e = cat.get(eid)
    sg = cat.signals.get(eid)
    if e is None and sg is not None:
        return {"id": sg.id, "signal": True, "about": sg.about,
                "match": [f"{n} => {rx}" for n, rx in sg.match], "sources": sg.sources,
                "file": sg.file}
    if e is None:
        raise CatalogueError(f"no catalogue entry {eid!r}; entries: {', '.join(sorted(cat.entries))}")
    return {"id": e.id, "category": e.category, "role": e.role, "summary": e.summary,
            "confidence": e.confidence,
            "priority": e.priority, "phase": e.phase, "requires": e.requires or None,
            "patterns": e.patterns, "symptoms": e.symptoms, "excludes": e.excludes,
            "fix": e.fix, "sources": e.sources, "since": e.since or None,
            "until": e.until or None, "when": _when(e), "file": e.file}


def _when(e: Entry) -> list[str]:
    """The entry's conditions, one "key: value" each (``--explain``)."""
    w = e.conditions()
    pairs = (("with", w.with_), ("with_any", w.with_any), ("without", w.without),
             ("phase", w.phase), ("stalled", w.stalled), ("topology", w.topology))
    return [f"{k}: {', '.join(v) if isinstance(v, tuple) else str(v).lower()}"
            for k, v in pairs if v not in ((), None)]
__all__ = ["Catalogue", "CatalogueError", "Cue", "Entry", "Signal", "ENV", "PREFIX", "explain", "is_completion", "load",
           "not_evidence"]
