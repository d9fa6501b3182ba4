"""``nxrs train``: a run on ``nxrs.data.load``'s data and its split (``nxrs.data.train_test``:
the deterministic split, or the data set's own; TRAINING.md section 12), in a run directory
when ``--ckpt-dir`` is given, and the run's summary."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import nxrs
from nxrs._runs.errors import CheckpointSaveError, RunLockedError, RunStopped
from nxrs._util.files import finite_or_null, json_text
from nxrs._util.signals import StopFlag, stop_signals
from nxrs.cli._common import (
    EXIT_DIVERGED,
    EXIT_FAILED,
    EXIT_LOCKED,
    EXIT_OTHER_RUN,
    EXIT_SAVE_FAILED,
    CliError,
    add_data_arguments,
    add_epochs_argument,
    add_model_argument,
    add_save_point_arguments,
    add_setting_argument,
    apply_recipe,
    check_save_points,
    default_layers,
    error_line,
    final_checkpoint,
    hidden_sizes,
    keep_option,
    layer_sizes,
    loss_for,
    model_layers,
    nonempty_location,
    output_file,
    positive_int,
    run_options,
    trainer_options,
)
from nxrs.cli._text import is_text, train_text
from nxrs.data import _source_record, _split_record, check_test_size, load, train_test

HELP = "train an MLP or a layer model exactly (default: a quick MLP run on scikit-learn's digits)"
DESCRIPTION = (
    "Train a model with nxrs's exact arithmetic on a deterministic train/test split: an MLP "
    "(--layers, --hidden) or a model of layer objects (--model: a preset such as a CNN, or a "
    "JSON file), then print the final train and test accuracy, the full-state hash and the "
    "checkpoint. With no arguments: the MLP 64-128-10 on scikit-learn's bundled 8x8 digits."
)
EPILOG = """\
examples:
  nxrs train                                   # 64-128-10 on scikit-learn's digits, 20 epochs
  nxrs train --json --ckpt-dir ckpts --every 100
  nxrs train --data my.csv --target label --hidden 256,64 --epochs 50 --plot curves.png
  nxrs train --data mnist1d --layers 40,100,100,10 --batch-size 100 --epochs 150
  nxrs train --data shakespeare --model gpt-char --steps 2000 --eval-every 250 --ckpt-dir gpt
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
  4    --ckpt-dir is in use by another running nxrs train or fit (on object storage: its
       holder was seen renewing its lease, or this process lost it)
  5    a checkpoint that had to be written could not be (the previous one is intact), or
       the run ended with its transcript or manifest not written (the line says what)
  6    the run diverged: its final loss is not finite (the summary is printed, --json with
       null for the non-finite values and "diverged": true; a warning on stderr)
  130  stopped by SIGINT, checkpoint saved (run the same command to resume)
  143  stopped by SIGTERM, checkpoint saved (run the same command to resume)
