"""The Python examples of the README and of the documentation pages run as written, each on its
own in a fresh directory (a reader may copy any one of them), and the README's links work on the
package index too (absolute) and lead to documentation pages, headings and files that exist."""

from __future__ import annotations

import importlib.util
import re
import textwrap
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
SITE = "https://nxrs-dev.github.io/nxrs/"
REPOSITORY = "https://github.com/nxrs-dev/nxrs"
#: What an example needs beyond the test extra's core, by a phrase that shows it: the example
#: skips, saying so, when that module is not installed.
NEEDS = {"nxrs.sweep(": "ray", 'engine="ray"': "ray", "load_mnist1d(": "mnist1d"}


def python_blocks(page: Path) -> list[str]:
    """The page's ```python blocks, dedented (a block may sit inside a list item)."""
    text = page.read_text(encoding="utf-8")
    blocks = re.findall(r"^( *)```python\n(.*?)^\1```", text, re.S | re.M)
    return [textwrap.dedent(body) for _, body in blocks]


EXAMPLES = [(page, k) for page in PAGES for k in range(len(python_blocks(page)))]


def test_the_readme_and_the_pages_it_moved_to_have_python_examples() -> None:
    """The README keeps one; the quickstart, distributed and interop pages hold the rest."""
    for name in ("README.md", "docs/quickstart.md", "docs/distributed.md", "docs/interop.md"):
        assert python_blocks(ROOT / name), name


@pytest.mark.parametrize(
    ("page", "k"), EXAMPLES, ids=[f"{p.relative_to(ROOT)}:{k}" for p, k in EXAMPLES]
)
def test_each_example_runs_on_its_own(
    page: Path, k: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh namespace and directory per block: no block leans on another's imports or data."""
    monkeypatch.chdir(tmp_path)
    block = python_blocks(page)[k]
    name = f"{page.relative_to(ROOT)} python block {k}"
    for phrase, module in NEEDS.items():
        if phrase in block and importlib.util.find_spec(module) is None:
            pytest.skip(f"{name} needs {module}, which is not installed")
    exec(compile(block, name, "exec"), {"__name__": "example"})
    if ".save(" in block:
        assert any(path.suffix == ".nxck" for path in tmp_path.rglob("*"))


def readme_links() -> list[str]:
    text = README.read_text(encoding="utf-8")
    return re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r"<(\w+:[^>\s]+)>", text)


def test_the_readme_links_are_absolute() -> None:
    """PyPI shows the README without the repository: relative links and anchors would break."""
    targets = readme_links()
    assert targets
    relative = [t for t in targets if not t.startswith(("https://", "http://", "mailto:"))]
    assert not relative


def test_the_readme_links_lead_to_pages_headings_and_files_that_exist() -> None:
    """A documentation site link names a page of docs/ (and one of its headings, after #); a link
    into the repository names one of its files."""
    toc = pytest.importorskip("markdown.extensions.toc", reason="needs markdown (the docs extra)")
    broken = [link for link in readme_links() if not leads_somewhere(link, toc.slugify)]
    assert not broken


def leads_somewhere(link: str, slugify: Callable[[str, str], str]) -> bool:
    if link.startswith(SITE):
        page, _, anchor = link[len(SITE) :].partition("#")
        source = ROOT / "docs" / f"{page.removesuffix('/') or 'index'}.md"
        is_page = (page == "" or page.endswith("/")) and source.is_file()
        return is_page and (not anchor or anchor in heading_slugs(source, slugify))
    if link.startswith(f"{REPOSITORY}/"):
        return (ROOT / re.sub(r"^(blob|tree)/main/", "", link[len(REPOSITORY) + 1 :])).exists()
    return True


def heading_slugs(page: Path, slugify: Callable[[str, str], str]) -> set[str]:
    """The anchors mkdocs gives the page's headings: the heading's text (code spans as their
    text, links as their label) through the toc extension's slugify."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    slugs = set()
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        words = re.sub(r"\[([^]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
        slugs.add(slugify(words, "-"))
    return slugs
