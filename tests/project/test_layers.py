"""The folders are the layers (SPEC 16): each imports only from layers below it, never in a cycle.

An AST walk over every module of ``context_manager`` and ``notices``: it resolves each import
(relative or absolute, at module level, under ``TYPE_CHECKING`` or inside a function) to the
project module it names and checks it against the layer order. The simulator is the independent
check of the compiler, so it may import nothing from the library but its own package. The test
modules sit in one folder per layer (``TEST_FOLDERS``), as the layers are folders.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LAYERS: tuple[str, ...] = (
    "context_manager._model",
    "context_manager._store",
    "context_manager._binding",
    "context_manager._reasoning",
    "context_manager._compile",
    "context_manager._telemetry",
    "context_manager._reconcile",
    "context_manager._manager",
    "context_manager",  # the public names (__init__): what notices may use
    "notices",
    "context_manager.web",  # the console: above the facade, mounted by the runtime
    "context_manager.runtime",
    "context_manager.adapters",
    "context_manager._cli",
)
"""Lowest first. A module may import its own layer and any layer before it."""

FACADES = frozenset({"context_manager", "context_manager.__main__"})
"""Modules that only re-export or start things; they sit at the layer they are listed at."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> Iterator[tuple[str, Path]]:
    for package in ("context_manager", "notices"):
        for path in sorted((ROOT / package).rglob("*.py")):
            yield _module_name(path), path


def _imports(name: str, path: Path) -> Iterator[tuple[str, int, bool]]:
    """``(imported module, line, at function level)`` for every project import of a module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    in_function: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                in_function.add(id(inner))
    for node in ast.walk(tree):
        nested = id(node) in in_function
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno, nested
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield module, node.lineno, nested
            for alias in node.names:  # ``from . import _x`` names a module too
                yield f"{module}.{alias.name}", node.lineno, nested


def _project(module: str) -> bool:
    return module.split(".")[0] in {"context_manager", "notices"}


def _layer(module: str) -> int | None:
    best: int | None = None
    best_length = -1
    for index, layer in enumerate(LAYERS):
        if (module == layer or module.startswith(layer + ".")) and len(layer) > best_length:
            best, best_length = index, len(layer)
    if module.startswith("context_manager.simulator"):
        return None
    if best == LAYERS.index("context_manager") and module not in FACADES:
        return None  # a private top-level module not placed in a layer: reported below
    return best


def _known(module: str) -> bool:
    """Whether ``module`` is a real module (not a name imported from one)."""
    relative = module.replace(".", "/")
    return (ROOT / f"{relative}.py").exists() or (ROOT / relative / "__init__.py").exists()


def _edges() -> list[tuple[str, str, int, bool]]:
    edges = []
    for name, path in _modules():
        for module, line, nested in _imports(name, path):
            if _project(module) and _known(module) and module != name:
                edges.append((name, module, line, nested))
    return edges


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    upward = []
    for name, module, line, _ in _edges():
        if name.startswith("context_manager.simulator") or module.startswith(
            "context_manager.simulator"
        ):
            continue
        if name == "context_manager.__main__":  # the entry point starts the command line
            continue
        mine, theirs = _layer(name), _layer(module)
        if mine is None or theirs is None:
            continue
        if theirs > mine and not module.startswith(name + "."):
            upward.append(f"{name}:{line} imports {module}")
    assert upward == []


def test_every_library_module_sits_in_a_layer() -> None:
    loose = [
        name
        for name, _ in _modules()
        if not name.startswith("context_manager.simulator") and _layer(name) is None
    ]
    assert loose == []


def test_the_simulator_imports_nothing_from_the_library_it_checks() -> None:
    reaching = [
        f"{name}:{line} imports {module}"
        for name, module, line, _ in _edges()
        if name.startswith("context_manager.simulator")
        and not module.startswith("context_manager.simulator")
        and module != "context_manager"  # the package itself, for the shared error base only
    ]
    assert reaching == []


def test_no_function_imports_a_project_module() -> None:
    nested = [f"{name}:{line} imports {module}" for name, module, line, inner in _edges() if inner]
    assert nested == []


def test_the_project_modules_import_each_other_without_a_cycle() -> None:
    graph: dict[str, set[str]] = {}
    for name, module, _, _ in _edges():
        if module.startswith(name + "."):  # a package re-exporting its own modules
            continue
        graph.setdefault(name, set()).add(module)
    visiting: list[str] = []
    done: set[str] = set()
    cycles: list[str] = []

    def visit(node: str) -> None:
        if node in done:
            return
        if node in visiting:
            cycles.append(" -> ".join([*visiting[visiting.index(node) :], node]))
            return
        visiting.append(node)
        for child in sorted(graph.get(node, ())):
            visit(child)
        visiting.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)
    assert cycles == []


@pytest.mark.parametrize("layer", [layer for layer in LAYERS if layer != "context_manager"])
def test_each_layer_exists_as_a_folder_or_module(layer: str) -> None:
    assert _known(layer), layer


TEST_FOLDERS: dict[str, str | None] = {
    "model": "context_manager._model",
    "store": "context_manager._store",
    "binding": "context_manager._binding",
    "reasoning": "context_manager._reasoning",
    "compile": "context_manager._compile",
    "telemetry": "context_manager._telemetry",
    "reconcile": "context_manager._reconcile",
    "notices": "notices",
    "web": "context_manager.web",
    "runtime": "context_manager.runtime",
    "adapters": "context_manager.adapters",
    "cli": "context_manager._cli",
    "simulator": "context_manager.simulator",
    "project": None,  # the whole project: layers, public names, docs, examples, benchmarks
}
"""Each folder of ``tests/`` and the layer its tests exercise (the tests mirror the layers)."""


def test_every_test_module_sits_in_the_folder_of_a_layer() -> None:
    tests = ROOT / "tests"
    loose = sorted(path.name for path in tests.glob("test_*.py"))
    assert loose == [], "a test module outside a layer's folder"
    for path in sorted(tests.rglob("test_*.py")):
        assert path.parent.parent == tests, path
        assert path.parent.name in TEST_FOLDERS, path


@pytest.mark.parametrize("folder", sorted(TEST_FOLDERS))
def test_each_test_folder_names_a_layer_that_exists(folder: str) -> None:
    layer = TEST_FOLDERS[folder]
    assert (ROOT / "tests" / folder).is_dir(), folder
    assert layer is None or _known(layer), layer


def test_a_test_module_imports_other_test_modules_only_from_its_own_folder() -> None:
    """Shared helpers live in ``tests/helpers.py``: a test module found only because another
    folder's tests were collected first imports in one run and fails in the next."""
    tests = ROOT / "tests"
    for path in sorted(tests.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            for name in names:
                if name.startswith("test_"):
                    assert (path.parent / f"{name}.py").exists(), f"{path}: {name}"
