"""The references in ``tests/reference/`` are independent of nxrs, as a test and not only as
their docstrings' rule: each runs as a script (its fixture check) in a process where ``nxrs``
cannot be imported, and none imports anything but the standard library, numpy, scikit-learn,
mpmath and the other references."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REFERENCE_DIR = Path(__file__).resolve().parent / "reference"
REFERENCES = sorted(p for p in REFERENCE_DIR.glob("*.py") if p.name != "__init__.py")
#: How each runs as a script, in its cheapest complete mode (general_ref.py's digits run is the
#: slow part of its fixture; test_general_reference.py checks it in-process).
ARGUMENTS = {
    "seed_ref.py": ["--check"],
    "general_ref.py": ["--check", "--no-digits"],
    "layers_ref.py": ["--check"],
}
THIRD_PARTY = {"numpy", "sklearn", "mpmath"}
#: ``import nxrs`` anywhere in a process started with this directory first on its path fails.
BLOCKER = "raise ImportError('tests/reference must not import nxrs')\n"


def imports(path: Path) -> list[str]:
    """The top-level names of every module ``path`` imports (relative imports as ``.``)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names.append("." if node.level else (node.module or "").split(".")[0])
    return names


def test_every_reference_is_run_here() -> None:
    assert sorted(p.name for p in REFERENCES) == sorted(ARGUMENTS)


@pytest.mark.parametrize("path", REFERENCES, ids=lambda p: p.name)
def test_imports_nothing_but_the_standard_library_and_known_packages(path: Path) -> None:
    siblings = {p.stem for p in REFERENCES} | {"."}
    stdlib = set(getattr(sys, "stdlib_module_names", ()))  # Python >= 3.10
    names = imports(path)
    assert "nxrs" not in names
    if stdlib:
        assert [n for n in names if n not in stdlib | THIRD_PARTY | siblings] == []
    # Nor by a name computed at run time.
    source = path.read_text()
    assert "import_module" not in source and "__import__" not in source


@pytest.mark.parametrize("path", REFERENCES, ids=lambda p: p.name)
def test_runs_with_nxrs_unimportable(path: Path, tmp_path: Path) -> None:
    blocked = tmp_path / "blocked"
    (blocked / "nxrs").mkdir(parents=True)
    (blocked / "nxrs" / "__init__.py").write_text(BLOCKER)
    # Only the blocker on the path (not the source tree's python/): the installed nxrs is
    # behind it, the reference's own directory is the script's.
    env = {**os.environ, "PYTHONPATH": str(blocked)}
    check = subprocess.run(
        [sys.executable, "-c", "import nxrs"], env=env, capture_output=True, text=True
    )
    assert check.returncode == 1 and "must not import nxrs" in check.stderr
    proc = subprocess.run(
        [sys.executable, str(path), *ARGUMENTS[path.name]],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK: " in proc.stdout, proc.stdout
