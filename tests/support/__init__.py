"""Helpers shared by the tests (import as ``tests.support.<module>``; fixtures stay in conftest).

* :mod:`.paths` — the repository, ``patches/``, the shared log corpus, the vLLM files the series
  touches;
* :mod:`.gitrepo` — ``git`` in a test repository with a fixed identity, the state fingerprint a
  failed apply must leave unchanged, tree hashes, text edits;
* :mod:`.miniseries` — a small real series made with ``git format-patch`` (patchset tests);
* :mod:`.forks` — forks with real drift built from release trees (port tests);
* :mod:`.venvs` — vLLM really pip-installed into venvs (``--installed`` tests).
"""


def sigint_default() -> None:
    """``preexec_fn`` for a child a test will interrupt: SIGINT back to its default disposition.

    A pytest started with SIGINT ignored (``python -m pytest &`` from a non-interactive shell)
    passes SIG_IGN on to its children, and Python then installs no KeyboardInterrupt handler:
    the child would never see the test's Ctrl-C."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
