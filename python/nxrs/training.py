"""``nxrs train``: its option types, a run on ``nxrs.data.load``'s data and its deterministic
split (TRAINING.md section 12), and the run's summary."""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TextIO

import numpy as np
import numpy.typing as npt

import nxrs
from nxrs._fit import fit
from nxrs.data import TASKS, load, load_digits, split
from nxrs.rundir import StopFlag, finite_or_null, json_text

__all__ = [
    "EXIT_DIVERGED",
    "CliError",
    "add_data_arguments",
    "default_layers",
    "hidden_sizes",
    "layer_sizes",
    "load_digits",
    "nonempty_path",
    "nonempty_text",
    "nonnegative_int",
    "positive_int",
    "split",
    "strict_record",
    "train_command",
]

F32Array = npt.NDArray[np.float32]

#: ``nxrs train``'s exit status when the run diverged: its final loss is not a finite number
#: (the summary is still printed, with null for the non-finite values and "diverged": true).
EXIT_DIVERGED = 6


class CliError(Exception):
    """A failure reported as one line on stderr with exit status 1."""


def _layers(args: Any, x: npt.NDArray[Any], y: npt.NDArray[Any]) -> list[int]:
    if args.layers is not None:
        return list(args.layers)
    return default_layers(x, y, args.hidden)


def default_layers(
    x: npt.NDArray[Any], y: npt.NDArray[Any], hidden: Sequence[int] | None
) -> list[int]:
    """``[inputs, *hidden, outputs]`` from the data (``hidden`` defaults to ``[128]``): as many
    outputs as classes for integer labels, as target columns for float targets (mse). The data
    is ``nxrs.data.load``'s: ``x`` 2-D, ``y`` int64 class indices or float targets."""
    if not np.issubdtype(y.dtype, np.integer):
        n_out = 1 if y.ndim == 1 else int(y.shape[1])
    else:
        n_out = int(y.max()) + 1
    return [int(x.shape[1]), *(hidden if hidden is not None else [128]), n_out]


# --- option values: each malformed or out-of-range value is an argparse usage error (exit 2)
# naming its option, checked once by its type.

_WHOLE = re.compile(r"\s*\+?[0-9]+\s*")


def _whole_number(text: str, minimum: int) -> int:
    if not _WHOLE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    value = int(text)
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
    return value


def positive_int(text: str) -> int:
    """A count of at least 1 (``--epochs``, ``--batch-size``, ``--every``, ``--threads``)."""
    return _whole_number(text, 1)


def nonnegative_int(text: str) -> int:
    """A count of at least 0 (``--max-retries``)."""
    return _whole_number(text, 0)


def _sizes(text: str, least: int, example: str) -> list[int]:
    parts = text.split(",")
    if len(parts) < least or not all(_WHOLE.fullmatch(p) and int(p) >= 1 for p in parts):
        raise argparse.ArgumentTypeError(
            f"{text!r}: {least} or more comma-separated whole numbers of at least 1 expected, "
            f"e.g. {example}"
        )
    return [int(p) for p in parts]


def layer_sizes(text: str) -> list[int]:
    """``--layers``: every layer size, inputs first (at least two).

    >>> layer_sizes("64,128,10")
    [64, 128, 10]
    >>> layer_sizes("4,,3")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: '4,,3': 2 or more comma-separated whole numbers ... 64,128,10
    """
    return _sizes(text, 2, "64,128,10")


def hidden_sizes(text: str) -> list[int]:
    """``--hidden``: the hidden layer sizes (at least one)."""
    return _sizes(text, 1, "128 or 256,64")


def nonempty_text(text: str) -> str:
    """A path option's text (``--data``), refused when empty: an empty path would silently
    mean the current directory."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    return text


def nonempty_path(text: str) -> Path:
    """A file or directory option (``--ckpt-dir``, ``--plot``, ``nxrs status DIR``, ...),
    refused when empty."""
    return Path(nonempty_text(text))


def _test_fraction(text: str) -> float:
    """``--test-size``'s value: a fraction strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return value


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """``--data``, ``--target``, ``--task`` and ``--test-size``, as ``nxrs train`` and
    ``nxrs sweep`` read them (with ``nxrs.data.load`` and ``nxrs.data.split``)."""
    parser.add_argument(
        "--data",
        default="digits",
        type=nonempty_text,
        help="'digits' (scikit-learn's bundled 1,797 8x8 digits, the default), a .npz file with "
        "arrays X and y, or a .csv file with a header row",
    )
    parser.add_argument(
        "--target",
        default=None,
        help="the label column of a .csv file (default: the last; refused for other data)",
    )
    parser.add_argument(
        "--task",
        choices=TASKS,
        default="auto",
        help="what the labels are: classify (class indices, whole numbers from 0), regress "
        "(float targets), or auto (the default): classes when every label is a whole number, "
        "float targets when at most half are, an error for a mixed column in between",
    )
    parser.add_argument(
        "--test-size",
        type=_test_fraction,
        default=0.2,
        help="fraction of the samples in the deterministic test split (default 0.2)",
    )


