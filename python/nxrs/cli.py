"""The ``nxrs`` command line.

- ``nxrs train``: train an MLP (by default on scikit-learn's bundled digits) and print its
  accuracy, full-state hash and checkpoint; ``--json`` for a machine-readable summary.
- ``nxrs gate``: the seed's checkpoint/resume proof; exit 0 when GREEN.
- ``nxrs inspect FILE [--verify]``: what a checkpoint holds (and, with ``--verify``, whether
  every tensor is intact).
- ``nxrs status DIR [--json]``: a run directory's manifest, progress, checkpoints and history.
- ``nxrs sweep --dir DIR --grid KEY=V1,V2 ...``: a grid of trainings as Ray tasks
  (``nxrs.sweep``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nxrs
from nxrs.gate import run_gate
from nxrs.inspection import inspect_checkpoint
from nxrs.rundir import (
    CheckpointSaveError,
    RunLockedError,
    RunStopped,
    SaveFailedWarning,
    format_status,
    run_status,
    stop_signals,
)
from nxrs.sweeps import add_sweep_parser
from nxrs.training import CliError, add_data_arguments, train_command

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
  130  stopped by SIGINT, checkpoint saved (run the same command to resume)
  143  stopped by SIGTERM, checkpoint saved (run the same command to resume)
"""


def _train(args: argparse.Namespace) -> int:
    def show(message: Any, category: Any, *rest: Any, **kw: Any) -> None:
        if issubclass(category, SaveFailedWarning):
            print(f"nxrs train: warning: {message}", file=sys.stderr, flush=True)
        else:
            original(message, category, *rest, **kw)

    with warnings.catch_warnings(), stop_signals() as stop:
        original = warnings.showwarning
        warnings.simplefilter("always", SaveFailedWarning)
        warnings.showwarning = show
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


def _status(args: argparse.Namespace) -> int:
    try:
        status = run_status(args.directory)
    except BrokenPipeError:
        raise
    except (nxrs.NxrsError, OSError) as err:
        print(f"nxrs status: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    if args.json:
        sys.stdout.write(json.dumps(status, indent=1) + "\n")
    else:
        sys.stdout.write(format_status(status))
    return 0 if status["ok"] else 1


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
    _add_train(commands)
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
    status = commands.add_parser(
        "status",
        help="print a run directory's configuration, progress, checkpoints and history",
        description="Print what nxrs train --ckpt-dir DIR (or fit(checkpoint=DIR)) keeps in DIR: "
        "configuration, progress (step, epoch, percentage of the plan), each checkpoint and "
        "whether the newest validates (every checksum), whether a process holds the lock, and "
        "the history of starts, stops and resumes. Exit status 1 when the newest checkpoint is "
        "damaged or DIR holds no run manifest, 0 otherwise.",
    )
    status.add_argument("directory", type=Path)
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(run=_status)
    add_sweep_parser(commands)
    return parser


def _add_train(commands: Any) -> None:
    train = commands.add_parser(
        "train",
        help="train an MLP exactly (default: a quick run on scikit-learn's digits)",
        description="Train an MLP with nxrs's exact arithmetic on a deterministic train/test "
        "split, then print the final train and test accuracy, the full-state hash and the "
        "checkpoint. With no arguments: 64-128-10 on scikit-learn's bundled 8x8 digits.",
        epilog=TRAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_data_arguments(train)
    shape = train.add_mutually_exclusive_group()
    shape.add_argument("--layers", default=None, help="layer sizes, inputs first, e.g. 64,128,10")
    shape.add_argument(
        "--hidden",
        default=None,
        help="hidden layer sizes, e.g. 128 or 256,128 (inputs and outputs from the data)",
    )
    train.add_argument("--epochs", type=int, default=20, help="epochs in all (default 20)")
    train.add_argument("--batch-size", type=int, default=32, help="default 32")
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
        type=int,
        default=None,
        help="threads to train with (default: the available cores); any number gives the same bits",
    )
    train.add_argument(
        "--seed", type=int, default=0, help="initialisation, shuffle and split seed (default 0)"
    )
    train.add_argument(
        "--test-size",
        type=float,
        default=0.2,
        help="fraction of the samples in the deterministic test split (default 0.2)",
    )
    train.add_argument(
        "--ckpt-dir",
        type=Path,
        default=None,
        help="run directory: checkpoints, manifest, lock (default: none; see below)",
    )
    train.add_argument(
        "--every", type=int, default=None, help="also checkpoint every N steps (needs --ckpt-dir)"
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
        type=Path,
        default=None,
        metavar="PNG",
        help="write loss/accuracy curves (needs matplotlib: pip install 'nxrs[plot]')",
    )
    train.set_defaults(run=_train, check=_check_train)


def _check_train(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.every is not None and args.ckpt_dir is None:
        parser.error("--every needs --ckpt-dir")
    if args.every is not None and args.every < 1:
        parser.error("--every must be at least 1")
    if args.every_seconds is not None and args.ckpt_dir is None:
        parser.error("--every-seconds needs --ckpt-dir")
    if args.every_seconds is not None and not args.every_seconds > 0:
        parser.error("--every-seconds must be positive")
    if not 0 < args.test_size < 1:
        parser.error("--test-size must be between 0 and 1")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    check = getattr(args, "check", None)
    if check is not None:
        check(parser, args)
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
