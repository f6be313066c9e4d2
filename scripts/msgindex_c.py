"""C/C++/CUDA message extraction for the message index (issue 29), and the special sources.

What it reads (each a pure function of files on disk, no network):

- ``extract_c(root, project, version, globs)``: every C/C++/CUDA source under ``root`` is
  tokenized (comments dropped, line continuations joined, string literals decoded with adjacent
  literals concatenated, raw strings kept) and the literal messages that reach an error or log
  call become one :class:`RawTemplate` each:

  ========================================  =========  ==========================================
  call                                      kind       exc / level
  ========================================  =========  ==========================================
  ``TORCH_CHECK(cond, ...)`` (+ _VALUE,     check      ``c10::Error`` (``c10::ValueError`` ...);
  _TYPE, _INDEX, _NOT_IMPLEMENTED)                     no message: torch's "Expected cond to be
                                                       true, but got false."
  ``TORCH_CHECK_WITH(T, cond, ...)``,       check      ``c10::T`` (DistBackendError ...)
  ``C10D_CHECK_WITH``
  ``TORCH_INTERNAL_ASSERT(cond, ...)``      check      ``c10::Error``, "INTERNAL ASSERT FAILED at"
  ``C10_THROW_ERROR(T, msg)``,              raise      ``c10::T``
  ``C10D_THROW_ERROR(T, ...)``
  ``throw X(msg, ...)``                     raise      ``X`` (``std::runtime_error`` ...)
  ``TORCH_WARN(...)``, ``TORCH_WARN_ONCE``  warn-macro level warning
  ``LOG(ERROR|WARNING|FATAL) << ...``       log        level error / warning / fatal
  ``C10D_ERROR|WARNING|INFO(fmt, ...)``     log        "[c10d] " + fmt-style ``{}`` holes
  NCCL ``WARN(fmt, ...)``                   warn-macro "NCCL WARN " + printf holes, level warn
  NCCL ``INFO(FLAGS, fmt, ...)``            log        "NCCL INFO " + printf holes, level info
  ``fprintf(stderr, fmt, ...)``             print      printf holes
  HAMi-core ``LOG_ERROR|WARN|MSG|INFO``     log        "[HAMI-core ERROR (...)]: " prefix
  FlashInfer ``FLASHINFER_CHECK(cond,...)`` check      ``flashinfer::Error``
  ``FLASHINFER_ERROR(msg)``                 raise      ``flashinfer::Error``
  ``FLASHINFER_WARN(...)``                  warn-macro level warning
  ``TVM_FFI_ICHECK*(...) << ...``           check      ``tvm::ffi::InternalError``
  ``TVM_FFI_THROW(T) << ...``               raise      ``T``
  ``case CODE: return "..."`` in a          error-     ``CODE`` (NCCL's ``ncclGetErrorString``)
  ``*GetErrorString``/``strerror`` function string
  ========================================  =========  ==========================================

  Message expressions: ``c10::str(a, b, ...)`` / macro varargs (pieces joined), ``a + b``,
  ``fmt::format("...{}", x)``, ``std::string(...)``, ``std::to_string(x)`` (a ``num`` hole),
  ``<<`` stream pieces, a variable assigned earlier in the same function
  (``std::string msg = c10::str(...)``; ``std::ostringstream oss; oss << ...``). A literal stays
  literal, any other expression is a hole: ``any`` unless typed by a printf conversion
  (``%d %i %u %ld %lu %zu %lld`` int, ``%f %g %e`` float, ``%x %p`` hex, ``%s`` any) or
  ``PRIu64``-style macros. ``function`` is the nearest preceding function definition
  (a line-based guess: cheap, right for the usual one-definition-per-line layout).

- ``extract_binary_strings(lib, project, version, keep)``: the NUL-terminated printable strings
  of a shared library's ``.rodata`` (the torch CUDA wheel's ``libtorch_cuda.so`` holds
  ProcessGroupNCCL's and NCCLUtils' message pieces; the source is not reachable here), one
  literal-only template each (kind ``binary-string``), kept when ``keep`` says so.

- ``cuda_error_strings(headers, libcudart, version)``: the CUDA runtime ``cudaError_t`` names
  and strings and the driver ``CUresult`` ``CUDA_ERROR_*`` names and strings. Names, values and
  doc comments come from ``driver_types.h`` and ``cuda.h``. The runtime's strings are the exact
  ones ``cudaGetErrorString`` returns: ``libcudart`` is loaded with ctypes and asked for every
  enum value (a table lookup that needs no GPU and no driver). The driver's ``cuGetErrorString``
  needs ``libcuda`` (the driver), absent on a machine without a GPU: a driver code's string is
  the runtime's string for the same numeric value (the two enums share their codes since
  CUDA 10.1: ``CUDA_ERROR_ILLEGAL_ADDRESS`` = ``cudaErrorIllegalAddress`` = 700), marked
  ``cudaGetErrorString@same-code`` when the names agree after dropping ``CUDA_ERROR_`` /
  ``cudaError`` and underscores and ``...@same-code-other-name`` when they do not
  (``CUDA_ERROR_OUT_OF_MEMORY`` = ``cudaErrorMemoryAllocation`` = 2); a driver code with no
  runtime twin gets the first sentence of its ``cuda.h`` doc comment (``doc-comment``). That
  sentence is documentation, not what ``cudaGetErrorString`` returns (``out of memory`` vs
  "The API call failed because it was unable to allocate enough memory ..."), so it is only
  used where no library string exists. ``function`` says which source each string has; the
  enum name is the ``exc``.

``c_inputs()`` lists the real inputs the committed ``scripts/msgindex-sources/c-templates.jsonl.gz``
was made from (NCCL, HAMi-core and FlashInfer git tags, the torch wheels' headers and libraries,
the CUDA runtime wheels); ``scripts/msgindex-sources/regenerate-c.sh`` fetches and unpacks them
and runs this script. Run alone::

    python scripts/msgindex_c.py --source nccl@2.27.7=DIR --source torch@2.9.1=DIR \\
        --binary torch@2.9.1=libtorch_cuda.so --cuda 12.9.79=INCLUDE_DIR:LIBCUDART --out FILE.jsonl.gz

It prints one JSON count record per input and writes a header line (inputs and counts) and one
RawTemplate per line (gzip when the name ends in ``.gz``).
"""

from __future__ import annotations

import argparse
import ctypes
import gzip
import json
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from msgindex_common import RawTemplate  # the shared record (scripts/msgindex_common.py)

Part = tuple[str, str]
DEFAULT_GLOBS = ("**/*.c", "**/*.cc", "**/*.cpp", "**/*.cu", "**/*.cuh", "**/*.h", "**/*.hpp")

# ---------------------------------------------------------------------------------------------
# tokens