"""


def run(args: argparse.Namespace) -> int:
    """Runs ``nxrs train`` with SIGINT/SIGTERM as stop requests; returns the exit status."""
    with stop_signals() as stop:
        try:
            return train_command(args, sys.stdout, stop=stop)
        except RunStopped as stopped:
            resume = "" if stopped.checkpoint is None else "; run the same command to resume"
            print(f"nxrs train: {stopped}{resume}", file=sys.stderr)
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
            print(f"nxrs train: {error_line(err)}", file=sys.stderr)
            return EXIT_FAILED


def add_arguments(train: argparse.ArgumentParser) -> None:
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
    add_model_argument(shape)
    add_epochs_argument(train)
    train.add_argument(
        "--steps",
        type=positive_int,
        default=None,
        help="a text's run: steps in all (default 2000; a text trains by steps, not epochs)",
    )
    train.add_argument(
        "--eval-every",
        type=positive_int,
        default=None,
        help="a text's run: estimate the training and validation losses every N steps "
        "(always at the end)",
    )
    train.add_argument(
        "--eval-batches",
        type=positive_int,
        default=20,
        help="a text's run: batches of windows each estimate reads, from each stream (default 20)",
    )
    add_setting_argument(train, "batch_size", "default {default}", type=positive_int)
    add_setting_argument(train, "lr", "learning rate (default {default})", type=float)
    add_setting_argument(train, "optimizer", "default {default}")
    add_setting_argument(train, "math", "default {default}")
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
    add_setting_argument(
        train, "seed", "initialisation, shuffle and split seed (default {default})", type=int
    )
    train.add_argument(
        "--ckpt-dir",
        type=nonempty_location,
        default=None,
        help="run directory: checkpoints, manifest, lock (default: none; see below); a local "
        "path or a URL on object storage (s3://bucket/run, gs://bucket/run or "
        "az://container/run, with pip install 'nxrs[s3]', 'nxrs[gcs]' or 'nxrs[azure]')",
    )
    train.add_argument(
        "--keep",
        type=keep_option,
        default=None,
        metavar="N|all",
        help="checkpoints the run directory keeps: the N newest (default 3) or all of them "
        "(for nxrs verify to replay every segment from a checkpoint; needs --ckpt-dir)",
    )
    add_save_point_arguments(
        train,
        every="also checkpoint every N steps (needs --ckpt-dir)",
        seconds="also checkpoint at the first step boundary N seconds after the previous save "
        "(needs --ckpt-dir)",
        default_seconds=None,
    )
    train.add_argument(
        "--async-save",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="write the periodic checkpoints in a background thread while training goes on "
        "(the state copied in memory at the save point; one save in flight; the final save "
        "stays synchronous; needs --ckpt-dir; the default for an s3://, gs:// or az:// "
        "--ckpt-dir; see docs/RUNS.md)",
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
        type=output_file,
        default=None,
        metavar="PNG",
        help="write loss/accuracy curves (needs matplotlib: pip install 'nxrs[plot]'); a file "
        "in an existing directory, in a format matplotlib writes (by its extension: .png, "
        ".pdf, .svg, ...), checked before training",
    )


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    check_save_points(parser, args, checkpointed=args.ckpt_dir is not None)
    if args.ckpt_dir is None and args.keep is not None:
        parser.error("--keep needs --ckpt-dir")
    if args.ckpt_dir is None and getattr(args, "async_save", False):
        parser.error("--async-save needs --ckpt-dir")


def strict_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` for strict JSON (which has no NaN or infinity): its non-finite floats as None
    (``nxrs._util.files.finite_or_null``), and ``diverged``: whether there were any (a run's losses
    are finite unless it diverged)."""
    strict: dict[str, Any] = finite_or_null(dict(record))
    strict["diverged"] = any(isinstance(v, float) and strict[k] is None for k, v in record.items())
    return strict


def _plotter(path: Path) -> Any:
    """matplotlib's pyplot, for --plot ``path``: imported, and the file's format (its
    extension) checked to be one matplotlib writes, before the data is read or a step taken,
    so a missing optional dependency or a mistyped name never throws a run away."""
    try:
        import matplotlib  # type: ignore[import-not-found,unused-ignore]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]
        from matplotlib.backend_bases import (  # type: ignore[import-not-found,unused-ignore]
            FigureCanvasBase,
        )
    except ImportError as err:
        raise CliError(
            "--plot needs matplotlib, which is not installed: pip install 'nxrs[plot]' "
            "(or pip install matplotlib)"
        ) from err
    # savefig's own rule: the format is the extension's, png without one.
    formats = FigureCanvasBase.get_supported_filetypes()
    extension = path.suffix[1:].lower()
    if extension and extension not in formats:
        raise CliError(
            f"--plot {path}: matplotlib writes no .{extension} files (it writes "
            + ", ".join(f".{f}" for f in sorted(formats))
            + ")"
        )
    return plt


