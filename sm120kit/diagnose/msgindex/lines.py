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
    # a library's string (torch's C++ messages are read from its shared libraries, no call
    # site) is a raised message when the line is an exception line that carries it
    raised = exception_line(_message(line)) is not None
    top = 0
    ms = [m for m in (idx.match(line, limit=8) if idx is not None else [])
          if m.template.is_error or (raised and m.template.kind == "binary-string")]
    for m in ms:
        t = m.template
        top = top or t.litlen
        if t.litlen < top:
            break
        # a message that joins several sentences (torch's socket errors say what failed to
        # listen, then each address it failed to bind) is covered by its templates together
        cover = sum({x.template.text: x.template.litlen for x in ms
                     if x.template.category == t.category}.values())
        if t.category not in ("none", *EFFECTS) and t.litlen >= MIN_LITERAL \
                and min(1.0, cover / core) >= MIN_COVER:
            return m
    return None