_TOKEN = re.compile(
    r"""(?P<ws>(?:[ \t\r\f\v]|\\\n)+)
      |(?P<nl>\n)
      |(?P<lcom>//(?:[^\n\\]|\\.)*)
      |(?P<bcom>/\*.*?\*/)
      |(?P<raw>(?:u8|u|U|L)?R"(?P<delim>[^()\\\s"]{0,16})\((?P<rawbody>.*?)\)(?P=delim)")
      |(?P<str>(?:u8|u|U|L)?"(?:\\.|[^"\\\n])*")
      |(?P<chr>(?:u8|u|U|L)?'(?:\\.|[^'\\\n])+')
      |(?P<ident>[A-Za-z_]\w*)
      |(?P<num>\.?\d(?:[\w.]|[eEpP][-+])*)
      |(?P<punct><<=|>>=|<<|>>|::|->|\+\+|--|&&|\|\||[-+*/%<>=!&|^]=|.)
    """,
    re.X | re.S,
)


@dataclass(frozen=True)
class Tok:
    kind: str  # "str" | "chr" | "ident" | "num" | "punct"
    text: str  # decoded value for "str"; source text otherwise
    line: int
    start: int  # offset in the file text
    end: int


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v",
            "\\": "\\", "'": "'", '"': '"', "?": "?", "0": "\0", "e": "\x1b"}
_ESC = re.compile(r"\\(x[0-9a-fA-F]+|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{1,3}|.)", re.S)


def _decode(body: str) -> str:
    """A C string literal's body with its escapes decoded."""
    def one(m: re.Match[str]) -> str:
        e = m.group(1)
        if e[0] in "xuU" and len(e) > 1:
            return chr(int(e[1:], 16) % 0x110000)
        if e[0] in "01234567":
            return chr(int(e, 8))
        return _ESCAPES.get(e, e)
    return _ESC.sub(one, body)


def tokenize(text: str) -> list[Tok]:
    """C/C++ tokens with comments dropped and string literals decoded (not yet concatenated)."""
    toks: list[Tok] = []
    line = 1
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        s = m.group(0)
        if kind in ("ws", "nl", "lcom", "bcom"):
            line += s.count("\n")
            continue
        if kind == "raw":
            toks.append(Tok("str", m.group("rawbody"), line, m.start(), m.end()))
        elif kind == "str":
            toks.append(Tok("str", _decode(s[s.index('"') + 1:-1]), line, m.start(), m.end()))
        elif kind in ("chr", "ident", "num", "punct"):
            toks.append(Tok(kind, s, line, m.start(), m.end()))
        line += s.count("\n")
    return toks


def _match_parens(toks: Sequence[Tok]) -> dict[int, int]:
    """Index of each opening bracket -> index of its closing one."""
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[int] = []
    out: dict[int, int] = {}
    for i, t in enumerate(toks):
        if t.kind != "punct":
            continue
        if t.text in "([{":
            stack.append(i)
        elif t.text in pairs:
            while stack and toks[stack[-1]].text != pairs[t.text]:
                stack.pop()  # an unbalanced bracket (preprocessor branches): drop it
            if stack:
                out[stack.pop()] = i
    return out


def _split_top(toks: Sequence[Tok], sep: str) -> list[list[Tok]]:
    """Split a token run at the separator where no bracket is open."""
    out: list[list[Tok]] = [[]]
    depth = 0
    for t in toks:
        if t.kind == "punct" and t.text in "([{":
            depth += 1
        elif t.kind == "punct" and t.text in ")]}":
            depth -= 1
        if depth == 0 and t.kind == "punct" and t.text == sep:
            out.append([])
        else:
            out[-1].append(t)
    return out


# ---------------------------------------------------------------------------------------------
# message expressions -> parts

_STR_FUNCS = {"c10::str", "str", "c10::detail::_str_wrapper", "std::string", "string",
              "std::string_view", "c10::toString", "std::move"}
_NUM_FUNCS = {"std::to_string", "to_string", "c10::to_string"}
_FMT_FUNCS = {"fmt::format", "format", "std::format", "c10d::detail::formatLogMessage",
              "fmt::sprintf"}
_PRI = re.compile(r"PRI([diouxX])(?:8|16|32|64|MAX|PTR|LEAST\d+|FAST\d+)")


@dataclass
class _Ctx:
    toks: Sequence[Tok]
    parens: dict[int, int]
    lo: int                # variables are looked up back to here (the function's start)
    at: int                # position of the call being read (variables are looked up before it)
    depth: int = 0


def _qualname(toks: Sequence[Tok], i: int) -> tuple[str, int]:
    """The qualified name starting at i (``c10::str``) and the index after it."""
    name = ""
    j = i
    while j < len(toks):
        t = toks[j]
        if t.kind == "ident" or (t.kind == "punct" and t.text == "::"):
            name += t.text
            j += 1
        else:
            break
    return name, j


def _only_strings(toks: Sequence[Tok]) -> bool:
    return bool(toks) and all(t.kind == "str" or _PRI.fullmatch(t.text) for t in toks)


def _concat(toks: Sequence[Tok]) -> str:
    """Adjacent literals joined; a ``PRIu64`` macro becomes its printf length+conversion."""
    out = []
    for t in toks:
        if t.kind == "str":
            out.append(t.text)
        else:
            m = _PRI.fullmatch(t.text)
            out.append("l" + m.group(1) if m else "\0")
    return "".join(out)


def expr_parts(toks: Sequence[Tok], ctx: _Ctx) -> list[Part]:
    """One message expression as parts: literals kept, everything else a hole."""
    toks = _strip_parens(toks)
    if not toks:
        return []
    if _only_strings(toks):
        return [("lit", _concat(toks))]
    pieces = _split_top(toks, "+")
    if len(pieces) > 1 and all(pieces):
        return [p for piece in pieces for p in expr_parts(piece, ctx)]
    if len(toks) == 1 and toks[0].kind == "num":
        return [("hole", "num")]
    if ctx.depth < 4:
        call = _call_parts(toks, ctx)
        if call is not None:
            return call
        var = _variable_parts(toks, ctx)
        if var is not None:
            return var
    return [("hole", "any")]


def _strip_parens(toks: Sequence[Tok]) -> Sequence[Tok]:
    while (len(toks) >= 2 and toks[0].text == "(" and toks[-1].text == ")"
           and toks[0].kind == "punct" and _closes_at_end(toks)):
        toks = toks[1:-1]
    return toks


def _closes_at_end(toks: Sequence[Tok]) -> bool:
    depth = 0
    for i, t in enumerate(toks):
        if t.kind == "punct" and t.text in "([{":
            depth += 1
        elif t.kind == "punct" and t.text in ")]}":
            depth -= 1
            if depth == 0 and i != len(toks) - 1:
                return False
    return True


