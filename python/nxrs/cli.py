"""The ``nxrs`` command line: ``nxrs gate`` runs the seed's checkpoint/resume proof."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import nxrs
from nxrs.gate import run_gate


def _gate(args: argparse.Namespace) -> int:
    return 0 if run_gate(sys.stdout, args.workdir) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nxrs",
        description="Bit-reproducible training with exact checkpoint/resume.",
    )
    parser.add_argument("--version", action="version", version=f"nxrs {nxrs.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    gate = commands.add_parser(
        "gate",
        help="run the seed's checkpoint/resume proof (T1-T4); exit 0 when GREEN",
    )
    gate.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="directory for the checkpoint file (default: a fresh temporary directory)",
    )
    gate.set_defaults(run=_gate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.run(args)
    return code


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
