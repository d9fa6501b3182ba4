"""griffe extension: nxrs's plain-text docstrings read right as Markdown.

The docstrings are plain text with ``code`` spans and doctest examples (checked by
tests/test_docs.py). In Markdown a ``>>>`` line would read as a nested quote and ``2**63`` as
bold, so each example becomes a ``pycon`` block and asterisks outside code are escaped.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

#: A code span (`x` or ``x``) or the text between two of them.
_CODE_SPAN = re.compile(r"(``.*?``|`[^`]*`)")


class DoctestBlocks(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = as_markdown(obj.docstring.value)


def as_markdown(text: str) -> str:
    """Fences each run of a ``>>>`` line and the lines after it, up to a blank line, and escapes
    the asterisks of the other lines outside code spans."""
    out: list[str] = []
    in_example = False
    for line in text.splitlines():
        if line.lstrip().startswith(">>>") and not in_example:
            out.append("```pycon")
            in_example = True
        elif in_example and not line.strip():
            out.append("```")
            in_example = False
        out.append(line if in_example else _escape_asterisks(line))
    if in_example:
        out.append("```")
    return "\n".join(out)


def _escape_asterisks(line: str) -> str:
    parts = _CODE_SPAN.split(line)  # odd indices are code spans
    return "".join(p if k % 2 else p.replace("*", r"\*") for k, p in enumerate(parts))
