"""The per-device FlashInfer sparse-MLA workspace (patch 1), on every release.

Besides the AST shape, the patched ``_get_workspace_buffer`` and its key helper are extracted from
the patched file and run with real CPU torch (devices ``cpu`` and ``meta``); the only stand-in is
``envs``, vLLM's env-var module, replaced by a namespace holding the buffer size. The unpatched
function is run the same way to show the test catches the process-global behaviour.
"""

from __future__ import annotations

import ast
from types import SimpleNamespace
from typing import Any

import torch  # tests/requirements.txt installs it: a missing torch fails, it does not skip

from .astutil import find_func, src
from .conftest import WS, Applied

SIZE = 1024


def _module_binding(mod: ast.Module, name: str) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for node in mod.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            out.append(node)
    return out


def _exec(nodes: list[ast.stmt]) -> dict[str, Any]:
    ns: dict[str, Any] = {
        "torch": torch,
        "envs": SimpleNamespace(VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE=SIZE),
    }
    code = compile(ast.Module(body=nodes, type_ignores=[]), WS, "exec")
    exec(code, ns)
    return ns


def test_workspace_dict_keyed_by_device(applied: Applied) -> None:
    mod = applied.patched_ast(WS)
    (decl,) = _module_binding(mod, "_fi_sparse_workspaces")
    assert isinstance(decl, ast.AnnAssign)
    assert src(decl.annotation) == "dict[torch.device, torch.Tensor]"
    assert isinstance(decl.value, ast.Dict) and not decl.value.keys
    assert not _module_binding(mod, "_fi_sparse_workspace")
    fn = find_func(mod, "_get_workspace_buffer")
    assert not any(isinstance(n, ast.Global) for n in ast.walk(fn))
    stores = [n for n in ast.walk(fn) if isinstance(n, ast.Assign)
              and isinstance(n.targets[0], ast.Subscript)]
    assert [src(s.targets[0]) for s in stores] == ["_fi_sparse_workspaces[key]"]
    keys = [n for n in ast.walk(fn) if isinstance(n, ast.Assign)
            and src(n.targets[0]) == "key"]
    assert [src(k.value) for k in keys] == ["_workspace_device_key(device)"]
    upstream = applied.upstream_ast(WS)
    assert _module_binding(upstream, "_fi_sparse_workspace")
    assert not _module_binding(upstream, "_fi_sparse_workspaces")


def test_patched_workspace_runs_one_buffer_per_device(applied: Applied) -> None:
    mod = applied.patched_ast(WS)
    ns = _exec(_module_binding(mod, "_fi_sparse_workspaces")
               + [find_func(mod, "_workspace_device_key"), find_func(mod, "_get_workspace_buffer")])
    get = ns["_get_workspace_buffer"]
    cpu = get(torch.device("cpu"))
    assert cpu.device.type == "cpu" and cpu.dtype == torch.int8 and cpu.numel() == SIZE
    assert get(torch.device("cpu")) is cpu  # same device: one buffer
    assert get("cpu") is cpu  # a device string normalizes to the same key
    meta = get(torch.device("meta"))
    assert meta is not cpu and meta.device.type == "meta"  # distinct devices: distinct buffers
    assert get(torch.device("meta")) is meta
    bigger = get(torch.device("cpu"), SIZE * 4)  # regrow replaces only this device's buffer
    assert bigger.numel() == SIZE * 4 and bigger is not cpu
    assert get(torch.device("cpu")) is bigger  # never shrinks back
    assert get(torch.device("meta")) is meta
    assert set(ns["_fi_sparse_workspaces"]) == {torch.device("cpu"), torch.device("meta")}


def test_unpatched_workspace_is_process_global(applied: Applied) -> None:
    """The behaviour patch 1 removes: the second device gets the first device's buffer."""
    mod = applied.upstream_ast(WS)
    ns = _exec(_module_binding(mod, "_fi_sparse_workspace") + [find_func(mod, "_get_workspace_buffer")])
    get = ns["_get_workspace_buffer"]
    cpu = get(torch.device("cpu"))
    assert get(torch.device("meta")) is cpu
