"""``nxrs gate``: the seed's checkpoint/resume proof (``nxrs._audit.gate.run_gate``)."""

from __future__ import annotations

import argparse
import sys

from nxrs._audit.gate import run_gate
from nxrs.cli._common import nonempty_path

HELP = "run the seed's checkpoint/resume proof (T1-T4) and the v2 checks (T5-T6)"
DESCRIPTION = (
    "Train the seed program's 6-10-4 model for 800 epochs without a break, "
    "and again with a checkpoint and a restart at epoch 400 (v1 and v2 files), and check "
    "that both end on the same bits and on the independent reference's hashes; check "
    "that damaged files are refused. Prints each check and verdict=GREEN or RED."
)
EPILOG = """\
examples:
  nxrs gate
  nxrs gate --workdir /tmp/gate      # keep the checkpoint files it writes

exit status: 0 verdict GREEN (every check passed), 1 a check failed, 2 usage error.
"""


def add_arguments(gate: argparse.ArgumentParser) -> None:
    gate.add_argument(
        "--workdir",
        type=nonempty_path,
        default=None,
        help="an existing directory for the checkpoint files (default: a fresh temporary "
        "directory, removed afterwards)",
    )


def run(args: argparse.Namespace) -> int:
    return 0 if run_gate(sys.stdout, args.workdir) else 1


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.workdir is not None and not args.workdir.is_dir():
        parser.error(f"--workdir {args.workdir}: no such directory")
