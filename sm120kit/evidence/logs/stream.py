"""Streaming line reader: flat memory in file size, any bytes, fast skipping of NCCL INFO floods.

``scan`` reads a binary stream in fixed blocks and yields ``(line_number, line_bytes)`` for the
lines that need parsing (1-based numbers; the ``\\n`` and a trailing ``\\r`` removed). Memory is
O(block + max_line) whatever the file size: a line longer than ``max_line`` is cut and the rest
of it dropped, so a file without newlines cannot grow the buffer.

Bulk ``NCCL INFO`` lines (per-collective ``COLL`` traces, channel tables) carry nothing for
diagnosis and dominate big logs. They are skipped at C speed (``bytes.count``/``find`` over the
block, no Python work per line); NCCL INFO lines that name transports, versions, ranks, env
overrides or init state are kept. For every NCCL process (``host:pid:``) the last skipped line
is remembered in ``StreamStats.last_nccl``, so the analysis still knows where each rank's NCCL
output ended.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import add, contains, ge, gt, not_
from typing import IO

BLOCK = 1 << 20
MAX_LINE = 64 * 1024
NCCL_INFO = b" NCCL INFO "
# NCCL INFO lines worth parsing; every other NCCL INFO line is skipped unparsed
# ("Bootstrap : Using" / "NET/Socket : Using": the interface NCCL chose, once per rank)
NCCL_KEEP: tuple[bytes, ...] = (b" via ", b"NCCL version", b"Init COMPLETE", b" nRanks ", b"NCCL_", b".cc:",
                               b"exceeds", b"Bootstrap", b"NET/Socket : Using")


# Serving chatter: HTTP access lines (not 5xx), request lifecycle lines and speculative-decoding
# metrics. They dominate a busy server's log and say nothing beyond "serving"; of each run of them
# only the last line is parsed (it keeps the phase, the process's last line and the line numbers
# right). A 5xx status or a metrics line with 0.0 tokens/s is never part of a run.
_BULK_HINT = (b"HTTP/1.", b" request ", b"SpecDecoding", b"generation throughput: ")


@dataclass
class StreamStats:
    bytes_read: int = 0
    lines: int = 0
    long_lines: int = 0  # lines cut at max_line
    nccl_skipped: int = 0
    bulk_skipped: int = 0  # serving chatter lines not parsed (each run's last line is)
    # metrics lines with a non-zero generation throughput, counted as chatter: how many, and the
    # number of the last one (a stall that recovered is no stall)
    metrics_bulk: int = 0
    metrics_nonzero_last: int = 0
    metrics_nonzero: list[int] = field(default_factory=list)  # in the block being read
    last_nccl: dict[bytes, tuple[int, bytes]] = field(default_factory=dict)


def _nccl_key(line: bytes) -> bytes | None:
    """``b"host:pid:"`` of a raw NCCL line (also behind a vLLM prefix), else None."""
    j = line.find(NCCL_INFO)
    if j < 0:
        j = line.find(b" NCCL ")
        if j < 0:
            return None
    head = line[:j]
    b = head.rfind(b" [")
    if b > 0:
        head = head[:b]
    sp = head.rfind(b" ")
    if sp >= 0:
        head = head[sp + 1 :]
    c = head.rfind(b":")
    if c <= 0:
        return None
    return head[: c + 1]


_G = b"generation throughput: "
_RQ = b" request "
_REQ = (b"] Received request ", b"] Added request ", b"] Finished request ")
# the text each term of the chatter test needs (a block without it has no line of that term)
_TERMS = (_RQ, b"HTTP/1.", _G, b"] SpecDecoding metrics: ")


def _requests(sub: list[bytes]) -> list[bool]:
    """Request lifecycle lines. A line's first " request " is found and the text up to it tested
    for ending in one of the markers, both at C speed (map: no Python work per line); only a
    line whose first one ends none of them ("Aborted request", prose) is searched whole."""
    pos = list(map(bytes.find, sub, repeat(_RQ)))
    # no " request " (pos -1): the text up to index 8 is shorter than any marker, so False
    hit = list(map(bytes.endswith, sub, repeat(_REQ), repeat(0), map(add, pos, repeat(len(_RQ)))))
    for i in compress(range(len(sub)), map(gt, map(ge, pos, repeat(0)), hit)):
        ln = sub[i]
        hit[i] = _REQ[0] in ln or _REQ[1] in ln or _REQ[2] in ln
    return hit


def _busy_metrics(sub: list[bytes]) -> tuple[list[bool], list[bool]]:
    """(busy metrics lines: a non-zero generation throughput with requests running, the lines
    holding ``generation throughput: `` at all); the full test runs on the latter only."""
    g = list(map(contains, sub, repeat(_G)))
    hit = [False] * len(sub)
    for i in compress(range(len(sub)), g):
        ln = sub[i]
        hit[i] = b"generation throughput: 0.0 " not in ln and b"Running: " in ln
    return hit, g


def _plain(lines: list[bytes], buf: bytes) -> tuple[list[int], list[int], int]:
    """(indexes of the lines that are not serving chatter, the indexes of the lines that reached
    the metrics test holding ``generation throughput: ``, how many times they hold it).

    Each term of the chatter test takes its lines out of the rest at C speed (map/compress),
    the most common first: request lines, HTTP access lines that are not 5xx, busy metrics
    lines, spec-decode metrics. A line of a busy server's log costs one or two searches."""
    idx: list[int] = list(range(len(lines)))
    sub = lines
    g_idx: list[int] = []
    g_count = 0
    for stage, marker in enumerate(_TERMS):
        if not idx:
            break
        if marker not in buf:
            continue  # one C search of the block spares a test per line
        if stage == 0:
            hit = _requests(sub)
        elif stage == 1:
            hit = list(map(contains, sub, repeat(b"HTTP/1."))) if b'" 5' not in buf else \
                [b"HTTP/1." in ln and b'" 5' not in ln for ln in sub]
        elif stage == 2:
            hit, g = _busy_metrics(sub)
            g_idx = list(compress(idx, g))
            g_count = sum(map(bytes.count, compress(sub, g), repeat(_G)))
        else:
            hit = list(map(contains, sub, repeat(marker)))
        keep = list(map(not_, hit))
        idx = list(compress(idx, keep))
        sub = list(compress(sub, keep))
    return idx, g_idx, g_count


