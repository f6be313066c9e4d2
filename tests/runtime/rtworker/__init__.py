"""Code that runs *inside* a per-release subprocess (vLLM tree first on PYTHONPATH).

``python -m rtworker all --kind patched|upstream --out DIR --release X`` imports the vLLM modules
under test, runs every scenario and writes ``DIR/result.json`` (plus ``DIR/*.pt`` tensors). The
pytest side (``tests/runtime/test_*.py``) only reads those files and asserts, so the reference
math it compares with never shares a process with vLLM.
"""
