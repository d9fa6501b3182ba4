"""``nxrs diff A B``: why two runs (or checkpoints) of one configuration differ
(``nxrs._audit.diff.diff``), in words or as JSON."""

from __future__ import annotations

import argparse
import sys

import nxrs
from nxrs._audit.diff import diff
from nxrs.cli._common import (
    EXIT_DONE,
    EXIT_FAILED,
    error_line,
    nonempty_location,
    nonempty_text,
)
from nxrs.cli._recorded import read_command

HELP = "find the first step at which two runs (or checkpoints) of one configuration differ"
DESCRIPTION = (
    "Compare two run directories (of nxrs train --ckpt-dir or fit) or two checkpoint files of "
    "the same configuration. For runs: their transcripts give the last common state; both runs "
    "are replayed from it, each on its own data, one step at a time, to the first step after "
    "which their states differ; the report names that step, the first differing tensor element "
    "and whether the runs' data differ. The data of an nxrs train run is read again from the "
    "file its command names (--data, --data-b when it moved); a fit run's data is the file "
    "given (--data, --data-b: the whole file, as nxrs.data.load reads it), needed only when the "
    "transcripts do not settle the question (nxrs.diff(a, b, x, y) in Python takes arrays). "
    "Data that is not a run's own is refused. For checkpoint files: at one step, their first "
    "difference; at different steps, the earlier is replayed on --data to the later's step (read "
    "as the run directory holding the earlier checkpoint read it: an nxrs train run's train "
    "split, else the whole file)."
)
EPILOG = """\
examples:
  nxrs diff run-a run-b
  nxrs diff run-a run-b --data moved/a.npz --data-b moved/b.npz
  nxrs diff run-a/step-000000000100.nxck run-b/step-000000000100.nxck
  nxrs diff run-a run-b --json | jq .first_differing_step

exit status:
  0  the two are the same bits (up to the shorter run's last step)
  1  they differ (the report says where), or an error (one line on stderr)
  2  usage error
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "a",
        metavar="A",
        type=nonempty_location,
        help="a run directory or checkpoint (a path, or a URL on object storage)",
    )
    parser.add_argument("b", metavar="B", type=nonempty_location, help="the other one")
    parser.add_argument(
        "--data",
        type=nonempty_text,
        metavar="FILE",
        help="A's data file in place of the one its nxrs train command names, or the file a fit "
        "run trained on (and B's, unless --data-b); for two checkpoint files, the data to replay "
        "the earlier one on, read as its run directory read it (an nxrs train run's train split)",
    )
    parser.add_argument(
        "--data-b", type=nonempty_text, metavar="FILE", help="B's data file (as --data is A's)"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    try:
        report = diff(
            args.a, args.b, data=args.data, data_b=args.data_b, _read_command=read_command
        )
    except BrokenPipeError:
        raise
    except (nxrs.NxrsError, OSError, ValueError) as err:
        print(f"nxrs diff: {error_line(err)}", file=sys.stderr)
        return EXIT_FAILED
    sys.stdout.write(report.to_json() + "\n" if args.json else str(report))
    return EXIT_DONE if report.identical else EXIT_FAILED