def _g_lines(buf: bytes) -> list[int]:
    """Indexes of the lines holding ``generation throughput: `` (each once), by search."""
    out: list[int] = []
    li, prev = 0, 0
    pos = buf.find(_G)
    while pos >= 0:
        li += buf.count(b"\n", prev, pos)
        prev = pos
        if not out or out[-1] != li:
            out.append(li)
        pos = buf.find(_G, pos + 1)
    return out


def _bulk_metrics(g_lines: list[int], base: int, n: int, plain: set[int],
                  st: StreamStats) -> None:
    """The busy metrics lines of a block read as chatter (the chatter lines among ``g_lines``):
    their numbers (``metrics_nonzero``, ``metrics_nonzero_last``) and how many are never
    parsed (``metrics_bulk``: a chatter line right after them ends their run)."""
    for li in g_lines:
        if li in plain:
            continue
        st.metrics_nonzero_last = base + 1 + li
        if len(st.metrics_nonzero) < 4096:
            st.metrics_nonzero.append(base + 1 + li)
        if li + 1 < n and li + 1 not in plain:
            st.metrics_bulk += 1


def _scan_bulk(buf: bytes, base: int, st: StreamStats) -> tuple[list[tuple[int, bytes]], int]:
    """A block without NCCL INFO lines: every line, except runs of serving chatter (only the
    last line of each run is kept). Substring tests only: no regex per line."""
    lines = buf.split(b"\n")
    lines.pop()
    n = len(lines)
    plain, g_idx, g_count = _plain(lines, buf)
    plain_set = set(plain)
    kept = set(plain)
    # a chatter line is kept when it ends its run: a plain line (or the block's end) follows
    kept.update(i - 1 for i in plain if i > 0 and i - 1 not in plain_set)
    if n and n - 1 not in plain_set:
        kept.add(n - 1)
    st.metrics_nonzero = []
    g_total = buf.count(_G)
    if g_total:
        # the metrics test saw every one (none on a line an earlier term took): its lines
        _bulk_metrics(g_idx if g_total == g_count else _g_lines(buf), base, n, plain_set, st)
    st.bulk_skipped += n - len(kept)
    return [(base + 1 + i, lines[i]) for i in sorted(kept)], n


