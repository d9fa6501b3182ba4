"""The ``nxrs`` command line.

- ``nxrs train``: train an MLP or a model of layer objects (``--model``; by default an MLP on
  scikit-learn's bundled digits) and print its accuracy, full-state hash and checkpoint;
  ``--json`` for a machine-readable summary.
- ``nxrs gate``: the seed's checkpoint/resume proof; exit 0 when GREEN.
- ``nxrs inspect FILE [--verify] [--json]``: what a checkpoint holds (and, with ``--verify``,
  whether every tensor is intact).
- ``nxrs status DIR [--json]``: a run directory's manifest, progress, checkpoints and history.
- ``nxrs sweep --dir DIR --grid KEY=V1,V2 ...``: a grid of trainings as Ray tasks
  (``nxrs.sweep``).
- ``nxrs diff A B [--json]``: the first step at which two runs (or checkpoints) differ.
- ``nxrs verify DIR [--all] [--json]``: check that a run directory's model came from its data
  and configuration, bit for bit (``nxrs.verify``); exit 0 when every check holds.

One module per command (``nxrs.cli.train``, ``gate``, ``inspect``, ``status``, ``sweep``,
``verify``, ``diff``), and ``nxrs.cli._common`` for what they share (option types, exit
statuses). The library never imports this package.

``nxrs`` with no command prints the command list and exits 2. A user error (bad arguments, a
missing or damaged file, bad data) is one line on stderr and exit status 1 or 2, never a
traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import nxrs
from nxrs._runs.errors import SaveFailedWarning
from nxrs.cli import diff, gate, inspect, status, sweep, train, verify
from nxrs.cli._common import (
    EXIT_DIVERGED,
    EXIT_DONE,
    EXIT_FAILED,
    EXIT_LOCKED,
    EXIT_OTHER_RUN,
    EXIT_SAVE_FAILED,
    EXIT_SIGINT,
    EXIT_SIGTERM,
    EXIT_USAGE,
    Parser,
    add_command,
    error_line,
)
from nxrs.cli._streams import own_standard_streams

__all__ = [
    "EXIT_DIVERGED",
    "EXIT_DONE",
    "EXIT_FAILED",
    "EXIT_LOCKED",
    "EXIT_OTHER_RUN",
    "EXIT_SAVE_FAILED",
    "EXIT_SIGINT",
    "EXIT_SIGTERM",
    "EXIT_USAGE",
    "build_parser",
    "main",
    "run",
]

#: The commands, in the order ``nxrs --help`` lists them: each module's ``HELP``,
#: ``DESCRIPTION`` and ``EPILOG`` make its parser, ``add_arguments`` fills it, ``check`` (if
#: any) refuses bad combinations as usage errors and ``run`` runs it (its exit status).
COMMANDS = (train, gate, inspect, status, sweep, verify, diff)


@contextlib.contextmanager
def _warnings_as_lines(command: str) -> Iterator[None]:
    """Every Python warning during a command as one line on stderr, ``nxrs COMMAND: warning:
    ...`` (the message's first line, without the source file and line a raw warning shows),
    each text once: a damaged checkpoint that several steps look at is reported once."""
    seen: set[str] = set()

    def show(message: Any, category: Any, *rest: Any, **kw: Any) -> None:
        text = (str(message).strip().splitlines() or [category.__name__])[0]
        if text not in seen:
            seen.add(text)
            print(f"nxrs {command}: warning: {text}", file=sys.stderr, flush=True)

    with warnings.catch_warnings():
        # Each failed periodic save is its own event (a later save may succeed).
        warnings.simplefilter("always", SaveFailedWarning)
        warnings.showwarning = show
        yield


@contextlib.contextmanager
def _library_logs_hidden() -> Iterator[None]:
    """The log records of the libraries a command uses not shown: without a handler of its
    own, a record of WARNING or above would go to stderr through ``logging.lastResort`` (an
    unreachable gs:// store: gcsfs's traceback of its last retry, 50 lines before nxrs's one
    line saying what failed). A handler on the root logger that drops them takes its place."""
    root = logging.getLogger()
    dropped = logging.NullHandler()
    root.addHandler(dropped)
    try:
        yield
    finally:
        root.removeHandler(dropped)


MAIN_EPILOG = """\
examples:
  nxrs gate                          # the checkpoint/resume proof: verdict=GREEN, exit 0
  nxrs train --ckpt-dir run --every-seconds 60
  nxrs status run
  nxrs verify run --all              # the run's model came from its data: exit 0
  nxrs inspect run/step-000000000450.nxck --verify
  nxrs COMMAND --help                # a command's options, examples and exit statuses

With no command, nxrs prints this help and exits 2. Errors are one line on stderr (exit 1, or
2 for usage errors). Documentation: https://nxrs-dev.github.io/nxrs/
"""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="nxrs",
        description="Bit-reproducible training with exact checkpoint/resume.",
        epilog=MAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"nxrs {nxrs.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for command in COMMANDS:
        name = command.__name__.rpartition(".")[2]
        sub = add_command(commands, name, command.HELP, command.DESCRIPTION, command.EPILOG)
        command.add_arguments(sub)
        sub.set_defaults(run=command.run, check=getattr(command, "check", None))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    args.argv = list(sys.argv[1:] if argv is None else argv)
    check = getattr(args, "check", None)
    if check is not None:
        check(getattr(args, "parser", parser), args)
    try:
        with _warnings_as_lines(args.command), _library_logs_hidden():
            code: int = args.run(args)
    except KeyboardInterrupt:
        print(f"nxrs {args.command}: interrupted", file=sys.stderr)
        return EXIT_SIGINT
    except (nxrs.NxrsError, OSError, ValueError) as err:
        # A user error a command did not report itself (an unwritable --workdir, a file that
        # vanished meanwhile): one line, as every other error, rather than a traceback.
        print(f"nxrs {args.command}: error: {error_line(err)}", file=sys.stderr)
        return EXIT_FAILED
    return code


def run() -> None:
    """Console-script entry point: ``main`` on standard streams whose fate (a reader that goes
    away, a closed descriptor) never changes the exit status (``nxrs.cli._streams``)."""
    own_standard_streams()
    sys.exit(main())
