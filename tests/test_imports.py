"""The import graph of nova/: no cycles, and the layering of ARCHITECTURE.md.

The rule: every ``import`` statement counts, at module level or inside a function (a lazy import
defers a dependency, it does not remove it), except those under ``if TYPE_CHECKING:``.  Importing
``a.b.c`` also imports the packages ``a.b`` and ``a`` (their ``__init__``), so those count as well,
except a module's own enclosing packages (already initialised when it runs) and the root package
``nova``: its ``__init__`` is the public façade (``nova.matmul``, ``nova.compile``, ...), and no module
of nova/ imports it.  ``importlib.import_module`` of a computed name is not seen (the
``nova.configurator`` façade's lazy re-exports are the one use).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Layers in ARCHITECTURE.md's order: a module imports its own layer and those listed before it.
LAYERS = ("nova.version", "nova.dtypes", "nova.fileio", "nova.options", "nova.messages", "nova.hwmodel",
          "nova.configurator", "nova.codegen", "nova.runtime", "nova.kernels", "nova.ir", "nova.frontend",
          "nova.passes", "nova.models", "nova.compiler", "nova.integrations", "nova.report", "nova.bench", "nova.cli")

# Imports against that order, each with its reason (keep this list short).
EXCEPTIONS = {
    # nova.matmul, the GEMM family's launch, lives in the runtime: it configures and compiles on a miss
    ("nova.runtime.matmul", "nova.kernels.gemm.problem"): "nova.matmul states the GemmProblem",
    ("nova.runtime.matmul", "nova.kernels.gemm.family"): "nova.matmul fetches the GEMM kernel",
    ("nova.runtime.matmul", "nova.configurator"): "nova.matmul configures on the first call",
    # capture drops the nodes a library's folded mask leaves (before the bindings and opaque counts are final)
    ("nova.frontend.capture", "nova.passes.dce"): "dead-code elimination is the passes' rule",
    # the byte-identity check of generated code runs the GEMM builders
    ("nova.codegen.fingerprint", "nova.kernels.gemm.compile"): "fingerprints the GEMM kernels",
    # the benchmarks read shapes and exit with the CLI's conventions
    ("nova.bench.correctness", "nova.cli.shapes"): "the CLI's shape syntax",
    ("nova.bench.triton_matmul", "nova.cli.shapes"): "the CLI's shape syntax",
    ("nova.bench.train_gemms", "nova.cli.common"): "the CLI's exit statuses",
    ("nova.bench.train_gemms", "nova.cli.shapes"): "the suites' JSON parse errors",
    ("nova.bench.train", "nova.cli.common"): "nova bench train's parser (one-line errors)",
    # the explain commands of three kernel families live beside them and parse with the CLI's one-line parser
    ("nova.kernels.attention.cli", "nova.cli.common"): "the CLI's parser (one-line errors)",
    ("nova.kernels.embedding.cli", "nova.cli.common"): "the CLI's parser (one-line errors)",
    ("nova.kernels.rows.cli", "nova.cli.common"): "the CLI's parser (one-line errors)",
}


def excepted(module: str, target: str) -> bool:
    """``module`` may import ``target``: an EXCEPTIONS pair, or a package on the way to one."""
    return any(m == module and (t == target or t.startswith(target + ".")) for m, t in EXCEPTIONS)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in (ROOT / "nova").rglob("*.py")}


def import_statements(tree: ast.AST):
    """Every Import/ImportFrom node except those under ``if TYPE_CHECKING:``."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for n in ast.walk(node)}
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in skip]


def imported(module: str, path: Path) -> set[str]:
    """The modules of nova/ that ``module`` imports, with their packages (the root ``nova`` kept apart)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in import_statements(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
            continue
        base = node.module or ""
        if node.level:
            parts = package.split(".")
            base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
        names |= {f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names}
    own = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 2)}   # already initialised
    out = set()
    for name in names:
        parts = name.split(".")
        if parts[0] != "nova":
            continue
        out |= {".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in MODULES} - (own - {name})
    return out - {module}


GRAPH = {m: imported(m, p) for m, p in MODULES.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer(module: str) -> int | None:
    matches = [i for i, name in enumerate(LAYERS) if module == name or module.startswith(name + ".")]
    return matches[-1] if matches else None


def test_the_graph_finds_a_cycle_and_the_package_imports():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert {"nova.kernels", "nova.kernels.gemm", "nova.kernels.gemm.problem"} <= GRAPH["nova.runtime.matmul"]


def test_no_import_cycles():
    graph = {m: deps - {"nova"} for m, deps in GRAPH.items() if m != "nova"}
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(
        " ".join(f"{m} -> [{', '.join(sorted(graph[m] & set(c)))}]" for m in c) for c in found)


def test_no_module_imports_the_root_package():
    """Only the benchmarks, which use the public API as a user does (``nova.matmul``, ``nova.compile``)."""
    assert not sorted(m for m, deps in GRAPH.items() if m != "nova" and "nova" in deps and not m.startswith("nova.bench"))


def test_every_module_has_a_layer():
    assert not sorted(m for m in MODULES if m != "nova" and layer(m) is None)


def test_a_layer_imports_only_itself_and_the_layers_before_it():
    wrong = []
    for m, deps in sorted(GRAPH.items()):
        if m == "nova":
            continue
        for d in sorted(deps - {"nova"}):
            if layer(d) > layer(m) and not excepted(m, d):
                wrong.append(f"{m} -> {d}")
    assert not wrong, "\n".join(wrong)


def test_every_exception_is_still_needed():
    assert not sorted(pair for pair in EXCEPTIONS if pair[1] not in GRAPH[pair[0]])


def third_party(path: Path) -> set[str]:
    out = set()
    for node in import_statements(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        out |= {n.split(".")[0] for n in names if not (isinstance(node, ast.ImportFrom) and node.level)}
    return out


@pytest.mark.parametrize("package,forbidden", [
    ("nova.ir", {m for m in MODULES if m != "nova" and not m.startswith("nova.ir")}),
    ("nova.runtime", {"nova.frontend", "nova.compiler", "nova.passes", "nova.cli", "nova.bench", "nova.ir"}),
])
def test_contracts(package, forbidden):
    """nova/ir imports nothing of nova but itself; the runtime never imports the frontend, the graph
    compiler or the passes; neither imports MLIR or sympy."""
    wrong = []
    for m, deps in GRAPH.items():
        if m == package or m.startswith(package + "."):
            wrong += [f"{m} -> {d}" for d in deps if any(d == f or d.startswith(f + ".") for f in forbidden)]
            wrong += [f"{m} -> {lib}" for lib in third_party(MODULES[m]) & {"mlir", "sympy"}]
    assert not sorted(wrong)


def test_the_runtime_names_no_kernel_family():
    """Only nova.matmul (runtime/matmul.py, the EXCEPTIONS above) reaches into nova/kernels."""
    wrong = [f"{m} -> {d}" for m, deps in GRAPH.items() if m.startswith("nova.runtime") and m != "nova.runtime.matmul"
             for d in deps if d.startswith("nova.kernels") or d.startswith("nova.configurator")]
    assert not sorted(wrong)
