"""The package's layers (``docs/ARCHITECTURE.md``): every module's imports point down the table
below, or sideways within a layer, never up, and no modules import each other in a circle;
no module is over 600 lines. Imports are read from the source (``ast``): at module level and
inside functions, absolute and relative; only those under ``if TYPE_CHECKING:`` are exempt
(type checkers read them, Python does not run them)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import nxrs

#: Bottom to top: a module may import from its own layer and the layers before it. A module is
#: in the layer of the longest name here that is it or a package holding it (``nxrs`` is the
#: package's ``__init__`` alone).
LAYERS: list[tuple[str, ...]] = [
    ("nxrs._nxrs",),  # the compiled core (its stubs: _nxrs.pyi)
    ("nxrs._util", "nxrs._renamed"),  # checks, files, config, signals, progress; old names
    ("nxrs._storage",),  # the object stores, knowing no run
    ("nxrs.layers", "nxrs.data", "nxrs.softf32"),  # layer objects, data files, softf32
    ("nxrs._runs",),  # run directories: manifest, lock, lease, transcript, checkpoints
    ("nxrs._train", "nxrs._interop"),  # fit and the Ray engine; the formats
    ("nxrs._trainer", "nxrs._checkpoint"),  # nxrs.Trainer, nxrs.Checkpoint
    ("nxrs._audit", "nxrs._sweeps", "nxrs.sklearn", "nxrs.interop"),  # built on the Trainer
    ("nxrs",),  # the package: what it exports
    ("nxrs.cli", "nxrs.__main__"),  # the command line, which nothing imports
]

#: The longest a module may be.
MAX_LINES = 600

PACKAGE = Path(nxrs.__file__).parent


def module_names(package: Path) -> dict[str, Path]:
    """Every module of ``package`` (a directory) by its dotted name: its Python files, and the
    stubs of its compiled modules (``_nxrs.pyi``)."""
    names = {}
    for path in sorted([*package.rglob("*.py"), *package.rglob("*.pyi")]):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """The modules of the package that module ``name`` imports, with the line of each import:
    ``import a.b`` imports ``a.b``; ``from a import b`` imports ``a.b`` when that is a module,
    else ``a`` (a name it defines); relative forms are resolved against ``name``'s package.
    The packages above an imported module are not counted: importing them runs only their
    ``__init__``, which is counted where it is imported by name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    exempt: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            exempt |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    here = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if id(node) in exempt:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                base = ".".join([*package, *([base] if base else [])])
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]  # a name in a module: the module
            if target and target != name:
                found.append((target, node.lineno))
    return found


def layer_of(name: str) -> int | None:
    best, layer = -1, None
    for k, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            holds = name.startswith(prefix + ".") and prefix != "nxrs"  # the package's own
            if (name == prefix or holds) and len(prefix) > best:
                best, layer = len(prefix), k
    return layer


def problems(package: Path) -> list[str]:
    """What breaks the layering in ``package``: modules in no layer, upward imports, circles
    of imports, modules over ``MAX_LINES`` lines."""
    modules = module_names(package)
    found = []
    graph: dict[str, set[str]] = {}
    for name, path in sorted(modules.items()):
        where = os.path.relpath(path, package.parent)
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            found.append(f"{where}: {lines} lines, over {MAX_LINES}")
        layer = layer_of(name)
        if layer is None:
            found.append(f"{where}: {name} is in no layer of LAYERS")
        graph[name] = set()
        for target, line in imports(name, path, modules):
            graph[name].add(target)
            up = layer_of(target)
            if layer is not None and up is not None and up > layer:
                found.append(
                    f"{where}:{line}: {name} (layer {layer}) imports {target} (layer {up}), "
                    "a layer above"
                )
    found += [f"modules importing each other in a circle: {', '.join(c)}" for c in cycles(graph)]
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each set of modules that import each other in a circle (directly or through others: a
    strongly connected component of the import graph with more than one module), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_is_layered() -> None:
    assert problems(PACKAGE) == []


def test_the_check_finds_an_upward_import_a_cycle_and_a_long_module(tmp_path: Path) -> None:
    # A package named nxrs laid out wrongly: the check must say so, or it could pass anything.
    root = tmp_path / "nxrs"
    (root / "_util").mkdir(parents=True)
    (root / "_runs").mkdir()
    (root / "__init__.py").write_text("")
    (root / "_util" / "__init__.py").write_text("")
    (root / "_runs" / "__init__.py").write_text("")
    # Upward, inside a function, relative: _util (layer 1) -> _runs (layer 4).
    (root / "_util" / "files.py").write_text("def f():\n    from .._runs import lease\n")
    (root / "_runs" / "lease.py").write_text("from nxrs._runs.directory import NAME\n")
    (root / "_runs" / "directory.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import nxrs.cli\n"
        "from . import lease\nNAME = 1\n" + "\n" * MAX_LINES
    )
    (root / "stray.py").write_text("")
    found = problems(root)
    assert any("nxrs._util.files (layer 1) imports nxrs._runs.lease (layer 4)" in p for p in found)
    circle = "modules importing each other in a circle: nxrs._runs.directory, nxrs._runs.lease"
    assert circle in found
    assert any(p.startswith("nxrs/_runs/directory.py: 60") for p in found), found
    assert any("nxrs.stray is in no layer" in p for p in found)
    # The import under TYPE_CHECKING is exempt: nothing names nxrs.cli.
    assert not any("nxrs.cli" in p for p in found)


def test_no_module_outside_the_cli_imports_it() -> None:
    # Implied by the CLI's place at the top, and said on its own: the library's rule.
    modules = module_names(PACKAGE)
    users = [
        name
        for name, path in modules.items()
        if not name.startswith(("nxrs.cli", "nxrs.__main__"))
        for target, _ in imports(name, path, modules)
        if target == "nxrs.cli" or target.startswith("nxrs.cli.")
    ]
    assert users == []
