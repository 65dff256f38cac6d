"""The import graph follows the data flow (DESIGN.md): targets/collectors -> store -> trace -> analysis ->
compare -> report/cli, with shared declarations below everything. Walks every module's imports (module-level
and inside functions: a lazy import is still a dependency) with `ast`, and fails on an import that reaches a
higher layer, on two packages of one layer importing each other, and on any cycle between modules."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "abtest"

# Layer of each top-level part of abtest, lowest first. A module may import modules of its own package and of
# lower layers only. Packages sharing a layer do not import each other.
LAYERS = {
    "abtest.metric_spec": 0,  # the metric vocabulary, imports nothing from abtest
    "abtest.safe_io": 0,
    "abtest.version": 0,
    "abtest.ranges": 0,
    "abtest.units": 0,
    "abtest.trace": 1,
    "abtest.targets": 1,  # bytes -> tables; the remote machines
    "abtest.store": 2,
    "abtest.results": 2,  # run store layout/read/write; workload result files
    "abtest.analysis": 3,
    "abtest.collectors": 3,  # tables -> metrics (+ registry); runs -> store
    "abtest.session": 4,  # the Trace facade users open
    "abtest.interop": 5,  # Wattson and other cross-tool comparisons
    "abtest.compare": 6,  # iterations -> statistics -> verdicts, seed tables
    "abtest.timeline": 6,  # tables + derived signals -> a perfetto trace (compare's sibling)
    "abtest.report": 7,  # terminal / text / markdown / HTML, figures
    "abtest.bisect": 7,  # a revision range -> store labels -> compare's rule as oracle
    "abtest.history": 7,  # results across builds -> change points -> dashboard
    "abtest.commands": 8,
    "abtest.cli": 8,
    "abtest.demo": 8,
    "abtest": 8,
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _part(module: str) -> str:
    """The LAYERS key a module belongs to (longest matching prefix)."""
    best = None
    for key in LAYERS:
        if module == key or module.startswith(key + "."):
            if best is None or len(key) > len(best):
                best = key
    assert best is not None, f"{module} belongs to no layer: add it to LAYERS in {__file__}"
    return best


def _imports(path: Path, module: str) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    pkg = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("abtest"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.startswith("abtest"):
                base = PKG.parent / mod.replace(".", "/")
                for a in node.names:  # `from abtest.analysis import idle` imports the module abtest.analysis.idle
                    if (base / f"{a.name}.py").is_file() or (base / a.name / "__init__.py").is_file():
                        out.add(f"{mod}.{a.name}")
                    elif a.name == "_native":  # the compiled extension (native/): a leaf, not the package
                        continue
                    else:
                        out.add(mod)
    return out


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        deps = {d for d in _imports(path, name) if d in modules and d != name}
        graph[name] = deps
    return graph


GRAPH = _graph()


def test_every_module_has_a_layer():
    for m in GRAPH:
        _part(m)


def test_no_import_reaches_up_the_chain():
    bad = []
    for m, deps in GRAPH.items():
        pm = _part(m)
        for d in deps:
            pd = _part(d)
            if pm == pd:
                continue
            top = max(LAYERS.values())  # commands, cli, demo and the package facade present: one group
            if LAYERS[pd] > LAYERS[pm] or (LAYERS[pd] == LAYERS[pm] and LAYERS[pm] != top):
                bad.append(f"{m} ({pm}, layer {LAYERS[pm]}) imports {d} ({pd}, layer {LAYERS[pd]})")
    assert not bad, "imports against the data flow:\n" + "\n".join(sorted(bad))


def test_no_import_cycles():
    """Tarjan's strongly connected components over the module graph: every component must be one module."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    import sys

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 10_000))
    try:
        for v in GRAPH:
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(old)
    assert not out, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in out)


def test_the_walk_sees_imports():
    """The graph is not empty by accident: known dependencies are found, lazy ones included."""
    assert "abtest.analysis.registry" in GRAPH["abtest.compare.metrics"]
    assert "abtest.session" in GRAPH["abtest.compare.metrics"]  # imported inside a function
    assert "abtest.analysis.idle" in GRAPH["abtest.analysis.registry"]  # `from abtest.analysis import idle`


def test_importing_abtest_runs_nothing_else():
    """abtest/__init__ exports lazily (issue 39): `import abtest` loads nothing else (not even the version, whose
    lookup costs ~35 ms), so no part of abtest imports compare/ or analysis/ through the package, and polars loads
    after the CLI configured it."""
    import subprocess
    import sys

    code = (
        "import sys, abtest; print(sorted(m for m in sys.modules if m.startswith('abtest') or m == 'polars'));"
        "from abtest import Trace, TraceFormatError, MissingEventsError, explain;"
        "print(Trace.__module__, TraceFormatError.__module__, explain.__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.splitlines()
    assert out[0] == "['abtest']"
    assert out[1] == "abtest.session abtest.trace.errors abtest.compare.explain"
