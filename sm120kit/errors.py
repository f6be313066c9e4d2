"""The one error type for user errors, and the exit codes of every command.

Exit codes (documented in docs/exit-codes.md):

* 0  success / nothing wrong
* 1  warnings or findings (doctor warnings, diagnose findings, ``--dry-run`` with pending changes)
* 2  failure or unusable input (user error, conflict, doctor failures)
* 130 interrupted (Ctrl-C)
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any


class ExitCode(IntEnum):
    OK = 0
    FINDINGS = 1
    FAILURE = 2
    #: validate: the DCP server ran and computes wrong numbers (2 is a refusal to run the test)
    NUMERICAL_FAILURE = 3
    INTERRUPTED = 130


class UserError(Exception):
    """A problem the user can fix: printed as ``error: <message>`` and ``hint: <hint>``.

    Never shown as a traceback unless ``--debug`` is given. ``details`` are extra keys for the
    ``--json`` error object (e.g. a patch conflict's ``failure``).
    """

    details: dict[str, Any]

    def __init__(self, message: str, hint: str | None = None, exit_code: int = ExitCode.FAILURE):
        super().__init__(message)
        self.message = message.strip().splitlines()[0] if message.strip() else "unknown error"
        self.hint = hint
        self.exit_code = int(exit_code)
        self.details = {}
