"""``nxrs sweep``: a grid of configurations (``--grid``) trained by ``nxrs.sweep`` on one
deterministic train/test split of ``nxrs.data.load``'s data."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Sequence
from typing import TextIO

from nxrs._nxrs import ConfigError, InputError
from nxrs._sweeps import log, record_summary, sweep
from nxrs._util.checks import count
from nxrs._util.files import json_text
from nxrs.cli._common import (
    EXIT_DIVERGED,
    CliError,
    add_data_arguments,
    add_epochs_argument,
    add_model_argument,
    add_save_point_arguments,
    apply_recipe,
    check_save_points,
    default_layers,
    error_line,
    loss_for,
    model_layers,
    nonempty_path,
    nonnegative_int,
)
from nxrs.cli._grid import expand_grid, parse_grid
from nxrs.data import check_test_size, load, train_test

EPILOG = """\
examples:
  nxrs sweep --dir sweeps/digits --epochs 10 --grid lr=0.001,0.003 \\
      --grid 'hidden=[[64], [128, 64]]' --grid seed=0,1
  nxrs sweep --dir sweeps/mine --data my.csv --target label --grid batch_size=16,64
  nxrs sweep --dir sweeps/cnn --model digits-cnn --epochs 5 --grid lr=0.003,0.01

grid: one --grid per axis, KEY=V1,V2,... or KEY=[JSON values] for list values; the sweep runs
every combination. Keys are Trainer keywords (lr, batch_size, seed, optimizer, grad_block,
weight_decay, layers, ...), epochs, and hidden (hidden layer sizes; inputs and outputs come
from the data). --model PRESET|FILE.json is the model of every configuration instead (a preset
brings its data, epochs, batch size and learning rate unless given, as in nxrs train).

Each configuration trains in DIR/run-<digest>/ (a run directory: see nxrs status); a task whose
process dies is retried (--max-retries) and resumes from its checkpoint, and running the same
command again resumes every unfinished run. The results are printed and written to
DIR/sweep.json and DIR/sweep.csv.

exit status: 0 every configuration trained, 1 an error or a configuration failed, 2 usage,
6 every configuration trained but one or more diverged (a final loss is not finite: null in
the results; a warning on stderr). A failed configuration wins over a diverged one (1).
"""


HELP = "train a grid of configurations as Ray tasks, each resumable (needs nxrs[ray])"
DESCRIPTION = (
    "Train every combination of a grid of configurations on one deterministic train/test "
    "split, as Ray tasks, and print and save their accuracy, loss, full-state hash and wall time."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_data_arguments(parser)
    parser.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=VALUES",
        help="a grid axis (one --grid per axis; see below)",
    )
    parser.add_argument("--dir", type=nonempty_path, required=True, help="the sweep's directory")
    add_model_argument(
        parser,
        "; the model of every configuration without a layers or hidden grid axis (default: "
        "an MLP of the data's inputs, 128 hidden units and its outputs)",
    )
    add_epochs_argument(parser)
    parser.add_argument(
        "--split-seed",
        type=int,
        default=0,
        help="seed of the train/test split (default 0; none for mnist1d, which has its own)",
    )
    add_save_point_arguments(
        parser,
        every="checkpoint every N steps (default: by time)",
        seconds="checkpoint N seconds after the previous save (default 30)",
        default_seconds=30.0,
    )
    parser.add_argument(
        "--max-retries",
        type=nonnegative_int,
        default=3,
        help="retries of a lost task (default 3)",
    )
    parser.add_argument(
        "--ray-address",
        default=None,
        help="the Ray cluster (default: RAY_ADDRESS, else a local cluster on this machine)",
    )
    parser.add_argument("--json", action="store_true", help="print the records as JSON")


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    check_save_points(parser, args, checkpointed=True)
    try:
        args.configs = expand_grid(parse_grid(args.grid))
    except ValueError as err:
        parser.error(str(err))


def sweep_command(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Runs ``nxrs sweep``: prints one line per configuration (or the records as JSON) and
    returns the exit status."""
    out = sys.stdout if out is None else out
    # Each configuration's end on stderr as it comes (the sweep's log at INFO).
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("nxrs sweep: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        # A preset's data, epochs and settings unless given (its batch size and learning rate
        # as every configuration's unless the grid has them), as nxrs train takes them.
        settings = apply_recipe(args)
        check_test_size(args.data, args.test_size)  # before the data is read or generated
        model = None if args.model is None else model_layers(args.model)
        x, y = load(args.data, args.target, args.task)
        train_idx, test_idx = train_test(args.data, len(x), args.test_size, args.split_seed)
        configs = []
        for config in args.configs:
            config = {**settings, **config}
            hidden = config.pop("hidden", None)
            if hidden is not None:
                if model is not None:
                    raise CliError("--model and a hidden grid axis are exclusive")
                sizes = hidden if isinstance(hidden, list) else [hidden]
                hidden = [count("hidden", h, minimum=1) for h in sizes]
            if "layers" not in config:
                config["layers"] = model if model is not None else default_layers(x, y, hidden)
            if "loss" not in config and loss_for(y) == "mse":
                config["loss"] = "mse"
            configs.append(config)
        # Ray, or an ImportError saying how to install it.
        from nxrs._train.distributed import ray

        # Ray's driver prints its notes ("(raylet) A worker died ...") and its workers' output
        # on sys.stdout, from its own threads, at any time while it is connected: stdout is for
        # nxrs's output alone (--json: one JSON document), so meanwhile sys.stdout is stderr,
        # and a Ray this command connected is shut down (its threads joined) before the
        # results are printed.
        ours = not ray.is_initialized()
        with contextlib.redirect_stdout(sys.stderr):
            try:
                results = sweep(
                    configs,
                    x[train_idx],
                    y[train_idx],
                    epochs=args.epochs,
                    directory=args.dir,
                    validation_data=(x[test_idx], y[test_idx]),
                    every=args.every,
                    every_seconds=args.every_seconds,
                    max_retries=args.max_retries,
                    ray_address=args.ray_address,
                    _file=(x, y),
                )
            finally:
                if ours and ray.is_initialized():
                    ray.shutdown()
    except (CliError, ImportError, TypeError, ValueError, OSError, ConfigError, InputError) as err:
        print(f"nxrs sweep: {error_line(err)}", file=sys.stderr)
        return 1
    finally:
        log.removeHandler(handler)
        log.setLevel(logging.NOTSET)
    if args.json:
        # Strict JSON: a diverged configuration's non-finite losses are null.
        out.write(json_text(list(results)) + "\n")
    else:
        for record in results:
            print(f"{record['index']:3d}  {json_text(record['config'])}  {record_summary(record)}",
                  file=out)  # fmt: skip
        print(f"results: {results.json_path}, {results.csv_path}", file=out)
    if any(r["error"] is not None for r in results):
        # A configuration that failed outright is the worse news: its status wins over 6.
        return 1
    diverged = [r["index"] for r in results if r["diverged"]]
    if diverged:
        print(
            f"nxrs sweep: warning: {len(diverged)} of {len(results)} configurations diverged "
            f"(a final loss is not finite; null in the results): {_indices(diverged)}; try a "
            f"smaller lr (exit status {EXIT_DIVERGED})",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_DIVERGED
    return 0


def _indices(indices: Sequence[int]) -> str:
    """``indices`` for a one-line message: the first ten, then how many more."""
    shown = ", ".join(str(i) for i in indices[:10])
    more = len(indices) - 10
    return f"configuration {shown}" + (f" and {more} more" if more > 0 else "")


#: The command's entry (``nxrs.cli.main`` calls ``run(args)``).
run = sweep_command