def _call_parts(toks: Sequence[Tok], ctx: _Ctx) -> list[Part] | None:
    """``c10::str(...)``, ``fmt::format(...)``, ``std::to_string(x)``, ``std::string(...)``."""
    name, j = _qualname(toks, 0)
    if not name or j >= len(toks) or toks[j].text != "(" or toks[-1].text != ")":
        return None
    if not _closes_at_end(toks[j:]):
        return None
    args = _split_top(toks[j + 1:-1], ",")
    sub = _Ctx(ctx.toks, ctx.parens, ctx.lo, ctx.at, ctx.depth + 1)
    if name in _NUM_FUNCS:
        return [("hole", "num")]
    if name in _STR_FUNCS:
        return [p for a in args for p in expr_parts(a, sub)] if args != [[]] else []
    if name in _FMT_FUNCS and args and _only_strings(args[0]):
        return fmt_parts(_concat(args[0]))
    return None


def _variable_parts(toks: Sequence[Tok], ctx: _Ctx) -> list[Part] | None:
    """A name (``msg``, ``oss.str()``, ``err.c_str()``) assigned earlier in the function."""
    if not toks or toks[0].kind != "ident":
        return None
    name = toks[0].text
    rest = [t.text for t in toks[1:]]
    if rest not in ([], [".", "str", "(", ")"], [".", "c_str", "(", ")"],
                    [".", "str", "(", ")", ".", "c_str", "(", ")"]):
        return None
    return _lookup(name, ctx)


def _lookup(name: str, ctx: _Ctx) -> list[Part] | None:
    """Walk back from the call (at most 3000 tokens, not past the function's start) for
    ``name = expr;`` / ``std::string name(expr);`` or ``name << a << b;`` statements."""
    toks = ctx.toks
    stream: list[list[Part]] = []
    lo = max(ctx.lo, ctx.at - 3000)
    sub = _Ctx(ctx.toks, ctx.parens, ctx.lo, 0, ctx.depth + 1)
    i = ctx.at - 1
    while i >= lo:
        t = toks[i]
        if t.kind == "ident" and t.text == name and (i == 0 or toks[i - 1].text not in (".", "->")):
            end = _stmt_end(toks, i)
            body = toks[i + 1:end]
            if body and body[0].text in ("=", "+=", "<<", "(", "{"):
                sub.at = i
                if body[0].text in ("(", "{"):
                    body = body[1:-1]
                else:
                    body = body[1:]
                if toks[i + 1].text == "<<":
                    stream.insert(0, _stream_parts(body, sub))
                elif toks[i + 1].text == "+=":
                    stream.insert(0, expr_parts(body, sub))
                else:
                    return expr_parts(body, sub) + [p for s in stream for p in s]
        i -= 1
    return [p for s in stream for p in s] or None


def _stmt_end(toks: Sequence[Tok], i: int) -> int:
    depth = 0
    j = i
    while j < len(toks):
        t = toks[j]
        if t.kind == "punct":
            if t.text in "([{":
                depth += 1
            elif t.text in ")]}":
                depth -= 1
                if depth < 0:
                    return j
            elif t.text == ";" and depth == 0:
                return j
        j += 1
    return j


def _stream_parts(toks: Sequence[Tok], ctx: _Ctx) -> list[Part]:
    """``a << "lit" << b`` pieces (an ``std::endl`` is a line break)."""
    out: list[Part] = []
    for piece in _split_top(toks, "<<"):
        if [t.text for t in piece] in (["std", "::", "endl"], ["endl"]):
            out.append(("lit", "\n"))
        elif piece:
            out.extend(expr_parts(piece, ctx))
    return out


_PRINTF = re.compile(r"%([-+ #0']*)(\d+|\*)?(?:\.(\d+|\*))?(hh|h|ll|l|j|z|t|L|q|I64|I32)?"
                     r"([diouxXeEfFgGaAcspn%])")
_PRINTF_TYPE = {"d": "int", "i": "int", "u": "int", "o": "int", "x": "hex", "X": "hex",
                "p": "hex", "e": "float", "E": "float", "f": "float", "F": "float", "g": "float",
                "G": "float", "a": "float", "A": "float", "c": "any", "s": "any", "n": "any"}


def printf_parts(fmt: str) -> list[Part]:
    """A printf format as parts; an unknown macro spliced into the format (``\\0``) is a hole."""
    out: list[Part] = []
    pos = 0
    for m in _PRINTF.finditer(fmt):
        out.extend(_lit_or_holes(fmt[pos:m.start()]))
        conv = m.group(5)
        if conv == "%":
            out.append(("lit", "%"))
        elif conv != "n":
            out.append(("hole", _PRINTF_TYPE[conv]))
        pos = m.end()
    out.extend(_lit_or_holes(fmt[pos:]))
    return out


def _lit_or_holes(s: str) -> list[Part]:
    out: list[Part] = []
    for i, chunk in enumerate(s.split("\0")):
        if i:
            out.append(("hole", "any"))
        if chunk:
            out.append(("lit", chunk))
    return out


_FMT_FIELD = re.compile(r"\{\{|\}\}|\{[^{}]*\}")


def fmt_parts(fmt: str) -> list[Part]:
    """A ``fmt``/``std::format`` string as parts: each ``{...}`` field a hole."""
    out: list[Part] = []
    pos = 0
    for m in _FMT_FIELD.finditer(fmt):
        out.extend(_lit_or_holes(fmt[pos:m.start()]))
        tok = m.group(0)
        if tok in ("{{", "}}"):
            out.append(("lit", tok[0]))
        else:
            spec = tok[1:-1].split(":", 1)[-1] if ":" in tok else ""
            out.append(("hole", "int" if spec[-1:] in ("d",) else
                        "hex" if spec[-1:] in ("x", "X") else
                        "float" if spec[-1:] in ("f", "g", "e") else "any"))
        pos = m.end()
    out.extend(_lit_or_holes(fmt[pos:]))
    return out


def _clean(parts: Iterable[Part]) -> tuple[Part, ...]:
    """Merge adjacent literals and adjacent holes (two different types become ``any``)."""
    out: list[Part] = []
    for kind, val in parts:
        if kind == "lit" and not val:
            continue
        if out and out[-1][0] == kind == "lit":
            out[-1] = ("lit", out[-1][1] + val)
        elif out and out[-1][0] == kind == "hole":
            if out[-1][1] != val:
                out[-1] = ("hole", "any")
        else:
            out.append((kind, val))
    return tuple(out)


def has_literal(parts: Sequence[Part]) -> bool:
    return any(k == "lit" and any(c.isalpha() for c in v) for k, v in parts)


def _worth(msg: Sequence[Part], spec: CallSpec) -> bool:
    """A message is kept when it has a word of its own (not the macro's prefix), or, under a
    prefix such as "NCCL INFO ", three literal marks: NCCL's ``"%s:%d -> %d"`` trace of an
    error's path (``NCCL INFO transport/shm.cc:551 -> 2``) is a shape worth knowing."""
    if has_literal(msg):
        return True
    marks = sum(len(v.strip()) for k, v in msg if k == "lit")
    return bool(spec.prefix) and marks >= 3


