"""The catalogue's one error type: a file, entry or signal that cannot be used (exit 2)."""

from __future__ import annotations

from sm120kit.errors import UserError


class CatalogueError(UserError):
    """A catalogue file, entry or signal that cannot be used (exit 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, hint="see docs/diagnose.md#the-catalogue for the entry keys")
