"""Recorded failures (no false all-clear): the first few failure lines of the input and how many."""

from __future__ import annotations

import re

from sm120kit.evidence.logs.parsers import exception_line
from sm120kit.evidence.logs.prefix import Origin
from sm120kit.evidence.logs.procs import FRAME
from sm120kit.evidence.logs.records import Evidence

# what makes a line a recorded failure (besides ERROR/CRITICAL levels, glog E/F, tracebacks and
# exception lines): timeouts, deaths, aborts, non-zero exits
_FAIL = re.compile(
    r"timed out|Timed out|[Tt]imeout at|TimeoutError|died\b|exit code:? -?[1-9]|exit(?:ed)? with "
    r"(?:code|status) -?[1-9]|\bRC=[1-9]|_RC=[1-9]|\brc=[1-9]|returncode[ =:]+-?[1-9]"
    r"|Aborted|Segmentation fault|core dumped|terminate called|Fatal Python error|\bFAILED\b"
    r"|SIG(?:ABRT|SEGV|KILL|BUS)|EngineDeadError|initialization failed|failed to start"
    r"|Watchdog caught|[Ww]atchdog timeout|Failed: Cuda error|[Hh]eartbeat monitor timed out|CUDA error|NCCL error|ncclSystemError"
    r"|ncclInternalError|ncclUnhandledCudaError|ncclInvalidUsage|out of memory"
    r"|actor is (?:already )?dead|state: DEAD\b")  # Ray core's own death notices (INFO level)
_FAIL_GATE = ("imed out", "imeout", "died", "exit", "RC=", "rc=", "returncode", "Abort", "ault",
              "dumped", "terminate", "Fatal", "FAILED", "SIG", "EngineDead", "failed", "atchdog",
              "eartbeat", "error", "ncclSystem", "ncclInternal", "ncclUnhandled", "ncclInvalid",
              "of memory", "dead", "DEAD")
# failure statements in other shapes: Python logging / uvicorn level words ("ERROR:    Application
# startup failed. Exiting."), Ray's wrapped exceptions ("ray.exceptions.RayTaskError(RuntimeError):
# ray::..."), dotted exception types named for a failure ("torch._dynamo.exc.BackendCompilerFailed:
# backend='inductor' raised:"), and the shell's job-control line for a killed/crashed job
# ("[1]    12345 killed     vllm serve ...", "[1]+  Killed  vllm serve ...")
_STATED = re.compile(
    r"^(?:ERROR|CRITICAL|FATAL):\s"
    r"|^(?:\w+\.)*\w+(?:Error|Exception)\(\w+\): "
    r"|^(?:[a-z_]\w*\.)+[A-Z]\w*(?:Failed|Failure): "
    r"|^\[\d+\][+-]?\s+(?:\d+\s+)?(?:[Kk]illed|[Ss]egmentation fault|[Aa]bort(?:ed)?|[Bb]us error)\s")
KEEP = 8
# advice states no failure: "If you are running out of memory, consider decreasing ..." (vLLM's
# CUDA-graph hint on every start) is read without its advice clause, whatever its prefix
_ADVICE = re.compile(r"(?i)\b(?:if you (?:are|see|encounter|get|hit|run)|if (?:an? )?out-of-memory "
                     r"error occurs|consider (?:decreas|increas|reduc|lower|rais|setting|using))"
                     r"[^.;]*")


class Failures:
    def __init__(self) -> None:
        self.failures: list[Evidence] = []
        self.failure_count = 0

    def note(self, ev: Evidence) -> None:
        self.failure_count += 1
        if len(self.failures) < KEEP:
            self.failures.append(ev)

    def feed(self, o: Origin, msg: str, text: str, ev: Evidence) -> None:
        """Record the line when it is a failure (a non-NCCL line; NCCL WARNs are judged apart)."""
        if _is_failure(o, msg, text):
            self.note(ev)


def _is_failure(o: Origin, msg: str, text: str) -> bool:
    if o.level in ("ERROR", "CRITICAL") or msg.startswith("Traceback"):
        return True
    if o.kind == "torch" and o.level is None and msg.startswith("[") and msg[1:2] in "EF":
        return True
    if o.level in ("INFO", "DEBUG"):
        return ("died" in msg or "imed out" in msg or "exit code" in msg or "dead" in msg
                or "DEAD" in msg) and _FAIL.search(msg) is not None
    for g in _FAIL_GATE:
        if g in text:
            said = _ADVICE.sub("", text) if "f you" in text or "onsider" in text else text
            if _FAIL.search(said):
                return True
            break
    if exception_line(msg) is not None or "AssertionError" in text or "Error: " in text:
        return True
    if _STATED.match(msg):
        return True
    # traceback frames (their exception line may be cut off)
    return msg[:1] in " \tfF" and bool(FRAME.match(msg) or msg.startswith("frame #")
                                        or (msg.startswith('File "') and ", line " in msg))