# ---------------------------------------------------------------------------------------------
# the calls

@dataclass(frozen=True)
class CallSpec:
    kind: str            # RawTemplate.kind
    form: str            # how the arguments hold the message (see _message)
    exc: str | None = None
    level: str | None = None
    prefix: tuple[Part, ...] = ()
    sep: str = ""        # put between varargs pieces (FlashInfer joins them with a space)


_HAMI = {"LOG_ERROR": ("error", "[HAMI-core ERROR ("), "LOG_WARN": ("warn", "[HAMI-core Warn("),
         "LOG_MSG": ("msg", "[HAMI-core Msg("), "LOG_INFO": ("info", "[HAMI-core Info(")}

CALLS: dict[str, CallSpec] = {
    "TORCH_CHECK": CallSpec("check", "check", "c10::Error", "error"),
    "TORCH_CHECK_VALUE": CallSpec("check", "check", "c10::ValueError", "error"),
    "TORCH_CHECK_TYPE": CallSpec("check", "check", "c10::TypeError", "error"),
    "TORCH_CHECK_INDEX": CallSpec("check", "check", "c10::IndexError", "error"),
    "TORCH_CHECK_NOT_IMPLEMENTED": CallSpec("check", "check", "c10::NotImplementedError", "error"),
    "TORCH_CHECK_WITH": CallSpec("check", "check_with", None, "error"),
    "C10D_CHECK_WITH": CallSpec("check", "check_with", None, "error"),
    "TORCH_INTERNAL_ASSERT": CallSpec("check", "assert", "c10::Error", "error"),
    "C10_THROW_ERROR": CallSpec("raise", "typed", None, "error"),
    "C10D_THROW_ERROR": CallSpec("raise", "typed", None, "error"),
    "AT_ERROR": CallSpec("raise", "varargs", "c10::Error", "error"),
    "TORCH_WARN": CallSpec("warn-macro", "varargs", None, "warning"),
    "TORCH_WARN_ONCE": CallSpec("warn-macro", "varargs", None, "warning"),
    "C10D_ERROR": CallSpec("log", "fmt", None, "error", (("lit", "[c10d] "),)),
    "C10D_WARNING": CallSpec("log", "fmt", None, "warning", (("lit", "[c10d] "),)),
    "C10D_INFO": CallSpec("log", "fmt", None, "info", (("lit", "[c10d] "),)),
    "WARN": CallSpec("warn-macro", "printf", None, "warn", (("lit", "NCCL WARN "),)),
    "INFO": CallSpec("log", "printf_skip1", None, "info", (("lit", "NCCL INFO "),)),
    "fprintf": CallSpec("print", "printf_stderr", None, None),
    "FLASHINFER_CHECK": CallSpec("check", "fi_check", "flashinfer::Error", "error", sep=" "),
    "FLASHINFER_ERROR": CallSpec("raise", "varargs", "flashinfer::Error", "error"),
    "FLASHINFER_WARN": CallSpec("warn-macro", "varargs", None, "warning", sep=" "),
    **{name: CallSpec("log", "printf", None, level,
                      (("lit", head), ("hole", "any"), ("lit", ")]: ")))
       for name, (level, head) in _HAMI.items()},
}
# macro calls whose message follows as a stream: ``LOG(ERROR) << "..." << x;``
STREAMS: dict[str, CallSpec] = {
    "LOG": CallSpec("log", "log_level"),
    "TVM_FFI_ICHECK": CallSpec("check", "icheck", "tvm::ffi::InternalError", "error"),
    "TVM_FFI_ICHECK_EQ": CallSpec("check", "none", "tvm::ffi::InternalError", "error"),
    "TVM_FFI_ICHECK_NE": CallSpec("check", "none", "tvm::ffi::InternalError", "error"),
    "TVM_FFI_ICHECK_LT": CallSpec("check", "none", "tvm::ffi::InternalError", "error"),
    "TVM_FFI_ICHECK_LE": CallSpec("check", "none", "tvm::ffi::InternalError", "error"),
    "TVM_FFI_ICHECK_GT": CallSpec("check", "none", "tvm::ffi::InternalError", "error"),
    "TVM_FFI_ICHECK_GE": CallSpec("check", "none", "tvm::ffi::InternalError", "error"),
    "TVM_FFI_THROW": CallSpec("raise", "exc_arg", None, "error"),
}
_LOG_LEVELS = {"ERROR": "error", "WARNING": "warning", "FATAL": "fatal", "DFATAL": "fatal"}
_NOT_FUNCS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype", "defined",
              "alignof", "static_assert", "noexcept", "__attribute__", "__declspec"}


@dataclass(frozen=True)
class Found:
    """One message found in a token stream (before it becomes a RawTemplate)."""
    line: int
    at: int
    kind: str
    exc: str | None
    level: str | None
    parts: tuple[Part, ...]


def _src(text: str, toks: Sequence[Tok]) -> str:
    """The source text of a token run, whitespace collapsed (what ``#cond`` stringifies to)."""
    if not toks:
        return ""
    return re.sub(r"\s+", " ", text[toks[0].start:toks[-1].end]).strip()


def _exc_name(toks: Sequence[Tok]) -> str:
    name = "".join(t.text for t in toks)
    return name if "::" in name else f"c10::{name}"


def _joined(args: Sequence[Sequence[Tok]], ctx: _Ctx, sep: str = "") -> list[Part]:
    out: list[Part] = []
    for i, a in enumerate(args):
        if i and sep:
            out.append(("lit", sep))
        out.extend(expr_parts(a, ctx))
    return out


def _printf_arg(a: Sequence[Tok], ctx: _Ctx) -> list[Part]:
    return printf_parts(_concat(a)) if _only_strings(a) else expr_parts(a, ctx)


_Msg = tuple[list[Part], str | None] | None


def _m_check(spec: CallSpec, args: list[list[Tok]], ctx: _Ctx, text: str) -> _Msg:
    if len(args) < 2 or args[1:] == [[]]:
        return [("lit", f"Expected {_src(text, args[0])} to be true, but got false.")], spec.exc
    return _joined(args[1:], ctx), spec.exc


def _m_check_with(spec: CallSpec, args: list[list[Tok]], ctx: _Ctx, text: str) -> _Msg:
    return (_joined(args[2:], ctx), _exc_name(args[0])) if len(args) >= 3 else None


def _m_assert(spec: CallSpec, args: list[list[Tok]], ctx: _Ctx, text: str) -> _Msg:
    head: list[Part] = [("lit", f"{_src(text, args[0])} INTERNAL ASSERT FAILED at "),
                        ("hole", "any"), ("lit", ", please report a bug to PyTorch. ")]
    return head + _joined(args[1:], ctx), spec.exc


