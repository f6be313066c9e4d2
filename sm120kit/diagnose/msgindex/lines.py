"""Which index template a failure line is, for a diagnosis: the message without its log
prefixes, the frames that say nothing the index knows, and the first template that names a
cause (``rules/index_match.py`` turns it into a finding)."""

from __future__ import annotations

from sm120kit.diagnose.msgindex import Match, try_load
from sm120kit.evidence.logs.envelope import Envelope
from sm120kit.evidence.logs.parsers import exception_line
from sm120kit.evidence.logs.prefix import attribute

# share of the message (the line without its prefixes and exception type) that the template's
# literal text covers, and that literal text's length: below either, a match says too little
MIN_COVER, MIN_LITERAL = 0.3, 16
_ENVELOPE = Envelope()  # a collector's or another engine's stamp (SGLang, journald, CRI, TGI)
EFFECTS = ("rank-crashed", "unknown")  # crash messages (rules/fold.py GENERIC): effects, not causes


def _message(text: str) -> str:
    return attribute(_ENVELOPE.strip(text)).message or text


def is_frame(text: str) -> bool:
    """A traceback's frame, header or caret line."""
    msg = _message(text).lstrip()
    return msg.startswith(('File "', "Traceback (most recent", "^", "~"))


def message_core(text: str) -> str:
    """The message a template's text stands for: the line without its log prefixes and, on an
    exception line, without the exception type."""
    msg = _message(text)
    exc = exception_line(msg)
    return (exc[1] if exc is not None and exc[1] else msg).strip()


def cause_match(line: str) -> Match | None:
    """The most specific error-level or raised template of ``line`` whose category names a
    cause (not ``none``, not a crash effect), literal and covering enough of the message. A
    shorter template never stands in for a more specific one that says ``none``: only the
    templates as specific as the first error-level one are weighed."""
    idx = try_load()
    core = len(message_core(line)) or 1
    top = 0
    for m in idx.match(line) if idx is not None else []:
        t = m.template
        if not t.is_error:
            continue
        top = top or t.litlen
        if t.litlen < top:
            break
        if t.category not in ("none", *EFFECTS) and t.litlen >= MIN_LITERAL \
                and min(1.0, t.litlen / core) >= MIN_COVER:
            return m
    return None
