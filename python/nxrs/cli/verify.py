"""``nxrs verify DIR``: checks that a run directory's model came from its data and
configuration, bit for bit (``nxrs.verify``), in human terms or as JSON."""

from __future__ import annotations

import argparse
import sys

from nxrs._audit.verify import verify
from nxrs._util.files import json_text
from nxrs.cli._common import (
    EXIT_DONE,
    EXIT_FAILED,
    nonempty_location,
    nonempty_text,
    positive_int,
)
from nxrs.cli._recorded import read_command

HELP = "check that a run directory's model came from its data and configuration, bit for bit"
DESCRIPTION = (
    "Check the run in DIR (nxrs train --ckpt-dir DIR, or fit(checkpoint=DIR)) against its "
    "transcript nxrs-transcript.jsonl, with a tolerance of zero: the transcript's hash chain; "
    "every checkpoint file against its entry (configuration, then state digest) and that the "
    "final model is kept; the data (read and split again as the recorded nxrs train command "
    "did, or --data FILE in its place; for a fit run, --data FILE read whole) against the "
    "recorded digests; and segments of the run "
    "(consecutive entries) replayed from the nearest kept checkpoint before them, or from the "
    "run's fresh start, comparing the state digest at every entry on the way. Segments are "
    "replayed in parallel threads (or Ray tasks with --engine ray); any thread count, backend "
    "or number of workers gives the same bits."
)
EPILOG = """\
examples:
  nxrs train --ckpt-dir run --every 50 --keep all
  nxrs verify run                       # 8 segments chosen by --seed 0, plus the last
  nxrs verify run --all --json | jq .first_failure
  nxrs verify run --data moved/data.npz --segments 20 --seed 7
  nxrs verify run --engine ray --workers 8

A segment that cannot be replayed (no kept checkpoint before it, and a run that started from
given weights) is reported as not verifiable, not as a failure. A checkpoint the transcript
lists but the directory lacks is missing: a failure when the run keeps every checkpoint
(--keep all), pruned otherwise. A run being trained is verified as its transcript was when
read (later checkpoints are not recorded yet; files it prunes meanwhile are skipped and said
so); a run killed between saving a checkpoint and recording it ended uncleanly: that newest
checkpoint is noted, not a failure. --json prints the report: ok, run_dir, entries,
checkpoints (file, entry, step, status), missing, keep, held_by, segments (start, end,
start_step, end_step, replayed_from, steps, seconds, status, difference), failures,
first_failure, data, notes, seconds.

exit status:
  0    every check holds
  1    a check failed (the first failing one on stderr as one line, 'nxrs verify: ...'),
       or the run cannot be verified (no such directory, a file rather than a run directory,
       a fit run without --data, an unreadable data file)
  2    usage error
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", type=nonempty_location)
    parser.add_argument(
        "--data",
        type=nonempty_text,
        default=None,
        metavar="FILE",
        help="the data file, in place of the --data the run's command recorded (a file moved "
        "since), read and split as the run did; for a run of fit, the file it trained on, read "
        "whole",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--segments",
        type=positive_int,
        default=8,
        metavar="K",
        help="replay K segments chosen at random by --seed, plus the last (default 8)",
    )
    which.add_argument("--all", action="store_true", help="replay every segment")
    parser.add_argument(
        "--seed", type=int, default=0, help="the seed choosing the segments (default 0)"
    )
    parser.add_argument(
        "--engine",
        choices=("local", "ray"),
        default="local",
        help="replay segments in threads of this process (local, the default) or as Ray tasks",
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="segments replayed at once (threads, or Ray tasks; default: the CPUs available, "
        "or every segment for Ray)",
    )
    parser.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="threads of each replay (default 1)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    report = verify(
        args.directory,
        data=args.data,
        segments="all" if args.all else args.segments,
        seed=args.seed,
        engine=args.engine,
        workers=args.workers,
        threads=args.threads,
        _read_command=read_command,
    )
    if args.json:
        sys.stdout.write(json_text(report.to_dict(), indent=1) + "\n")
    else:
        sys.stdout.write(str(report) + "\n")
    if report.first_failure is not None:
        print(f"nxrs verify: {report.first_failure}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_DONE
