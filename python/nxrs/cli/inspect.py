"""``nxrs inspect FILE``: what a checkpoint holds (``nxrs._audit.inspection``), and with
``--verify`` whether every tensor is intact."""

from __future__ import annotations

import argparse
import sys

import nxrs
from nxrs._audit.inspection import describe_checkpoint, inspect_checkpoint
from nxrs._util.files import json_text
from nxrs.cli._common import error_line, nonempty_path

HELP = "print a checkpoint's format, configuration, scalars and tensor table"
DESCRIPTION = (
    "Print what an NXCK checkpoint (v1 or v2) holds: its format, trainer "
    "configuration, scalars (epoch, Adam's bias-correction powers as bits) and tensor "
    "table (name, dtype, shape, offset, size, CRC-32C, checksum status). Values read from "
    "the file are clipped, so a hostile header cannot flood the terminal."
)
EPILOG = """\
examples:
  nxrs inspect run/step-000000000450.nxck
  nxrs inspect run.nxck --verify                     # also check every tensor's CRC-32C
  nxrs inspect run.nxck --json | jq .scalars.epoch

--json prints one object: file, bytes, format (1 or 2), config, scalars, metadata, tensors
(name, dtype, shape, offset, nbytes, crc32c, checksum: ok, BAD, not checked, or none for v1)
and problems (the tensors that failed their checksum).

exit status: 0 the file is a readable checkpoint (and, with --verify, every tensor is intact),
1 it is not (one line on stderr naming the problem), 2 usage error.
"""


def add_arguments(inspect: argparse.ArgumentParser) -> None:
    inspect.add_argument("file", type=nonempty_path)
    inspect.add_argument(
        "--verify",
        action="store_true",
        help="check every tensor's CRC-32C and exit non-zero on a mismatch (without it, only "
        "the header is validated; a file that does not parse always exits non-zero)",
    )
    inspect.add_argument(
        "--json", action="store_true", help="print the same as one JSON object (see below)"
    )


def run(args: argparse.Namespace) -> int:
    try:
        if args.json:
            summary = describe_checkpoint(args.file, verify=args.verify)
            sys.stdout.write(json_text(summary, indent=1) + "\n")
            problems: int = summary["problems"]
        else:
            problems = inspect_checkpoint(args.file, sys.stdout, verify=args.verify)
    except (nxrs.NxrsError, OSError) as err:
        print(f"nxrs inspect: {args.file}: {error_line(err)}", file=sys.stderr)
        return 1
    if problems:
        print(f"{problems} tensor(s) failed their checksum", file=sys.stderr)
    return 1 if problems else 0
