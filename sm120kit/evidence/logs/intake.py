"""Reading one source: sniff its head (binary? a pasted report?), then stream its lines."""

from __future__ import annotations

import io
import re
from typing import IO, TYPE_CHECKING

from sm120kit.evidence.logs.envelope import Envelope
from sm120kit.evidence.logs.paste import HEAD, PasteProfile, PasteReader
from sm120kit.evidence.logs.stream import StreamStats, scan

if TYPE_CHECKING:
    from sm120kit.evidence.logs.analyze import LogAnalysis

_SOURCE_RANK = re.compile(r"(?:^|[^a-z])(?:rank|worker)[_-]?(?P<r>\d+)", re.IGNORECASE)


def source_rank(source: str) -> str | None:
    """``rank N`` when the file name says which rank wrote it (``rank3.log``, ``worker_1.txt``)."""
    m = _SOURCE_RANK.search(source.rsplit("/", 1)[-1])
    return f"rank {int(m.group('r'))}" if m else None


def read_stream(a: LogAnalysis, source: str, fh: IO[bytes]) -> StreamStats:
    """Feed ``fh`` into ``a`` line by line; a truncated stream still reports what it read."""
    st = StreamStats()
    a.stats[source] = st
    a.proc_table.name_source(source, source_rank(source))
    head = fh.read(HEAD + 1)
    whole = len(head) <= HEAD
    if head and _binary(head):
        a.binary_sources.append(source)
    prof = PasteProfile.detect(head, whole)
    a.tickets[source] = prof.markdown
    stream: IO[bytes] = _Prefixed(head, fh)  # type: ignore[assignment]
    env = Envelope.detect(head)
    if env is not None:  # collectors' / other engines' line prefixes: analysed without them
        a.envelopes[source] = env
    try:
        if prof.active:
            rd = PasteReader(prof)
            rows = ((n, r.decode("utf-8", "replace")) for n, r in scan(stream, stats=st))
            for lineno, text in rd.lines(rows):
                a.feed_text(source, lineno, text)
            a.paste[source] = {"joined_lines": rd.joined, "fences": rd.fenced,
                               "repairs": [k for k, v in vars(prof).items() if v is True]}
        else:
            for lineno, raw in scan(stream, stats=st):
                a.feed_line(source, lineno, raw)
        a.serving.bulk_metrics(source, st)
    finally:
        for lineno, raw in st.last_nccl.values():
            a.feed_line(source, lineno, raw, tail_only=True)
        a.sources.append({"source": source, "bytes": st.bytes_read, "lines": st.lines,
                          "long_lines": st.long_lines, "nccl_lines_skipped": st.nccl_skipped})
    return st


class _Prefixed(io.RawIOBase):
    """A binary stream that first returns ``head`` (already read to look at), then ``fh``."""

    def __init__(self, head: bytes, fh: IO[bytes]) -> None:
        self._head = head
        self._fh = fh

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if self._head:
            if n < 0 or n >= len(self._head):
                out, self._head = self._head, b""
                if n < 0:
                    return out + self._fh.read()
                return out
            out, self._head = self._head[:n], self._head[n:]
            return out
        return self._fh.read(n)


def _binary(head: bytes) -> bool:
    """No text evidence: NUL bytes, or mostly bytes that are neither UTF-8 nor printable."""
    sample = head[:8192]
    if sample.count(b"\x00") > len(sample) // 100:
        return True
    text = sample.decode("utf-8", "replace")
    bad = text.count("\ufffd") + sum(1 for c in text if ord(c) < 32 and c not in "\t\n\r\x1b\x0c")
    return bad > len(text) // 10
