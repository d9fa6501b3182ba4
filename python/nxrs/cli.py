"""The ``nxrs`` command line.

- ``nxrs train``: train an MLP (by default on scikit-learn's bundled digits) and print its
  accuracy, full-state hash and checkpoint; ``--json`` for a machine-readable summary.
- ``nxrs gate``: the seed's checkpoint/resume proof; exit 0 when GREEN.
- ``nxrs inspect FILE [--verify] [--json]``: what a checkpoint holds (and, with ``--verify``,
  whether every tensor is intact).
- ``nxrs status DIR [--json]``: a run directory's manifest, progress, checkpoints and history.
- ``nxrs sweep --dir DIR --grid KEY=V1,V2 ...``: a grid of trainings as Ray tasks
  (``nxrs.sweep``).

``nxrs`` with no command prints the command list and exits 2. A user error (bad arguments, a
missing or damaged file, bad data) is one line on stderr and exit status 1 or 2, never a
traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import textwrap
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

import nxrs
from nxrs import sweeps
from nxrs.gate import run_gate
from nxrs.inspection import describe_checkpoint, inspect_checkpoint
from nxrs.rundir import (
    CheckpointSaveError,
    RunLockedError,
    RunStopped,
    SaveFailedWarning,
    format_status,
    json_text,
    run_status,
    stop_signals,
)
from nxrs.training import (
    EXIT_DIVERGED as EXIT_DIVERGED,  # 6: the run diverged (its final loss is not finite)
)
from nxrs.training import (
    CliError,
    add_data_arguments,
    hidden_sizes,
    layer_sizes,
    nonempty_path,
    positive_int,
    train_command,
)

#: ``nxrs train``'s exit statuses (also in its --help and the README).
EXIT_DONE = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_OTHER_RUN = 3
EXIT_LOCKED = 4
EXIT_SAVE_FAILED = 5
EXIT_SIGINT = 128 + signal.SIGINT  # 130
EXIT_SIGTERM = 128 + signal.SIGTERM  # 143

TRAIN_EPILOG = """\
examples:
  nxrs train                                   # 64-128-10 on scikit-learn's digits, 20 epochs
  nxrs train --json --ckpt-dir ckpts --every 100
  nxrs train --data my.csv --target label --hidden 256,64 --epochs 50 --plot curves.png
  until nxrs train --data my.npz --ckpt-dir run --every-seconds 60; do sleep 1; done

run directory (--ckpt-dir DIR): checkpoints step-*.nxck, the manifest nxrs-run.json and the lock
.nxrs-run.lock. Running the same command again resumes from the newest valid checkpoint.
SIGTERM or SIGINT (Ctrl-C) finishes the current step, saves a checkpoint of it and exits; a
second signal meanwhile changes nothing. A periodic checkpoint that cannot be written (disk
full, I/O error) is reported, the previous one stays, and training goes on to retry at the next
save point; a final or stopping checkpoint that cannot be written ends the run with status 5.

exit status:
  0    the run is complete (its final checkpoint saved, with --ckpt-dir)
  1    failure: bad data or arguments, an error while training
  2    usage error
  3    --ckpt-dir holds a run of another configuration or other data (--restart moves it
       aside to DIR/previous/<time>/ and starts over)
  4    --ckpt-dir is in use by another running nxrs train or fit
  5    a checkpoint that had to be written could not be (the previous one is intact)
  6    the run diverged: its final loss is not finite (the summary is printed, --json with
       null for the non-finite values and "diverged": true; a warning on stderr)
  130  stopped by SIGINT, checkpoint saved (run the same command to resume)
  143  stopped by SIGTERM, checkpoint saved (run the same command to resume)
