"""Evidence a person describes instead of logging: ``nvidia-smi topo -m`` / ``topo -p2p`` tables,
GPU state in words or in an ``nvidia-smi`` table ("GPU utilization: 100%", "Power: approximately
120 W", "96% @ 18 W"), and the symptom in prose ("hangs on the first all_reduce", "deadlocks",
"stuck at 100% SM utilization"; the words of these cues are catalogue data,
``diagnose/catalogue/cues.toml``, handed in as ``ProseCue`` objects).

``DescribedScan.feed(lineno, text)`` is called for every line the analysis parses; it keeps what
it found in bounded lists. Lines are gated by cheap substring tests, so logs that contain none of
this cost one or two ``in`` tests per line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sm120kit.evidence.logs.cue import DESCRIBED, ProseCue

MAX_KEEP = 8
# link types of `nvidia-smi topo -m`; p2p statuses of `nvidia-smi topo -p2p r|w|n|a|p`
LINKS = frozenset({"X", "SYS", "NODE", "PHB", "PXB", "PIX", "SOC", "NV"})
P2P = frozenset({"X", "OK", "CNS", "GNS", "TNS", "NS", "U"})
PCIE_ONLY = frozenset({"SYS", "NODE", "PHB", "PXB", "PIX", "SOC"})

_ROW = re.compile(r"^\s*GPU(?P<i>\d+)\s+(?P<cells>(?:(?:X|SYS|NODE|PHB|PXB|PIX|SOC|NV\d+|OK|CNS|GNS"
                  r"|TNS|NS|U)\s+){1,16}(?:X|SYS|NODE|PHB|PXB|PIX|SOC|NV\d+|OK|CNS|GNS|TNS|NS|U)?)")
_HEAD = re.compile(r"^\s*GPU0\s+GPU1\b")
# a py-spy dump pasted as text: "Process 2403: VLLM::EngineCore" / "Thread 2403 (active)" then
# "    func (file.py:123)" frames, innermost first
_PYSPY_HEAD = re.compile(r"^\s*(?:Process (?P<pid>\d+): (?P<title>.+)|Thread (?P<tid>\d+) "
                         r"\((?P<state>active|idle)[^)]*\)(?:: \"(?P<name>[^\"]*)\")?)\s*$")
_PYSPY_FRAME = re.compile(r"^\s+(?P<func>[\w.<>]+) \((?P<file>[\w./<>-]+):(?P<line>\d+)\)\s*$")
_UTIL = re.compile(
    r"(?:utili[sz]ation(?:\.gpu)?|util|GPU-Util|SM util\w*|GPU usage)\W{0,12}?(?P<u>\d{1,3}(?:\.\d+)?) ?%"
    r"|(?P<u2>\d{1,3}(?:\.\d+)?) ?% (?:SM |GPU |compute )?(?:util|usage|busy)"
    r"|GPUs? (?:at|@) (?P<u3>\d{1,3}) ?%", re.IGNORECASE)
_POWER = re.compile(r"(?P<w>\d{1,4}(?:\.\d+)?) ?W\b(?: ?/ ?(?P<lim>\d{2,4}) ?W\b)?")
_SMI_ROW = re.compile(r"\|\s*\d+%?\s+\d+C\s+P\d+\s+(?P<w>\d+)W\s*/\s*(?P<lim>\d+)W\s*\|[^|]*\|\s*"
                      r"(?P<u>\d{1,3})%")


@dataclass
class GpuState:
    source: str
    line: int
    text: str
    util: float | None = None
    power_w: float | None = None
    limit_w: float | None = None

    @property
    def busy_low_power(self) -> bool:
        """Near-full utilization at a fraction of the power a working GPU draws: a spin."""
        if self.util is None or self.util < 90 or self.power_w is None:
            return False
        if self.limit_w:
            return self.power_w < 0.45 * self.limit_w
        return self.power_w <= 150


@dataclass
class DescribedScan:
    links: dict[tuple[int, int], str] = field(default_factory=dict)  # topo -m
    p2p: dict[tuple[int, int], str] = field(default_factory=dict)  # topo -p2p
    table_lines: list[tuple[str, int, str]] = field(default_factory=list)
    symptoms: list[tuple[str, int, str]] = field(default_factory=list)
    symptom_count: int = 0
    gpu: list[GpuState] = field(default_factory=list)
    complaints: list[tuple[str, int, str]] = field(default_factory=list)
    praise: int = 0  # prose saying it works ("successfully loaded", "it works")
    complaint_count: int = 0
    # pasted py-spy dumps: (source, line of the header, title, frames "func (file:line)")
    stacks: list[tuple[str, int, str, list[str]]] = field(default_factory=list)
    #: the prose cues by id (cue.DESCRIBED); none given: no words are read as cues
    cues: dict[str, ProseCue] = field(default_factory=dict)
    _table: bool = False
    _stack: list[str] | None = None

    def feed_prose(self, source: str, lineno: int, text: str) -> None:
        """A line that is not a log record (no process/level prefix): what a person wrote."""
        self._cues(source, lineno, text, True)
        if self._stack is not None and self._stack_frame(text):
            return
        if ("Process " in text or "Thread " in text) and len(self.stacks) < MAX_KEEP:
            h = _PYSPY_HEAD.match(text)
            if h:
                if h.group("title") or not self.stacks or self.stacks[-1][3]:
                    self.stacks.append((source, lineno, (h.group("title") or h.group("name")
                                                         or "").strip(), []))
                self._stack = self.stacks[-1][3]

    def _cues(self, source: str, lineno: int, text: str, prose: bool) -> None:
        """Count the cues of this line kind (``lines = "prose"`` or ``"all"``) the text holds."""
        for cid in DESCRIBED:
            cue = self.cues.get(cid)
            if cue is None or cue.prose_only != prose or cue.find(text) is None:
                continue
            if cid == "praise":
                self.praise += 1
                continue
            kept = self.symptoms if cid == "symptom" else self.complaints
            if cid == "symptom":
                self.symptom_count += 1
            else:
                self.complaint_count += 1
            if len(kept) < MAX_KEEP:
                kept.append((source, lineno, text.strip()))

    def _stack_frame(self, text: str) -> bool:
        """A frame of the py-spy dump being read (True), or the line that ends it."""
        assert self._stack is not None
        f = _PYSPY_FRAME.match(text)
        if f:
            if len(self._stack) < 64:
                self._stack.append(f"{f.group('func')} ({f.group('file')}:{f.group('line')})")
            return True
        if text.strip() and not _PYSPY_HEAD.match(text):
            self._stack = None
        return False

    def feed(self, source: str, lineno: int, text: str) -> None:
        if "GPU" in text:
            self._topo(source, lineno, text)
        elif self._table and text.strip():
            self._table = False
        self._cues(source, lineno, text, False)
        if "%" in text and ("til" in text or "sage" in text or "busy" in text or "W " in text
                            or " at " in text
                            or "W/" in text or "W |" in text):
            self._gpu(source, lineno, text)
        elif ("ower" in text or "@" in text) and "W" in text and self.gpu and \
                self.gpu[-1].power_w is None and lineno - self.gpu[-1].line <= 3:
            m = _POWER.search(text)
            if m:
                self.gpu[-1].power_w = float(m.group("w"))
                self.gpu[-1].text += " / " + text.strip()

    def _topo(self, source: str, lineno: int, text: str) -> None:
        if _HEAD.match(text):
            self._table = True
            if len(self.table_lines) < MAX_KEEP:
                self.table_lines.append((source, lineno, text.strip()))
            return
        m = _ROW.match(text)
        if not m:
            return
        i = int(m.group("i"))
        cells = m.group("cells").split()
        if len(self.table_lines) < MAX_KEEP:
            self.table_lines.append((source, lineno, text.strip()))
        kind_p2p = any(c in ("OK", "CNS", "GNS", "TNS", "NS") for c in cells)
        for j, c in enumerate(cells):
            if j == i or c == "X":
                continue
            if kind_p2p and c in P2P:
                self.p2p[(i, j)] = c
            elif not kind_p2p:
                self.links[(i, j)] = "NV" if c.startswith("NV") else c

    def _gpu(self, source: str, lineno: int, text: str) -> None:
        if len(self.gpu) >= 64:
            return
        s = _SMI_ROW.search(text)
        if s:
            self.gpu.append(GpuState(source, lineno, text.strip(), float(s.group("u")), float(s.group("w")),
                                     float(s.group("lim"))))
            return
        u = _UTIL.search(text)
        if not u:
            return
        util = float(u.group("u") or u.group("u2") or u.group("u3"))
        st = GpuState(source, lineno, text.strip(), util)
        p = _POWER.search(text, u.end()) or _POWER.search(text)
        if p:
            st.power_w = float(p.group("w"))
            st.limit_w = float(p.group("lim")) if p.group("lim") else None
        self.gpu.append(st)

    # -- results ----------------------------------------------------------------------------
    def pcie_only(self) -> bool:
        """A topology table whose GPU pairs are all linked over PCIe (no NVLink)."""
        return bool(self.links) and all(v in PCIE_ONLY for v in self.links.values())

    def link_kinds(self) -> list[str]:
        return sorted(set(self.links.values()))

    def p2p_refused(self) -> list[str]:
        return sorted({v for v in self.p2p.values() if v not in ("OK", "X")})

    def spinning(self) -> list[GpuState]:
        return [g for g in self.gpu if g.busy_low_power]
