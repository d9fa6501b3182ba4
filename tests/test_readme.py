"""The README's Python examples run as written, each on its own in a fresh directory (a reader
may copy any one of them), and its links work on the package index too (absolute)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_the_readme_has_python_examples() -> None:
    assert len(python_blocks()) >= 3


@pytest.mark.parametrize("k", range(len(python_blocks())))
def test_each_readme_example_runs_on_its_own(
    k: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh namespace and directory per block: no block leans on another's imports or data."""
    monkeypatch.chdir(tmp_path)
    block = python_blocks()[k]
    if "nxrs.sweep(" in block and importlib.util.find_spec("ray") is None:
        pytest.skip(f"README.md python block {k} needs the ray extra, which is not installed")
    exec(compile(block, f"README.md python block {k}", "exec"), {"__name__": "readme"})
    if ".save(" in block:
        assert any(path.suffix == ".nxck" for path in tmp_path.rglob("*"))


def test_the_readme_links_are_absolute() -> None:
    """PyPI shows the README without the repository: relative links and anchors would break."""
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r"<(\w+:[^>\s]+)>", text)
    assert targets
    relative = [t for t in targets if not t.startswith(("https://", "http://", "mailto:"))]
    assert not relative