def _m_typed(spec: CallSpec, args: list[list[Tok]], ctx: _Ctx, text: str) -> _Msg:
    return (_joined(args[1:], ctx), _exc_name(args[0])) if len(args) >= 2 else None


def _m_varargs(spec: CallSpec, args: list[list[Tok]], ctx: _Ctx, text: str) -> _Msg:
    return _joined(args, ctx, spec.sep), spec.exc


def _m_fi_check(spec: CallSpec, args: list[list[Tok]], ctx: _Ctx, text: str) -> _Msg:
    if len(args) < 2 or args[1:] == [[]]:
        return [("lit", f"Check failed: {_src(text, args[0])}")], spec.exc
    return _joined(args[1:], ctx, spec.sep), spec.exc


def _m_fmt(spec: CallSpec, args: list[list[Tok]], ctx: _Ctx, text: str) -> _Msg:
    parts = fmt_parts(_concat(args[0])) if _only_strings(args[0]) else expr_parts(args[0], ctx)
    return parts, spec.exc


def _m_printf(spec: CallSpec, args: list[list[Tok]], ctx: _Ctx, text: str) -> _Msg:
    return _printf_arg(args[0], ctx), spec.exc


def _m_printf_skip1(spec: CallSpec, args: list[list[Tok]], ctx: _Ctx, text: str) -> _Msg:
    return (_printf_arg(args[1], ctx), spec.exc) if len(args) >= 2 else None


def _m_printf_stderr(spec: CallSpec, args: list[list[Tok]], ctx: _Ctx, text: str) -> _Msg:
    if len(args) >= 2 and [t.text for t in args[0]] in (["stderr"], ["std", "::", "cerr"]):
        return _printf_arg(args[1], ctx), spec.exc
    return None


_FORMS: dict[str, Callable[[CallSpec, list[list[Tok]], _Ctx, str], _Msg]] = {
    "check": _m_check, "check_with": _m_check_with, "assert": _m_assert, "typed": _m_typed,
    "varargs": _m_varargs, "fi_check": _m_fi_check, "fmt": _m_fmt, "printf": _m_printf,
    "printf_skip1": _m_printf_skip1, "printf_stderr": _m_printf_stderr,
}


def _message(spec: CallSpec, args: list[list[Tok]], ctx: _Ctx, text: str) -> _Msg:
    """The parts and the exception type a call's arguments give, or None (not a message)."""
    form = _FORMS.get(spec.form)
    return form(spec, args, ctx, text) if form else None


def _stream_message(name: str, spec: CallSpec, args: list[list[Tok]], stream: Sequence[Tok],
                    ctx: _Ctx, text: str) -> tuple[list[Part], str | None, str | None] | None:
    """``LOG(X) << ...``, ``TVM_FFI_ICHECK(c) << ...``, ``TVM_FFI_THROW(T) << ...``."""
    parts = _stream_parts(stream, ctx) if stream else []
    if spec.form == "log_level":
        lvl = "".join(t.text for t in args[0]) if args else ""
        if lvl not in _LOG_LEVELS:
            return None
        return parts, None, _LOG_LEVELS[lvl]
    if spec.form == "icheck":
        head: list[Part] = [("lit", f"Check failed: ({_src(text, args[0])}) is false")]
        return head + ([("lit", ": ")] + parts if parts else []), spec.exc, spec.level
    if spec.form == "exc_arg":
        return parts, "".join(t.text for t in args[0]) if args else None, spec.level
    return (parts, spec.exc, spec.level) if parts else None


def _functions(toks: Sequence[Tok], parens: dict[int, int]) -> list[tuple[int, int, str]]:
    """(open brace, close brace, name) of every function body: a ``{`` after ``name(...)``
    (qualifiers such as ``const``/``override`` between are allowed)."""
    out: list[tuple[int, int, str]] = []
    close_of_open = {v: k for k, v in parens.items()}
    for i, t in enumerate(toks):
        if t.text != "{" or t.kind != "punct" or i not in parens:
            continue
        j = i - 1
        while j >= 0 and toks[j].kind == "ident" and toks[j].text in (
                "const", "override", "noexcept", "final", "volatile", "mutable"):
            j -= 1
        if j < 0 or toks[j].text != ")" or j not in close_of_open:
            continue
        k = close_of_open[j] - 1
        if k >= 0 and toks[k].kind == "ident" and toks[k].text not in _NOT_FUNCS:
            name = toks[k].text
            while k >= 2 and toks[k - 1].text == "::" and toks[k - 2].kind == "ident":
                name = toks[k - 2].text + "::" + name
                k -= 2
            out.append((i, parens[i], name))
    return out


def _enclosing(funcs: Sequence[tuple[int, int, str]], at: int) -> tuple[int, str]:
    best = (0, "")
    for o, c, n in funcs:
        if o > at:
            break
        if c > at:
            best = (o, n)
    return best


_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(?:[^\n\\]|\\.|\\\n)*", re.M)


def _defines(text: str) -> list[tuple[int, int, str]]:
    """(start, end, name) of each ``#define`` with its continuation lines."""
    return [(m.start(), m.end(), m.group(1)) for m in _DEFINE.finditer(text)]


def _in_define(defines: Sequence[tuple[int, int, str]], offset: int) -> str:
    for start, end, name in defines:
        if start <= offset < end:
            return f"#define {name}"
    return ""


_ERROR_STRING_FUNC = re.compile(r"(?i)(?:get\w*error\w*string|errorstring|strerror)$")


def _error_strings(toks: Sequence[Tok], funcs: Sequence[tuple[int, int, str]]
                   ) -> list[tuple[Found, str]]:
    """``case NAME: return "text";`` inside an error-string function (NCCL's
    ``ncclGetErrorString``: ``ncclUnhandledCudaError`` -> "unhandled cuda error (run with ...)"),
    one ``error-string`` template each with the code's name as ``exc``."""
    out: list[tuple[Found, str]] = []
    for o, c, name in funcs:
        if not _ERROR_STRING_FUNC.search(name.split("::")[-1]):
            continue
        for i in range(o, c):
            if toks[i].text != "case" or toks[i].kind != "ident":
                continue
            code, j = _qualname(toks, i + 1)
            if j + 2 < c and toks[j].text == ":" and toks[j + 1].text == "return":
                end = _stmt_end(toks, j + 2)
                lits = toks[j + 2:end]
                if _only_strings(lits) and any(ch.isalpha() for ch in _concat(lits)):
                    parts = _clean([("lit", _concat(lits))])
                    out.append((Found(toks[i].line, i, "error-string", code, "error", parts), name))
    return out


