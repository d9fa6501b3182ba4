"""The sdist carries what its own tests and docs need (golden fixtures, the Python tests, the
documents the README links to, the licences) and nothing of a work tree (build output, venvs)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    shutil.which("cargo") is None or not (ROOT / "pyproject.toml").is_file(),
    reason="building an sdist needs the source tree and cargo (absent where a wheel is tested)",
)


@pytest.fixture(scope="module")
def sdist_files(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    out = tmp_path_factory.mktemp("sdist")
    subprocess.run(
        [sys.executable, "-m", "maturin", "sdist", "--out", str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    (archive,) = out.glob("nxrs-*.tar.gz")
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    top = names[0].split("/")[0]
    return {name.split("/", 1)[1] for name in names if "/" in name and name.startswith(top)}


def source_files(*directories: str) -> set[str]:
    """The files of the source tree under ``directories``, as relative paths."""
    return {
        str(path.relative_to(ROOT))
        for directory in directories
        for path in (ROOT / directory).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in {".pyc", ".so"}
    }


def test_the_sdist_holds_the_tests_docs_and_licences(sdist_files: set[str]) -> None:
    wanted = {"LICENSE-MIT", "LICENSE-APACHE", "README.md", "pyproject.toml", "Cargo.lock"}
    wanted |= {"tests/golden/seed.json", "tests/golden/general.json", "docs/FORMAT.md"}
    wanted |= {"bench/README.md", "mkdocs.yml", "rust/nxrs-core/tests/golden.rs"}
    wanted |= source_files("tests", "docs", "python")
    assert wanted - sdist_files == set()


def test_the_sdist_holds_no_build_output(sdist_files: set[str]) -> None:
    stray = {f for f in sdist_files if f.startswith(("target/", ".venv/", "dist/", ".git/"))}
    stray |= {f for f in sdist_files if "__pycache__" in f or f.endswith((".so", ".pyc"))}
    assert stray == set()
