"""The ``nxrs`` command line.

- ``nxrs gate``: the seed's checkpoint/resume proof; exit 0 when GREEN.
- ``nxrs inspect FILE [--verify]``: what a checkpoint holds (and, with ``--verify``, whether
  every tensor is intact).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import nxrs
from nxrs.gate import run_gate
from nxrs.inspection import inspect_checkpoint


def _gate(args: argparse.Namespace) -> int:
    return 0 if run_gate(sys.stdout, args.workdir) else 1


def _inspect(args: argparse.Namespace) -> int:
    try:
        problems = inspect_checkpoint(args.file, sys.stdout, verify=args.verify)
    except BrokenPipeError:
        raise  # the reader of our output went away (e.g. `| head`): not the file's fault
    except (nxrs.NxrsError, OSError) as err:
        print(f"nxrs inspect: {args.file}: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    if problems:
        print(f"{problems} tensor(s) failed their checksum", file=sys.stderr)
    return 1 if problems else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nxrs",
        description="Bit-reproducible training with exact checkpoint/resume.",
    )
    parser.add_argument("--version", action="version", version=f"nxrs {nxrs.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    gate = commands.add_parser(
        "gate",
        help="run the seed's checkpoint/resume proof (T1-T4) and the v2 checks (T5-T6)",
    )
    gate.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="directory for the checkpoint file (default: a fresh temporary directory)",
    )
    gate.set_defaults(run=_gate)
    inspect = commands.add_parser(
        "inspect",
        help="print a checkpoint's format, configuration, scalars and tensor table",
    )
    inspect.add_argument("file", type=Path)
    inspect.add_argument(
        "--verify",
        action="store_true",
        help="check every tensor's CRC-32C and exit non-zero on a mismatch (without it, only "
        "the header is validated; a file that does not parse always exits non-zero)",
    )
    inspect.set_defaults(run=_inspect)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.run(args)
    return code


def run() -> None:
    """Console-script entry point."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # Output piped into a command that stopped reading: quietly stop, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    sys.exit(code)