def find_messages(text: str) -> list[tuple[Found, str]]:
    """Every message call in one C/C++ file: (what was found, enclosing function)."""
    toks = tokenize(text)
    parens = _match_parens(toks)
    funcs = _functions(toks, parens)
    defines = _defines(text) if "define" in text else []
    out: list[tuple[Found, str]] = []
    for i, t in enumerate(toks):
        if t.kind == "ident" and t.text == "throw":
            got = _throw(toks, parens, i)
        elif t.kind == "ident" and (t.text in CALLS or t.text in STREAMS):
            got = _call(toks, parens, i, text)
        else:
            continue
        if got is None:
            continue
        fopen, fname = _enclosing(funcs, i)
        found = _resolve(got, toks, parens, fopen, text)
        if found is not None and has_literal(found.parts):
            out.append((found, fname or _in_define(defines, t.start)))
    return out + _error_strings(toks, funcs)


@dataclass(frozen=True)
class _Got:
    name: str
    at: int
    args: list[list[Tok]]
    stream: list[Tok] | None  # tokens after ``<<`` up to the statement end, for a stream macro


def _call(toks: Sequence[Tok], parens: dict[int, int], i: int, text: str) -> _Got | None:
    if i + 1 >= len(toks) or toks[i + 1].text != "(" or (i and toks[i - 1].text in (".", "->")):
        return None
    if i and toks[i - 1].text == "define":  # the macro's own definition
        return None
    close = parens.get(i + 1)
    if close is None:
        return None
    args = _split_top(toks[i + 2:close], ",")
    stream = None
    if toks[i].text in STREAMS:
        end = _stmt_end(toks, close + 1)
        rest = list(toks[close + 1:end])
        stream = rest[1:] if rest and rest[0].text == "<<" else []
    return _Got(toks[i].text, i, args, stream)


def _throw(toks: Sequence[Tok], parens: dict[int, int], i: int) -> _Got | None:
    name, j = _qualname(toks, i + 1)
    if not name or j >= len(toks) or toks[j].text != "(" or j not in parens:
        return None
    args = _split_top(toks[j + 1:parens[j]], ",")
    return _Got("throw " + name, i, args[:1], None)


def _resolve(got: _Got, toks: Sequence[Tok], parens: dict[int, int], fopen: int, text: str
             ) -> Found | None:
    ctx = _Ctx(toks, parens, fopen, got.at)
    line = toks[got.at].line
    if got.name.startswith("throw "):
        if not got.args or not got.args[0]:
            return None
        parts = expr_parts(got.args[0], ctx)
        return Found(line, got.at, "raise", got.name[6:], "error", _clean(parts)) \
            if has_literal(parts) else None
    if got.stream is not None:
        spec = STREAMS[got.name]
        res = _stream_message(got.name, spec, got.args, got.stream, ctx, text)
        if res is None or not has_literal(res[0]):
            return None
        return Found(line, got.at, spec.kind, res[1], res[2], _clean(list(spec.prefix) + res[0]))
    spec = CALLS[got.name]
    if not got.args or not got.args[0]:
        return None
    msg = _message(spec, got.args, ctx, text)
    if msg is None or not _worth(msg[0], spec):
        return None
    return Found(line, got.at, spec.kind, msg[1], spec.level, _clean(list(spec.prefix) + msg[0]))


# ---------------------------------------------------------------------------------------------
# files -> templates

def extract_c(root: Path, project: str, version: str, globs: Sequence[str] = DEFAULT_GLOBS,
              prefix: str = "") -> list[RawTemplate]:
    """Every message template in the C/C++/CUDA files under ``root`` (paths relative to it,
    with ``prefix`` in front). Files that are not UTF-8 are read with replacement characters."""
    root = Path(root)
    files = sorted({p for g in globs for p in root.glob(g) if p.is_file()})
    out: list[RawTemplate] = []
    for path in files:
        rel = prefix + path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8", errors="replace")
        seen: set[tuple[int, tuple[Part, ...]]] = set()
        for found, func in find_messages(text):
            key = (found.line, found.parts)
            if key in seen:
                continue
            seen.add(key)
            out.append(RawTemplate(project, version, rel, found.line, func, found.kind,
                                   found.exc, found.level, found.parts))
    return out


# ---------------------------------------------------------------------------------------------
# shared libraries: the strings of .rodata

def rodata_strings(lib: Path, min_len: int = 12) -> list[str]:
    """The NUL-terminated printable strings of an ELF file's ``.rodata`` section, in order."""
    data = Path(lib).read_bytes()
    section = _elf_section(data, b".rodata") or data
    out = []
    for raw in section.split(b"\0"):
        if len(raw) < min_len:
            continue
        try:
            s = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if s.isprintable() or all(c.isprintable() or c in "\n\t" for c in s):
            out.append(s)
    return out


def _elf_section(data: bytes, want: bytes) -> bytes | None:
    """One section's bytes of a 64-bit little-endian ELF file (None if not found)."""
    import struct
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    def header(i: int) -> tuple[int, int, int]:
        name, _t, _f, _a, off, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        return name, off, size
    _n, stroff, _s = header(shstrndx)
    for i in range(shnum):
        name, off, size = header(i)
        end = data.index(b"\0", stroff + name)
        if data[stroff + name:end] == want:
            return data[off:off + size]
    return None


_MESSAGEISH = re.compile(r"[A-Za-z]{2,}[^A-Za-z]+[A-Za-z]{2,}")
_SRC_PATH = re.compile(r"^(?:/|\.\./)[\w./-]+\.(?:cpp|cc|cu|cuh|h|hpp)$")
_TU_PATH = re.compile(r"^(?:/|\.\./)[\w./-]+\.(?:cpp|cc|cu)$")


_BUILD_ROOT = re.compile(r"^(/[\w./-]*?/|(?:\.\./)+)(?:torch|c10|aten)/[\w./-]+\.(?:cpp|cc|cu)$")


def build_root(strings: Iterable[str]) -> str:
    """The folder a library was built in (``/pytorch/``, ``/__w/pytorch/pytorch/``, or ``../``
    in builds up to torch 2.4 or so): the most common prefix of its ``__FILE__`` paths."""
    roots: dict[str, int] = {}
    for s in strings:
        m = _BUILD_ROOT.match(s)
        if m:
            roots[m.group(1)] = roots.get(m.group(1), 0) + 1
    return max(roots, key=lambda r: roots[r]) if roots else "/"