def strict_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` for strict JSON (which has no NaN or infinity): its non-finite floats as None
    (``nxrs.rundir.finite_or_null``), and ``diverged``: whether there were any (a run's losses
    are finite unless it diverged)."""
    strict: dict[str, Any] = finite_or_null(dict(record))
    strict["diverged"] = any(isinstance(v, float) and strict[k] is None for k, v in record.items())
    return strict


def _plotter() -> Any:
    """matplotlib's pyplot, for --plot: imported before the data is read or a step taken, so
    a missing optional dependency never throws a run away."""
    try:
        import matplotlib  # type: ignore[import-not-found,unused-ignore]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]
    except ImportError as err:
        raise CliError(
            "--plot needs matplotlib, which is not installed: pip install 'nxrs[plot]' "
            "(or pip install matplotlib)"
        ) from err
    return plt


def train_command(args: Any, out: TextIO, stop: StopFlag | None = None) -> int:
    """Runs ``nxrs train``; prints the summary (text, or JSON with ``--json``) and returns the
    exit status (0, or ``EXIT_DIVERGED``). ``stop``: the SIGINT/SIGTERM flag the command line
    installed before loading the data."""
    start = time.perf_counter()
    plt = _plotter() if args.plot is not None else None
    x, y = load(args.data, args.target, getattr(args, "task", "auto"))
    loss: Literal["cross_entropy", "mse"] = (
        "cross_entropy" if np.issubdtype(y.dtype, np.integer) else "mse"
    )
    layers = _layers(args, x, y)
    trainer = nxrs.Trainer(
        layers=layers,
        loss=loss,
        math=args.math,
        optimizer=args.optimizer,
        lr=args.lr,
        seed=args.seed,
        batch_size=args.batch_size,
        backend=getattr(args, "backend", "auto"),
        threads=getattr(args, "threads", None),
    )
    # The whole file meets fit's own rule for this model before it is split (so every sample
    # index in an error is the file's), and its fingerprint with the split's parameters is the
    # run's data identity: a change anywhere in the file, test rows included, is noticed.
    whole = trainer._dataset(x, y)
    source = {
        "fingerprint": whole.fingerprint,
        "samples": len(whole),
        "test_size": args.test_size,
        "split_seed": args.seed,
    }
    train_idx, test_idx = split(len(x), args.test_size, args.seed)
    x_train, y_train, x_test, y_test = x[train_idx], y[train_idx], x[test_idx], y[test_idx]
    if not args.json:
        print(
            f"nxrs train: {args.data}: {len(train_idx)} training and {len(test_idx)} test "
            f"samples; layers {layers}, {args.optimizer} lr={args.lr}, batch {args.batch_size}, "
            f"math {args.math}, seed {args.seed}, backend {trainer.backend}",
            file=out,
        )
    history = fit(
        trainer,
        x_train,
        y_train,
        epochs=args.epochs,
        validation_data=(x_test, y_test),
        checkpoint=args.ckpt_dir,
        every=args.every,
        every_seconds=getattr(args, "every_seconds", None),
        resume=args.resume,
        progress=None if not args.json else False,
        _stop=stop,
        _command=["nxrs", *getattr(args, "argv", sys.argv[1:])],
        _say=lambda line: print(f"nxrs train: {line}", file=sys.stderr, flush=True),
        _source=source,
    )
    train_loss, train_acc = trainer.evaluate(x_train, y_train)
    test_loss, test_acc = trainer.evaluate(x_test, y_test)
    checkpoint = history.checkpoint
    if checkpoint is None and args.ckpt_dir is not None:
        latest = nxrs.CheckpointManager(args.ckpt_dir).latest()
        checkpoint = None if latest is None else latest.path
    summary: dict[str, Any] = {
        "data": args.data,
        "layers": layers,
        "epochs": trainer.epoch,
        "steps": trainer.steps,
        "train_loss": train_loss,
        "train_accuracy": train_acc,
        "test_loss": test_loss,
        "test_accuracy": test_acc,
        "state_hash": f"{trainer.state_hash():016x}",
        "backend": trainer.backend,
        "threads": trainer.threads,
        "checkpoint": None if checkpoint is None else str(checkpoint),
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
