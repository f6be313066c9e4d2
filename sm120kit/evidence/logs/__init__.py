"""Log reading for ``sm120kit diagnose``: streaming (``stream``), attribution (``prefix``),
record parsers (``parsers``), named signatures (``signals``), versions/config (``versions``) and
the one-pass accumulator (``analyze``).

Import the module you need (``from sm120kit.evidence.logs.analyze import LogAnalysis``): the
package itself loads nothing, so a reader of one kind of line (``versions``, ``nccl_diag``)
does not pay for the whole analyzer (doctor's start-up, bench_cli.py)."""