def attribute_files(strings: Sequence[str], build_root: str, reach: int = 400) -> list[str]:
    """The source file each string most likely came from ("" if none within ``reach``).

    A linker keeps the merged string constants of one object file together, and that run holds
    the file's ``__FILE__`` path (``/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp``,
    from the checks' file:line): a string belongs to the nearest translation unit's path
    (``.cpp``/``.cc``/``.cu``; a header's path inside the run is its inline code's, not the
    run's), before or after it. A heuristic; the template says ``line`` 0 and the file it
    guessed."""
    marks = [(i, s[len(build_root):]) for i, s in enumerate(strings)
             if s.startswith(build_root) and _TU_PATH.match(s)]
    out = []
    k = 0
    for i in range(len(strings)):
        while k + 1 < len(marks) and marks[k + 1][0] <= i:
            k += 1
        best, dist = "", reach + 1
        for j in (k, k + 1):
            if 0 <= j < len(marks) and abs(marks[j][0] - i) < dist:
                best, dist = marks[j][1], abs(marks[j][0] - i)
        out.append(best)
    return out


def extract_binary_strings(lib: Path, project: str, version: str,
                           keep: Callable[[str], bool], root: str | None = None
                           ) -> list[RawTemplate]:
    """Library strings that look like message pieces (two words or more) and whose attributed
    source file (see :func:`attribute_files`) ``keep`` accepts, one literal-only template each
    (kind ``binary-string``, line 0, no function). printf/fmt holes in them are typed."""
    strings = rodata_strings(lib, min_len=8)
    files = attribute_files(strings, root if root is not None else build_root(strings))
    out: list[RawTemplate] = []
    seen: set[str] = set()
    for s, f in zip(strings, files, strict=True):
        if s in seen or not f or not keep(f) or not _MESSAGEISH.search(s) or _SRC_PATH.match(s):
            continue
        seen.add(s)
        parts = fmt_parts(s) if "{}" in s else printf_parts(s) if "%" in s else [("lit", s)]
        out.append(RawTemplate(project, version, f, 0, "", "binary-string", None, None,
                               _clean(parts)))
    return out


def torch_c10d_file(path: str) -> bool:
    """torch's distributed C++ and its CUDA error/allocator messages."""
    return path.startswith(("torch/csrc/distributed/", "c10/cuda/", "torch/csrc/cuda/"))


# ---------------------------------------------------------------------------------------------
# CUDA runtime and driver error names and strings

_ENUM_ENTRY = re.compile(
    r"/\*\*(?P<doc>(?:(?!\*/).)*)\*/\s*(?P<name>cudaError\w*|cudaSuccess|CUDA_ERROR_\w+|"
    r"CUDA_SUCCESS)\s*=\s*(?P<value>\d+)", re.S)


@dataclass(frozen=True)
class EnumEntry:
    name: str
    value: int
    doc: str     # the doc comment's first sentence
    file: str
    line: int


def header_enums(header: Path, file: str) -> list[EnumEntry]:
    """``cudaError`` / ``CUresult`` entries (name, value, doc comment) of a CUDA header."""
    text = Path(header).read_text(encoding="utf-8", errors="replace")
    out = []
    for m in _ENUM_ENTRY.finditer(text):
        doc = " ".join(ln.strip().lstrip("*").strip() for ln in m.group("doc").splitlines())
        doc = re.sub(r"\\(?:ref|p|c|b|e|note)\s+", "", doc).strip()
        first = re.split(r"(?<=[a-z0-9)\"'])\.\s", doc + " ", maxsplit=1)[0].strip().rstrip(".")
        line = text.count("\n", 0, m.start("name")) + 1
        out.append(EnumEntry(m.group("name"), int(m.group("value")), first, file, line))
    return out


def _norm(name: str) -> str:
    n = name.replace("CUDA_ERROR_", "").replace("cudaError", "").replace("_", "")
    return n.lower()


def runtime_strings(libcudart: Path, values: Iterable[int]) -> dict[int, tuple[str, str]]:
    """value -> (cudaGetErrorName, cudaGetErrorString) from a real libcudart (no GPU needed)."""
    lib = ctypes.CDLL(str(libcudart))
    lib.cudaGetErrorName.restype = ctypes.c_char_p
    lib.cudaGetErrorString.restype = ctypes.c_char_p
    lib.cudaGetErrorName.argtypes = [ctypes.c_int]
    lib.cudaGetErrorString.argtypes = [ctypes.c_int]
    out = {}
    for v in values:
        name = (lib.cudaGetErrorName(v) or b"").decode()
        text = (lib.cudaGetErrorString(v) or b"").decode()
        out[v] = (name, text)
    return out


def cuda_error_strings(driver_types_h: Path, cuda_h: Path | None, libcudart: Path | None,
                       version: str) -> list[RawTemplate]:
    """The runtime's and the driver's error names and strings (see the module docstring).

    Per runtime code: a ``cudaGetErrorName`` template (the name) and a ``cudaGetErrorString``
    template (the exact string from ``libcudart``; the doc comment's first sentence when no
    library is given, ``function`` then ``doc-comment``). Per driver code: the name (function
    ``cuGetErrorName``) and the string (``cudaGetErrorString@same-code`` when the runtime code
    of the same value names the same condition, else ``doc-comment``)."""
    rt = header_enums(driver_types_h, "include/driver_types.h")
    exact = runtime_strings(libcudart, [e.value for e in rt]) if libcudart else {}
    out: list[RawTemplate] = []
    by_value: dict[int, tuple[str, str]] = {}
    for e in rt:
        name, text = exact.get(e.value, ("", ""))
        if name and name != e.name:
            continue  # an alias kept for old code (the library reports the current name)
        src = "cudaGetErrorString" if text else "doc-comment"
        text = text or e.doc
        by_value[e.value] = (e.name, text)
        out.append(_cuda_t(version, e, "cudaGetErrorName", "error-name", e.name))
        out.append(_cuda_t(version, e, src, "error-string", text))
    for e in header_enums(cuda_h, "include/cuda.h") if cuda_h else []:
        out.append(_cuda_t(version, e, "cuGetErrorName", "error-name", e.name))
        rname, rtext = by_value.get(e.value, ("", ""))
        if rtext and 0 < e.value < 10000:
            how = "same-code" if _norm(rname) == _norm(e.name) else "same-code-other-name"
            out.append(_cuda_t(version, e, f"cudaGetErrorString@{how}", "error-string", rtext))
        elif e.doc:
            out.append(_cuda_t(version, e, "doc-comment", "error-string", e.doc))
    return out


def _cuda_t(version: str, e: EnumEntry, function: str, kind: str, text: str) -> RawTemplate:
    return RawTemplate("cuda", version, e.file, e.line, function, kind, e.name, "error",
                       (("lit", text),))


# ---------------------------------------------------------------------------------------------
# the inputs the committed extraction was made from, and the command line

@dataclass(frozen=True)
class InputSpec:
    project: str
    versions: tuple[str, ...]
    origin: str          # where it comes from (a git repository via the search tool's fetch, a wheel)
    paths: tuple[str, ...]  # what of it is read
    how: str             # the reading: extract_c / extract_binary_strings / cuda_error_strings
    note: str = ""