"""


def _train(args: argparse.Namespace) -> int:
    with stop_signals() as stop:
        try:
            return train_command(args, sys.stdout, stop=stop)
        except BrokenPipeError:
            raise
        except RunStopped as stopped:
            print(f"nxrs train: {stopped}; run the same command to resume", file=sys.stderr)
            return 128 + stopped.signal
        except RunLockedError as err:
            print(f"nxrs train: {err}", file=sys.stderr)
            return EXIT_LOCKED
        except nxrs.MismatchError as err:
            print(f"nxrs train: {err}", file=sys.stderr)
            return EXIT_OTHER_RUN
        except CheckpointSaveError as err:
            print(f"nxrs train: {err.strerror}", file=sys.stderr)
            return EXIT_SAVE_FAILED
        except (CliError, nxrs.NxrsError, OSError, ValueError) as err:
            name = "" if isinstance(err, CliError) else f"{type(err).__name__}: "
            print(f"nxrs train: {name}{err}", file=sys.stderr)
            return EXIT_FAILED


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


def _status(args: argparse.Namespace) -> int:
    try:
        status = run_status(args.directory)
    except BrokenPipeError:
        raise
    except (nxrs.NxrsError, OSError) as err:
        print(f"nxrs status: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    if args.json:
        sys.stdout.write(json_text(status, indent=1) + "\n")
    else:
        sys.stdout.write(format_status(status))
    return 0 if status["ok"] else 1


def _gate(args: argparse.Namespace) -> int:
    return 0 if run_gate(sys.stdout, args.workdir) else 1


def _check_gate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.workdir is not None and not args.workdir.is_dir():
        parser.error(f"--workdir {args.workdir}: no such directory")


def _inspect(args: argparse.Namespace) -> int:
    try:
        if args.json:
            summary = describe_checkpoint(args.file, verify=args.verify)
            sys.stdout.write(json_text(summary, indent=1) + "\n")
            problems: int = summary["problems"]
        else:
            problems = inspect_checkpoint(args.file, sys.stdout, verify=args.verify)
    except BrokenPipeError:
        raise  # the reader of our output went away (e.g. `| head`): not the file's fault
    except (nxrs.NxrsError, OSError) as err:
        print(f"nxrs inspect: {args.file}: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    if problems:
        print(f"{problems} tensor(s) failed their checksum", file=sys.stderr)
    return 1 if problems else 0


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors on one line: ``nxrs train: error: ... (see ...--help)``."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


MAIN_EPILOG = """\
examples:
  nxrs gate                          # the checkpoint/resume proof: verdict=GREEN, exit 0
  nxrs train --ckpt-dir run --every-seconds 60
  nxrs status run
  nxrs inspect run/step-000000000450.nxck --verify
  nxrs COMMAND --help                # a command's options, examples and exit statuses

With no command, nxrs prints this help and exits 2. Errors are one line on stderr (exit 1, or
2 for usage errors). Documentation: https://nxrs-dev.github.io/nxrs/
"""

GATE_EPILOG = """\
examples:
  nxrs gate
  nxrs gate --workdir /tmp/gate      # keep the checkpoint files it writes

exit status: 0 verdict GREEN (every check passed), 1 a check failed, 2 usage error.
"""

INSPECT_EPILOG = """\
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

STATUS_EPILOG = """\
examples:
  nxrs status run
  nxrs status run --json | jq .progress
"""