def train_command(args: Any, out: TextIO, stop: StopFlag | None = None) -> int:
    """Runs ``nxrs train``; prints the summary (text, or JSON with ``--json``) and returns the
    exit status (0, or ``EXIT_DIVERGED``). ``stop``: the SIGINT/SIGTERM flag the command line
    installed before loading the data."""
    start = time.perf_counter()
    if getattr(args, "model", None) is None and is_text(args.data):
        args.model = "gpt-char"  # a text's default model, and its recipe
    settings = apply_recipe(args)
    if is_text(args.data):
        return train_text(args, out, stop, settings, start)
    plt = _plotter(args.plot) if args.plot is not None else None
    test_size = getattr(args, "test_size", None)
    check_test_size(args.data, test_size)  # before the data is read or generated
    model = getattr(args, "model", None)
    # A model file is read (or a bad name refused) before the data is read or generated too.
    model_objects = None if model is None else model_layers(model)
    x, y = load(args.data, args.target, getattr(args, "task", "auto"))
    loss = loss_for(y)
    layers: list[Any]
    if model_objects is not None:
        layers = model_objects
    elif args.layers is not None:
        layers = list(args.layers)
    else:
        layers = default_layers(x, y, args.hidden)
    trainer = nxrs.Trainer(layers=layers, loss=loss, **trainer_options(args))
    # The whole file meets fit's own rule for this model before it is split (so every sample
    # index in an error is the file's), and its fingerprint with the split's parameters is the
    # run's data identity: a change anywhere in the file, test rows included, is noticed.
    whole = trainer._dataset(x, y)
    source = {
        "fingerprint": whole.fingerprint,
        "samples": len(whole),
        **_split_record(args.data, test_size, args.seed),
    }
    train_idx, test_idx = train_test(args.data, len(x), test_size, args.seed)
    x_train, y_train, x_test, y_test = x[train_idx], y[train_idx], x[test_idx], y[test_idx]
    if not args.json:
        print(
            f"nxrs train: {args.data}: {len(train_idx)} training and {len(test_idx)} test "
            f"samples; layers {layers}, {args.optimizer} lr={args.lr}, batch {args.batch_size}, "
            f"math {args.math}, seed {args.seed}, backend {trainer.backend}",
            file=out,
        )
    history = trainer.fit(
        x_train,
        y_train,
        epochs=args.epochs,
        validation_data=(x_test, y_test),
        _source=source,
        _data_source=_source_record(args.data, args.target, getattr(args, "task", "auto")),
        **run_options(args, stop),
    )
    train_loss, train_acc = trainer.evaluate(x_train, y_train)
    test_loss, test_acc = trainer.evaluate(x_test, y_test)
    checkpoint = final_checkpoint(history, args.ckpt_dir)
    summary: dict[str, Any] = {
        "data": args.data,
        "layers": trainer.config["layers"],
        "epochs": trainer.epoch,
        "steps": trainer.steps,
        "train_loss": train_loss,
        "train_accuracy": train_acc,
        "test_loss": test_loss,
        "test_accuracy": test_acc,
        "state_hash": f"{trainer.state_hash():016x}",
        "backend": trainer.backend,
        "threads": trainer.threads,
        "checkpoint": checkpoint,
        "seconds": round(time.perf_counter() - start, 3),
    }
    if plt is not None:
        _plot(plt, history, args.plot)
        summary["plot"] = str(args.plot)
    strict = strict_record(summary)
    diverged: bool = strict["diverged"]
    if diverged:
        print(
            f"nxrs train: warning: the run diverged: its final training loss is {train_loss} "
            f"and test loss {test_loss} (the weights are no longer finite numbers); try a "
            f"smaller --lr (exit status {EXIT_DIVERGED})",
            file=sys.stderr,
            flush=True,
        )
    status = EXIT_DIVERGED if diverged else 0
    if args.json:
        out.write(json_text(strict) + "\n")
        return status
    for epoch, row in zip(history.epoch, _rows(history)):
        print(f"epoch {epoch:4d}  {row}", file=out)
    acc = "" if train_acc is None else f"train accuracy {train_acc:.4f}  "
    tacc = "" if test_acc is None else f"test accuracy {test_acc:.4f}  "
    print(f"{acc}{tacc}train loss {train_loss:.6f}  test loss {test_loss:.6f}", file=out)
    print(f"state hash {summary['state_hash']}  ({trainer.steps} steps, "
          f"{summary['seconds']:.1f} s)", file=out)  # fmt: skip
    if checkpoint is not None:
        print(f"checkpoint {checkpoint}", file=out)
    return status


def _rows(history: nxrs.History) -> list[str]:
    h = history.history
    rows = []
    for i in range(len(history.epoch)):
        parts = [f"{key} {h[key][i]:.4f}" for key in h if i < len(h[key])]
        rows.append("  ".join(parts))
    return rows


def _plot(plt: Any, history: nxrs.History, path: Path) -> None:
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    for key in ("loss", "val_loss"):
        if key in history.history:
            ax_loss.plot(history.epoch, history.history[key], label=key)
    for key in ("accuracy", "val_accuracy"):
        if key in history.history:
            ax_acc.plot(history.epoch, history.history[key], label=key)
    for ax, title in ((ax_loss, "loss"), (ax_acc, "accuracy")):
        ax.set_xlabel("epoch")
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
