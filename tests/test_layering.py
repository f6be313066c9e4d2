"""The package's import graph, read with ``ast`` (module-level and function-level imports).

Layers, lowest first; a module may import its own package and any lower layer, never upward
(docs/architecture.md draws the same table; a test below checks they agree):

* base: ``sm120kit`` (``__init__``), ``errors``, ``paths``, ``report``, ``gitrun``;
* models: ``models`` (pure: ServeArgs, the series manifest, the DCP plan, KV density);
* readers: ``facts``, ``evidence`` (bounded readers of the machine, sources and logs; they may
  import each other, without a cycle);
* services: ``services`` (process supervision, snapshots, bundle writing);
* capabilities: ``patchset``, ``doctor``, ``warmup``, ``collect``, ``diagnose``, ``validate``
  side by side: none imports another (the CLI composes them);
* top: ``cli`` and ``__main__``.

Also: no cycle between modules of different packages (nor between packages), imports of our own
modules at module level (the CLI's lazy subcommand loading excepted) and never inside a
``try: ... except ImportError``; ``facts`` never imports torch. The checks are plain functions
over ``{module: source}`` so the last tests can feed them a graph with each defect and see it
reported.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import sm120kit

PKG_ROOT = Path(sm120kit.__file__).resolve().parent

BASE = {"sm120kit", "errors", "paths", "report", "gitrun"}
MODELS = {"models"}
READERS = {"facts", "evidence"}
SERVICES = {"services"}
CAPABILITIES = {"patchset", "doctor", "warmup", "collect", "diagnose", "validate"}
TOP = {"cli", "__main__"}
LAYERS: tuple[tuple[str, set[str]], ...] = (
    ("base", BASE), ("models", MODELS), ("readers", READERS), ("services", SERVICES),
    ("capabilities", CAPABILITIES), ("top", TOP))
LAYER = {p: i for i, (_name, pkgs) in enumerate(LAYERS) for p in pkgs}

#: capability -> capability imports that remain, each with the reason it is not injected (none:
#: bundles get doctor's report and diagnose's verdict from the CLI through services.BundleHooks)
CAPABILITY_EDGES: dict[tuple[str, str], str] = {}

@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    line: int
    in_function: bool
    guarded: bool  # inside a try whose handlers catch ImportError / ModuleNotFoundError

    def __str__(self) -> str:
        return f"{self.src}:{self.line} -> {self.dst}"


def package_of(module: str) -> str:
    """``sm120kit.evidence.logs.prefix`` -> ``evidence``; ``sm120kit`` -> ``sm120kit``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def read_package(root: Path = PKG_ROOT) -> dict[str, tuple[str, bool]]:
    """``{module: (source, is_package)}`` of every ``.py`` file under ``root``."""
    out: dict[str, tuple[str, bool]] = {}
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root.parent).with_suffix("")
        parts = list(rel.parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        out[".".join(parts)] = (p.read_text(encoding="utf-8"), is_pkg)
    return out


def _catches_import_error(node: ast.Try) -> bool:
    for h in node.handlers:
        types = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
        for t in types:
            name = t.id if isinstance(t, ast.Name) else getattr(t, "attr", None)
            if name in ("ImportError", "ModuleNotFoundError"):
                return True
    return False


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_pkg: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        base = module.split(".") if is_pkg else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        return [".".join(base + ([node.module] if node.module else []))]
    return [node.module or ""]


def edges_of(module: str, source: str, is_pkg: bool, known: Iterable[str]) -> list[Edge]:
    """Imports of ``sm120kit`` modules in one module. ``from pkg import sub`` names the
    submodule when ``pkg.sub`` is a module (``known``)."""
    known = set(known)
    out: list[Edge] = []

    def visit(node: ast.AST, in_fn: bool, guarded: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                record(child, in_fn, guarded)
            fn = in_fn or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.Try):
                g = guarded or _catches_import_error(child)
                visit(ast.Module(body=child.body, type_ignores=[]), fn, g)
                for part in (*child.handlers, *child.orelse, *child.finalbody):
                    visit(ast.Module(body=[part], type_ignores=[]), fn, guarded)
                continue
            visit(child, fn, guarded)

    def record(node: ast.Import | ast.ImportFrom, in_fn: bool, guarded: bool) -> None:
        for t in _targets(node, module, is_pkg):
            if not (t == "sm120kit" or t.startswith("sm120kit.")):
                continue
            dsts = [t]
            if isinstance(node, ast.ImportFrom):
                subs = [f"{t}.{a.name}" for a in node.names if f"{t}.{a.name}" in known]
                dsts = subs + ([t] if len(subs) < len(node.names) else [])
            for d in dsts:
                out.append(Edge(module, d, node.lineno, in_fn, guarded))

    visit(ast.parse(source), False, False)
    return out


def all_edges(modules: Mapping[str, tuple[str, bool]]) -> list[Edge]:
    return [e for m, (src, is_pkg) in modules.items() for e in edges_of(m, src, is_pkg, modules)]


def _sccs(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def cross_package_cycles(edges: Iterable[Edge]) -> list[list[str]]:
    """Module cycles that span packages, and package-level cycles."""
    mod: dict[str, set[str]] = defaultdict(set)
    pkg: dict[str, set[str]] = defaultdict(set)
    for e in edges:
        if e.src != e.dst:
            mod[e.src].add(e.dst)
        a, b = package_of(e.src), package_of(e.dst)
        if a != b:
            pkg[a].add(b)
    bad = [c for c in _sccs(mod) if len({package_of(m) for m in c}) > 1]
    return bad + [["package " + p for p in c] for c in _sccs(pkg)]


def upward_imports(edges: Iterable[Edge]) -> list[str]:
    out = []
    for e in edges:
        a, b = package_of(e.src), package_of(e.dst)
        if a == b:
            continue
        la, lb = LAYER.get(a), LAYER.get(b)
        if la is None or lb is None:
            out.append(f"{e}: package {a if la is None else b!r} has no layer (add it above)")
        elif lb > la:
            out.append(f"{e}: {a} (layer {la}) imports {b} (layer {lb})")
    return out


def capability_edges(edges: Iterable[Edge]) -> set[tuple[str, str]]:
    return {(package_of(e.src), package_of(e.dst)) for e in edges
            if package_of(e.src) in CAPABILITIES and package_of(e.dst) in CAPABILITIES
            and package_of(e.src) != package_of(e.dst)}


def function_level(edges: Iterable[Edge]) -> set[tuple[str, str]]:
    return {(e.src, e.dst) for e in edges if e.in_function and package_of(e.src) not in TOP}


def guarded(edges: Iterable[Edge]) -> set[tuple[str, str]]:
    return {(e.src, e.dst) for e in edges if e.guarded}


# --- the package --------------------------------------------------------------------------------
EDGES = all_edges(read_package())


def test_graph_is_read() -> None:
    mods = read_package()
    assert {"sm120kit.services.snapshot", "sm120kit.diagnose.engine", "sm120kit.evidence.phases",
            "sm120kit.models.serve_args"} <= set(mods)
    assert not any(m.startswith("sm120kit.diag.") or m == "sm120kit.diag" for m in mods)
    assert len(EDGES) > 200  # every module's imports were seen


def test_no_cycle_across_packages() -> None:
    assert cross_package_cycles(EDGES) == []


def test_no_upward_import() -> None:
    assert upward_imports(EDGES) == []


def test_facts_import_no_torch() -> None:
    """``facts`` are bounded readers: no torch / vllm / flashinfer import anywhere in them."""
    heavy = ("torch", "vllm", "flashinfer")
    found = []
    for mod, (src, _pkg) in read_package().items():
        if package_of(mod) != "facts":
            continue
        for node in ast.walk(ast.parse(src)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{mod}:{node.lineno} imports {n}" for n in names
                      if n.split(".")[0] in heavy]
    assert found == []


def test_architecture_doc_draws_these_layers() -> None:
    """docs/architecture.md's layer table names the same packages per layer as this test."""
    doc = (PKG_ROOT.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 2 and cells[0].strip("` ") in dict(LAYERS):
            rows[cells[0].strip("` ")] = {p.strip("` ") for p in cells[1].split(",")}
    assert rows == {name: pkgs for name, pkgs in LAYERS}


def test_capabilities_import_each_other_only_where_listed() -> None:
    found = capability_edges(EDGES)
    assert found - set(CAPABILITY_EDGES) == set(), "new capability -> capability import"
    assert set(CAPABILITY_EDGES) - found == set(), "listed edge is gone: drop it from the list"


def test_own_imports_at_module_level() -> None:
    assert function_level(EDGES) == set(), (
        "import our own modules at module level (lazy only for heavy third parties)")


def test_no_import_error_guard_around_own_modules() -> None:
    assert guarded(EDGES) == set()


def test_cli_is_the_only_lazy_importer() -> None:
    lazy = {package_of(e.src) for e in EDGES if e.in_function}
    assert lazy <= {"cli"}


# --- the checks themselves catch each defect ----------------------------------------------------
def _synthetic(files: dict[str, str]) -> list[Edge]:
    mods = {m: (src, m.count(".") == 1 and not m.endswith("_mod")) for m, src in files.items()}
    return all_edges(mods)


def test_checks_catch_a_cycle_an_upward_import_and_lazy_imports() -> None:
    edges = _synthetic({
        "sm120kit.facts": "",
        "sm120kit.facts.a_mod": "from sm120kit.evidence.b_mod import x\n",
        "sm120kit.evidence": "",
        "sm120kit.evidence.b_mod": "from sm120kit.facts import a_mod\n",
        "sm120kit.errors": "def f():\n    from sm120kit.doctor import run\n",
        "sm120kit.doctor": "try:\n    from sm120kit.warmup import plan\nexcept ImportError:\n"
                           "    plan = None\n",
        "sm120kit.warmup": "",
        "sm120kit.warmup.plan": "",
    })
    cycles = cross_package_cycles(edges)
    assert ["sm120kit.evidence.b_mod", "sm120kit.facts.a_mod"] in cycles
    assert ["package evidence", "package facts"] in cycles
    up = upward_imports(edges)
    assert any("sm120kit.errors:2 -> sm120kit.doctor" in u for u in up)
    assert capability_edges(edges) == {("doctor", "warmup")}
    assert function_level(edges) == {("sm120kit.errors", "sm120kit.doctor")}
    assert guarded(edges) == {("sm120kit.doctor", "sm120kit.warmup.plan")}


def test_relative_imports_resolve() -> None:
    edges = _synthetic({
        "sm120kit.evidence": "from .phases import x\n",
        "sm120kit.evidence.phases": "",
        "sm120kit.evidence.logs_mod": "from ..facts import nvml\n",
        "sm120kit.facts": "",
        "sm120kit.facts.nvml": "",
    })
    assert {(e.src, e.dst) for e in edges} == {
        ("sm120kit.evidence", "sm120kit.evidence.phases"),
        ("sm120kit.evidence.logs_mod", "sm120kit.facts.nvml"),
    }