def _command(
    commands: Any, name: str, help: str, description: str, epilog: str
) -> argparse.ArgumentParser:
    """A subcommand whose --help shows its description (wrapped) and examples (as written)."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=help,
        description=textwrap.fill(description, width=79),
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(parser=parser)  # its own usage errors name it: "nxrs train: error: ..."
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="nxrs",
        description="Bit-reproducible training with exact checkpoint/resume.",
        epilog=MAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"nxrs {nxrs.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    _add_train(commands)
    gate = _command(
        commands,
        "gate",
        help="run the seed's checkpoint/resume proof (T1-T4) and the v2 checks (T5-T6)",
        description="Train the seed program's 6-10-4 model for 800 epochs without a break, "
        "and again with a checkpoint and a restart at epoch 400 (v1 and v2 files), and check "
        "that both end on the same bits and on the independent reference's hashes; check "
        "that damaged files are refused. Prints each check and verdict=GREEN or RED.",
        epilog=GATE_EPILOG,
    )
    gate.add_argument(
        "--workdir",
        type=nonempty_path,
        default=None,
        help="an existing directory for the checkpoint files (default: a fresh temporary "
        "directory, removed afterwards)",
    )
    gate.set_defaults(run=_gate, check=_check_gate)
    inspect = _command(
        commands,
        "inspect",
        help="print a checkpoint's format, configuration, scalars and tensor table",
        description="Print what an NXCK checkpoint (v1 or v2) holds: its format, trainer "
        "configuration, scalars (epoch, Adam's bias-correction powers as bits) and tensor "
        "table (name, dtype, shape, offset, size, CRC-32C, checksum status). Values read from "
        "the file are clipped, so a hostile header cannot flood the terminal.",
        epilog=INSPECT_EPILOG,
    )
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
    inspect.set_defaults(run=_inspect)
    status = _command(
        commands,
        "status",
        help="print a run directory's configuration, progress, checkpoints and history",
        epilog=STATUS_EPILOG,
        description="Print what nxrs train --ckpt-dir DIR (or fit(checkpoint=DIR)) keeps in DIR: "
        "configuration, progress (step, epoch, percentage of the plan), each checkpoint and "
        "whether the newest validates (every checksum), whether a process holds the lock, and "
        "the history of starts, stops and resumes. Exit status 1 when the newest checkpoint is "
        "damaged or DIR holds no run manifest, 0 otherwise.",
    )
    status.add_argument("directory", type=nonempty_path)
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(run=_status)
    sweep = _command(
        commands, "sweep", sweeps.SWEEP_HELP, sweeps.SWEEP_DESCRIPTION, sweeps.SWEEP_EPILOG
    )
    sweeps.add_sweep_arguments(sweep)
    return parser


def _add_train(commands: Any) -> None:
    train = _command(
        commands,
        "train",
        help="train an MLP exactly (default: a quick run on scikit-learn's digits)",
        description="Train an MLP with nxrs's exact arithmetic on a deterministic train/test "
        "split, then print the final train and test accuracy, the full-state hash and the "
        "checkpoint. With no arguments: 64-128-10 on scikit-learn's bundled 8x8 digits.",
        epilog=TRAIN_EPILOG,
    )
    add_data_arguments(train)
    shape = train.add_mutually_exclusive_group()
    shape.add_argument(
        "--layers",
        type=layer_sizes,
        default=None,
        help="layer sizes, inputs first, e.g. 64,128,10",
    )
    shape.add_argument(
        "--hidden",
        type=hidden_sizes,
        default=None,
        help="hidden layer sizes, e.g. 128 or 256,128 (inputs and outputs from the data)",
    )
    train.add_argument(
        "--epochs", type=positive_int, default=20, help="epochs in all, at least 1 (default 20)"
    )
    train.add_argument("--batch-size", type=positive_int, default=32, help="default 32")
    train.add_argument("--lr", type=float, default=0.001, help="learning rate (default 0.001)")
    train.add_argument(
        "--optimizer", choices=["adam", "adamw", "sgd"], default="adam", help="default adam"
    )
    train.add_argument("--math", choices=["ieee", "seed"], default="ieee", help="default ieee")
    train.add_argument(
        "--backend",
        choices=["auto", "hw", "soft"],
        default="auto",
        help="compute with the CPU's floats where they are verified to give softf32's bits "
        "(auto, the default), always (hw: an error where they are not), or with softf32 "
        "(soft); every backend gives the same bits",
    )
    train.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="threads to train with (default: the available cores); any number gives the same bits",
    )
    train.add_argument(
        "--seed", type=int, default=0, help="initialisation, shuffle and split seed (default 0)"
    )
    train.add_argument(
        "--ckpt-dir",
        type=nonempty_path,
        default=None,
        help="run directory: checkpoints, manifest, lock (default: none; see below)",
    )
    train.add_argument(
        "--every",
        type=positive_int,
        default=None,
        help="also checkpoint every N steps (needs --ckpt-dir)",
    )
    train.add_argument(
        "--every-seconds",
        type=float,
        default=None,
        metavar="N",
        help="also checkpoint at the first step boundary N seconds after the previous save "
        "(needs --ckpt-dir)",
    )
    train.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="continue the run in --ckpt-dir from its newest valid checkpoint (default); "
        "--no-resume is --restart",
    )
    train.add_argument(
        "--restart",
        dest="resume",
        action="store_false",
        help="start over: move the run in --ckpt-dir (checkpoints and manifest) aside to "
        "DIR/previous/<UTC time>/ first",
    )
    train.add_argument(
        "--json",
        action="store_true",
        help="print a machine-readable summary on stdout (train_accuracy, test_accuracy, "
        "state_hash, epochs, steps, checkpoint, ...)",
    )
    train.add_argument(
        "--plot",
        type=nonempty_path,
        default=None,
        metavar="PNG",
        help="write loss/accuracy curves (needs matplotlib: pip install 'nxrs[plot]')",
    )
    train.set_defaults(run=_train, check=_check_train)


def _check_train(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.every is not None and args.ckpt_dir is None:
        parser.error("--every needs --ckpt-dir")
    if args.every_seconds is not None and args.ckpt_dir is None:
        parser.error("--every-seconds needs --ckpt-dir")
    if args.every_seconds is not None and not args.every_seconds > 0:
        parser.error("--every-seconds must be positive")


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
        with _warnings_as_lines(args.command):
            code: int = args.run(args)
    except BrokenPipeError:
        raise
    except KeyboardInterrupt:
        print(f"nxrs {args.command}: interrupted", file=sys.stderr)
        return EXIT_SIGINT
    except (nxrs.NxrsError, OSError, ValueError) as err:
        # A user error a command did not report itself (an unwritable --workdir, a file that
        # vanished meanwhile): one line, as every other error, rather than a traceback.
        print(f"nxrs {args.command}: error: {type(err).__name__}: {err}", file=sys.stderr)
        return EXIT_FAILED
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
