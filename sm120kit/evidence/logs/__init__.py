"""Log reading for ``sm120kit diagnose``: streaming (``stream``), attribution (``prefix``),
record parsers (``parsers``), named signatures (``signals``), versions/config (``versions``) and
the one-pass accumulator (``analyze``)."""

from __future__ import annotations

from sm120kit.evidence.logs.analyze import Evidence, LogAnalysis, Proc

__all__ = ["Evidence", "LogAnalysis", "Proc"]