NCCL_TAGS = ("v2.18.6-1", "v2.19.4-1", "v2.20.5-1", "v2.21.5-1", "v2.22.3-1", "v2.23.4-1", "v2.24.3-1", "v2.25.1-1", "v2.26.6-1",
             "v2.27.7-1", "v2.28.9-1", "v2.29.7-1", "v2.30.7-1")
FLASHINFER_TAGS = ("v0.2.5", "v0.3.1", "v0.4.1", "v0.5.3", "v0.6.17")
# torch: PyPI's default Linux wheels (CUDA 12.1 ... 13.0 builds) and the +cpu build
TORCH_CUDA = ("2.4.0", "2.6.0", "2.8.0", "2.9.1", "2.10.0", "2.12.1", "2.14.1")
TORCH_CPU = "2.13.0"


def c_inputs() -> list[InputSpec]:
    """The real inputs of ``scripts/msgindex-sources/c-templates.jsonl.gz``."""
    return [
        InputSpec("nccl", tuple(t[1:].rsplit("-", 1)[0] for t in NCCL_TAGS),
                  "github NVIDIA/nccl, the last tag of each minor release 2.18-2.30",
                  ("src/**",), "extract_c", "git archive TAG src"),
        InputSpec("torch", TORCH_CUDA + (TORCH_CPU,), "PyPI torch wheels: the default Linux "
                  "(CUDA) builds, and the +cpu build", ("torch/include/torch/csrc/distributed/**",
                                                       "torch/include/c10/util/**",
                                                       "torch/include/c10/cuda/**",
                                                       "torch/include/torch/csrc/cuda/**"),
                  "extract_c", "the wheels ship the headers only: NCCLUtils.hpp's C10D_NCCL_CHECK "
                  "family, exception.h, Utils.hpp, socket.h, c10/util/Exception.h"),
        InputSpec("torch", TORCH_CUDA + (TORCH_CPU,), "the same wheels' libraries",
                  ("torch/lib/libtorch_cuda.so", "torch/lib/libtorch_cpu.so",
                   "torch/lib/libc10_cuda.so"), "extract_binary_strings",
                  "pytorch/pytorch is too large to fetch here (4 GB; its forks 1.1 GB and more, "
                  "the limit is 500 MB), so the .cpp messages (ProcessGroupNCCL.cpp, "
                  "ProcessGroupWrapper.cpp, TCPStore*.cpp, c10/cuda) are the libraries' string "
                  "pieces, attributed to their file by __FILE__ proximity, kept under "
                  "torch/csrc/distributed, c10/cuda, torch/csrc/cuda; the +cpu build has no "
                  "libtorch_cuda.so (no ProcessGroupNCCL)"),
        InputSpec("flashinfer", tuple(t[1:] for t in FLASHINFER_TAGS),
                  "github flashinfer-ai/flashinfer tags", ("csrc/**", "include/**"), "extract_c"),
        InputSpec("hami", ("git-8f3a89c",), "github Project-HAMi/HAMi-core (no release tags; "
                  "the newest commit, 2026-06-30)", ("src/**",), "extract_c"),
        InputSpec("cuda", ("12.9.79", "13.0.96"), "PyPI nvidia-cuda-runtime-cu12 12.9.79 and "
                  "nvidia-cuda-runtime 13.0.96 wheels", ("include/driver_types.h",
                                                        "include/cuda.h", "lib/libcudart.so.*"),
                  "cuda_error_strings", "runtime strings asked of the real libcudart"),
    ]


def _spec(value: str) -> tuple[str, str, str]:
    """``project@version=PATH`` -> (project, version, path)."""
    head, _, path = value.partition("=")
    project, _, version = head.partition("@")
    if not (project and version and path):
        raise SystemExit(f"msgindex_c: expected PROJECT@VERSION=PATH, got {value!r}")
    if not Path(path).exists():
        raise SystemExit(f"msgindex_c: {path}: no such file or folder")
    return project, version, path


def run(sources: Sequence[str], binaries: Sequence[str], cudas: Sequence[str]
        ) -> tuple[list[RawTemplate], list[dict[str, object]]]:
    """Extract every given input; the templates and one count record per input."""
    out: list[RawTemplate] = []
    counts: list[dict[str, object]] = []
    for value in sources:
        project, version, path = _spec(value)
        got = extract_c(Path(path), project, version)
        counts.append({"input": "source", "project": project, "version": version,
                       "templates": len(got)})
        out += got
    for value in binaries:
        project, version, path = _spec(value)
        got = extract_binary_strings(Path(path), project, version, torch_c10d_file)
        counts.append({"input": "binary", "project": project, "version": version,
                       "file": Path(path).name, "templates": len(got)})
        out += got
    for value in cudas:
        version, _, rest = value.partition("=")
        inc, _, lib = rest.partition(":")
        got = cuda_error_strings(Path(inc) / "driver_types.h", Path(inc) / "cuda.h",
                                 Path(lib) if lib else None, version)
        counts.append({"input": "cuda", "project": "cuda", "version": version,
                       "templates": len(got), "exact_runtime_strings": bool(lib)})
        out += got
    return out, counts


def write_jsonl(path: Path, templates: Sequence[RawTemplate], header: dict[str, object]) -> None:
    """One header line (``{"header": ...}``), then one RawTemplate per line; gzip if ``.gz``."""
    lines = [json.dumps({"header": header}, sort_keys=True)]
    lines += [json.dumps(asdict(t), sort_keys=True) for t in templates]
    data = ("\n".join(lines) + "\n").encode()
    if str(path).endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    Path(path).write_bytes(data)


def read_jsonl(path: Path) -> tuple[dict[str, object], list[RawTemplate]]:
    """The header and templates :func:`write_jsonl` wrote."""
    raw = Path(path).read_bytes()
    text = (gzip.decompress(raw) if str(path).endswith(".gz") else raw).decode()
    header: dict[str, object] = {}
    out = []
    for line in text.splitlines():
        obj = json.loads(line)
        if "header" in obj:
            header = obj["header"]
            continue
        obj["parts"] = tuple(tuple(p) for p in obj["parts"])
        out.append(RawTemplate(**obj))
    return header, out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--source", action="append", default=[], metavar="PROJECT@VERSION=DIR")
    ap.add_argument("--binary", action="append", default=[], metavar="PROJECT@VERSION=LIB")
    ap.add_argument("--cuda", action="append", default=[],
                    metavar="VERSION=INCLUDE_DIR[:LIBCUDART]")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    templates, counts = run(args.source, args.binary, args.cuda)
    header: dict[str, object] = {"inputs": [asdict(s) for s in c_inputs()], "counts": counts,
              "extractor": "scripts/msgindex_c.py"}
    write_jsonl(args.out, templates, header)
    for c in counts:
        print(json.dumps(c, sort_keys=True))
    print(f"{len(templates)} templates -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
