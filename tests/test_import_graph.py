"""No import cycles in hf_llmsys/: neither at module level nor through imports inside functions.

The graph is read from the source (ast), not from an interpreter's import order: an edge A -> B for every
``import`` / ``from ... import`` of a module of the package anywhere in A (module level, in a function or a class;
``if TYPE_CHECKING:`` blocks excepted, they never run), ``from pkg import name`` counting ``pkg/__init__`` and, when
``name`` is a submodule, that submodule too. A cycle (a strongly connected component of more than one module, or a
module importing itself) fails the test with the modules and the import lines that close it. Each cleaning module
also imports alone in a fresh interpreter.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = "hf_llmsys"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """Every Import / ImportFrom node, outside `if TYPE_CHECKING:` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _is_ancestor(package: str, module: str) -> bool:
    return module.startswith(package + ".")


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported module of the package: line of the first such import}.

    ``from . import submodule`` is an edge to the submodule only: an ancestor package is always initialised before
    its submodules, so the edge to it matters only for names its ``__init__`` defines.
    """
    known = modules()
    graph: dict[str, dict[str, int]] = {name: {} for name in known}
    for name, path in known.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                target = _resolve(name, is_package, node)
                submodules = [f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in known]
                # An ancestor package is imported before its submodules anyway: depending on it means reading a
                # name its __init__ defines (`from .. import name`), not `from . import submodule`.
                needs_package = not _is_ancestor(target, name) or len(submodules) < len(node.names)
                targets = ([target] if needs_package else []) + submodules
            for target in targets:
                if target in known:
                    graph[name].setdefault(target, node.lineno)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one module, or with a self-import (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    found.append(sorted(component))
    return found


def describe(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    members = set(component)
    edges = [
        f"  {a} -> {b} ({modules()[a].relative_to(ROOT.parent)}:{line})"
        for a in component
        for b, line in graph[a].items()
        if b in members
    ]
    return "\n".join([" <-> ".join(component), *edges])


def test_the_graph_sees_relative_function_level_and_package_imports():
    graph = import_graph()
    assert "hf_llmsys.cleaning.engine_ray" in graph["hf_llmsys.cleaning.pipeline"]  # inside clean()
    assert "hf_llmsys.models" in graph["hf_llmsys.training.train"]  # from ..models import ... in a function
    assert "hf_llmsys.architectures" in graph["hf_llmsys.registration"]  # from . import architectures
    assert "hf_llmsys" not in graph["hf_llmsys.registration"]
    assert cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a": 1}, "b": {}}) == [["a"]]


def test_no_import_cycles_in_the_package():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(describe(c, graph) for c in found)


def package_of(module: str) -> str:
    """The layer a module belongs to: its subpackage or top-level module (``hf_llmsys.training.sft`` ->
    ``hf_llmsys.training``); the package's own ``__init__`` is ``hf_llmsys``."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, dict[str, int]]) -> dict[str, dict[str, str]]:
    """layer -> {layer it imports: the first module pair that does it, ``a -> b``}, imports within a layer left out."""
    layers: dict[str, dict[str, str]] = {package_of(name): {} for name in graph}
    for name, targets in graph.items():
        for target in targets:
            if package_of(target) != package_of(name):
                layers[package_of(name)].setdefault(package_of(target), f"{name} -> {target}")
    return layers


def test_no_import_cycles_between_the_subpackages():
    """The subpackages form layers: none imports one that imports it back, through any chain (issue 55: cli/ imported
    training/, which imported cli/; chat/ imported training/)."""
    layers = package_graph(import_graph())
    found = cycles(layers)
    assert not found, "cycles between subpackages:\n" + "\n".join(
        f"{' <-> '.join(c)}: " + "; ".join(layers[a][b] for a in c for b in layers[a] if b in c) for c in found
    )


def test_the_command_line_is_the_top_layer():
    """No module outside hf_llmsys/cli/ imports it (the commands import the library, never the reverse), and the
    chat layer does not import the training jobs."""
    layers = package_graph(import_graph())
    into_cli = {layer: how for layer, targets in layers.items() for target, how in targets.items()
                if target == f"{PACKAGE}.cli" and layer != f"{PACKAGE}.cli"}  # fmt: skip
    assert into_cli == {}
    assert f"{PACKAGE}.training" not in layers[f"{PACKAGE}.chat"], layers[f"{PACKAGE}.chat"][f"{PACKAGE}.training"]


def test_package_graph_folds_modules_into_their_layers():
    graph = {"p.a.x": {"p.b.y": 3, "p.a.z": 4}, "p.a.z": {}, "p.b.y": {"p.a.x": 1}, "p": {"p.b.y": 1}}
    assert package_graph(graph) == {
        "p.a": {"p.b": "p.a.x -> p.b.y"},
        "p.b": {"p.a": "p.b.y -> p.a.x"},
        "p": {"p.b": "p -> p.b.y"},
    }
    assert cycles(package_graph(graph)) == [["p.a", "p.b"]]


CLEANING_MODULES = sorted(name for name in modules() if name.startswith(f"{PACKAGE}.cleaning"))

# One interpreter imports the third-party libraries the package builds on (not the package), then forks one child
# per module: each child starts with no hf_llmsys module loaded, as a fresh interpreter would, without paying
# ~7 s of torch / transformers / datasets / ray imports per module.
FORK_EACH = """
import importlib, json, os, sys, traceback
for lib in json.loads(sys.argv[2]):
    try:
        importlib.import_module(lib)
    except ImportError:
        pass
assert not [m for m in sys.modules if m.split(".")[0] == "hf_llmsys"], "the parent must not import the package"
results = {}
for module, late in json.loads(sys.argv[1]):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(module)
            for name in late:
                importlib.import_module(name)
            message = ""
        except BaseException:
            message = traceback.format_exc()[-3000:] or "failed"
        os.write(write, message.encode())
        os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    results[module] = b"".join(chunks).decode() or ("" if status == 0 else f"child exited with status {status}")
print(json.dumps(results))
"""


PRELOAD = ["torch", "numpy", "pandas", "pyarrow", "datasets", "ray", "huggingface_hub", "transformers.modeling_utils",
           "transformers.trainer", "transformers.masking_utils", "transformers.generation"]  # fmt: skip


@pytest.fixture(scope="module")
def imported_alone():
    """module -> "" (imported, then everything it imports inside functions) or the child's traceback."""
    graph = import_graph()
    plan = [(module, sorted(graph[module])) for module in CLEANING_MODULES]
    import json

    done = subprocess.run([sys.executable, "-c", FORK_EACH, json.dumps(plan), json.dumps(PRELOAD)], capture_output=True, text=True,
                          timeout=600, cwd=ROOT.parent)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork (POSIX)")
@pytest.mark.parametrize("module", CLEANING_MODULES)
def test_each_cleaning_module_imports_alone(module, imported_alone):
    """A process with no hf_llmsys module loaded imports the module first, then everything it imports inside
    functions."""
    assert imported_alone[module] == "", imported_alone[module]


def test_importing_alone_catches_a_cycle(tmp_path):
    """The forked check fails a real import cycle (the test above could not fail otherwise)."""
    import json

    pkg = tmp_path / "cyclepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import B\nA = 1\n")
    (pkg / "b.py").write_text("from .a import A\nB = 2\n")
    plan = [("cyclepkg.a", []), ("cyclepkg.b", [])]
    code = f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n" + FORK_EACH
    done = subprocess.run([sys.executable, "-c", code, json.dumps(plan), "[]"], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert "ImportError" in results["cyclepkg.a"] and "ImportError" in results["cyclepkg.b"]