def _scan_block(buf: bytes, base: int, st: StreamStats) -> tuple[list[tuple[int, bytes]], int]:
    """(lines that need parsing, number of lines) of a block of complete lines."""
    if NCCL_INFO not in buf:
        if any(h in buf for h in _BULK_HINT):
            return _scan_bulk(buf, base, st)
        lines = buf.split(b"\n")
        lines.pop()
        return [(base + i, ln) for i, ln in enumerate(lines, 1)], len(lines)
    n_lines = buf.count(b"\n")
    n_coll = buf.count(b": opCount ")
    if n_coll == n_lines and buf.count(NCCL_INFO) == n_lines:
        # a pure NCCL_DEBUG_SUBSYS=COLL flood: every line is one COLL trace, nothing to keep.
        # Three C-speed counts instead of splitting (only a line holding two glued NCCL traces
        # next to a non-NCCL line with equal counts could fool this)
        out: list[tuple[int, bytes]] = []
        n_nccl = n_lines
    else:
        lines = buf.split(b"\n")
        lines.pop()
        # occurrences are not lines (one line may hold two), so filter per line
        out = [(base + i, ln) for i, ln in enumerate(lines, 1) if NCCL_INFO not in ln]
        n_nccl = n_lines - len(out)
    # the keep-literal searches are needed only when some NCCL line is not a COLL trace
    kept = _keep_nccl(buf, base, st, out) if n_coll != n_nccl else 0
    st.nccl_skipped += n_nccl - kept
    _last_nccl(buf, base, n_lines, st)
    return out, n_lines


def _keep_nccl(buf: bytes, base: int, st: StreamStats, out: list[tuple[int, bytes]]) -> int:
    """Add the NCCL lines that carry something (``NCCL_KEEP``) to ``out``; how many."""
    starts: set[int] = set()
    for k in NCCL_KEEP:
        pos = buf.find(k)
        while pos >= 0:
            s = buf.rfind(b"\n", 0, pos) + 1
            e = buf.find(b"\n", pos)
            if NCCL_INFO in buf[s:e]:
                starts.add(s)
            pos = buf.find(k, e)
    if not starts:
        return 0
    prev, lineno = 0, base + 1
    for s in sorted(starts):
        lineno += buf.count(b"\n", prev, s)
        prev = s
        e = buf.find(b"\n", s)
        out.append((lineno, buf[s:e]))
        key = _nccl_key(buf[s:e])
        if key is not None and key not in st.last_nccl:
            st.last_nccl[key] = (lineno, buf[s:e])
    out.sort(key=lambda x: x[0])
    return len(starts)


def _last_nccl(buf: bytes, base: int, n_lines: int, st: StreamStats) -> None:
    """The last line of every known NCCL process in this block."""
    last_nl = len(buf)
    for key in list(st.last_nccl):
        p = buf.rfind(key)
        if p < 0:
            continue
        s = buf.rfind(b"\n", 0, p) + 1
        e = buf.find(b"\n", p)
        if NCCL_INFO not in buf[s:e] and b" NCCL " not in buf[s:e]:
            continue
        lineno = base + n_lines - buf.count(b"\n", e, last_nl) + 1
        st.last_nccl[key] = (lineno, buf[s:e])


def scan(
    fh: IO[bytes], block: int = BLOCK, max_line: int = MAX_LINE, stats: StreamStats | None = None
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line_number, line)`` for every line worth parsing, streaming."""
    st = stats if stats is not None else StreamStats()
    carry = b""
    dropping = False  # inside an over-long line whose head was already emitted
    base = 0  # number of lines before the current block
    while True:
        data = fh.read(block)
        if not data:
            break
        st.bytes_read += len(data)
        if dropping:
            nl = data.find(b"\n")
            if nl < 0:
                continue
            data = data[nl + 1 :]
            dropping = False
        buf = carry + data if carry else data
        cut = buf.rfind(b"\n") + 1
        carry = buf[cut:]
        buf = buf[:cut]
        if len(carry) > max_line:
            # over-long line: emit its head now, drop the rest up to the next newline
            head = carry[:max_line]
            carry = b""
            dropping = True
        else:
            head = None
        if buf:
            rows, n = _scan_block(buf, base, st)
            for lineno, line in rows:
                if len(line) > max_line:
                    st.long_lines += 1
                    line = line[:max_line]
                yield lineno, (line[:-1] if line.endswith(b"\r") else line)
            base += n
            st.lines += n
        if head is not None:
            base += 1
            st.lines += 1
            st.long_lines += 1
            yield base, (head[:-1] if head.endswith(b"\r") else head)
    if carry:
        base += 1
        st.lines += 1
        yield base, (carry[:-1] if carry.endswith(b"\r") else carry)

