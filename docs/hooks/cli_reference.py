"""mkdocs hook: the command-line reference, generated from ``nxrs.cli.build_parser()``.

A page line ``<!-- nxrs-cli-reference -->`` becomes the ``--help`` of ``nxrs`` and of every
subcommand, in the parser's order, so the page cannot drift from the program.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

MARKER = "<!-- nxrs-cli-reference -->"
#: argparse wraps help text to the terminal's width; the page gets a fixed one.
WIDTH = "88"


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if MARKER not in markdown:
        return markdown
    from nxrs.cli import build_parser

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parser = build_parser()
        sections = [_section("nxrs", parser)]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                sections += [_section(f"nxrs {n}", p) for n, p in action.choices.items()]
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    return markdown.replace(MARKER, "\n\n".join(sections))


def _section(title: str, parser: argparse.ArgumentParser) -> str:
    return f"## `{title}`\n\n```text\n{parser.format_help().rstrip()}\n```"
