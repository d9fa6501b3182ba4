"""``nxrs train``: data loading, the deterministic split (TRAINING.md section 12), a run, and
its summary."""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TextIO

import numpy as np
import numpy.typing as npt

import nxrs
from nxrs._fit import fit
from nxrs._nxrs import permutation
from nxrs.rundir import StopFlag

__all__ = [
    "CliError",
    "add_data_arguments",
    "default_layers",
    "load_data",
    "split",
    "train_command",
]

F32Array = npt.NDArray[np.float32]


class CliError(Exception):
    """A failure reported as one line on stderr with exit status 1."""


def load_digits() -> tuple[F32Array, npt.NDArray[np.int64]]:
    """scikit-learn's bundled 8x8 digits: pixels ``/ 16`` (exact in binary32), labels 0..9."""
    from sklearn.datasets import (  # type: ignore[import-untyped,unused-ignore]
        load_digits as sk_load_digits,
    )

    d = sk_load_digits()
    x = np.asarray(d.data).astype(np.float32) / np.float32(16)
    return x, np.asarray(d.target, dtype=np.int64)


def load_data(spec: str, target: str | None) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """``digits``, an ``.npz`` with arrays ``X`` and ``y``, or a ``.csv`` with a header row and
    the label column ``target`` (default: the last column)."""
    if spec == "digits":
        return load_digits()
    path = Path(spec)
    if not path.is_file():
        raise CliError(f"--data {spec}: no such file (use 'digits' or a .npz/.csv file)")
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as f:
            missing = [k for k in ("X", "y") if k not in f.files]
            if missing:
                raise CliError(f"{path}: missing array(s) {missing} (has {f.files})")
            return np.asarray(f["X"]), np.asarray(f["y"])
    if path.suffix == ".csv":
        return _load_csv(path, target)
    raise CliError(f"{path}: unknown data format {path.suffix!r} (use .npz or .csv)")


def _load_csv(path: Path, target: str | None) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = [row for row in csv.reader(f) if row]  # blank lines are no rows
    except (UnicodeDecodeError, csv.Error) as err:
        raise CliError(f"{path}: not a CSV text file: {err}") from err
    if len(rows) < 2:
        raise CliError(f"{path}: a header row and at least one data row are needed")
    header, body = rows[0], rows[1:]
    for k, row in enumerate(body, start=1):
        if len(row) != len(header):
            raise CliError(
                f"{path}: data row {k} has {len(row)} fields, the header has {len(header)}"
            )
    column = header[-1] if target is None else target
    if column not in header:
        raise CliError(f"{path}: no column {column!r} (columns: {', '.join(header)})")
    k = header.index(column)
    try:
        table = np.array([[float(v) for v in row] for row in body], dtype=np.float64)
    except ValueError as err:
        raise CliError(f"{path}: not a numeric table: {err}") from err
    x = np.delete(table, k, axis=1)
    labels = table[:, k]
    if np.all(labels == np.round(labels)):
        return x, labels.astype(np.int64)
    return x, labels


def split(n: int, test_size: float, seed: int) -> tuple[list[int], list[int]]:
    """TRAINING.md section 12: ``n_test = ceil(test_size * n)``; the permutation of the stream
    ``(seed, SPLIT, 0)``; its first ``n_test`` samples are the test set, the rest training.

    >>> split(10, 0.3, 0)
    ([7, 6, 5, 4, 2, 1, 0], [3, 9, 8])
    """
    n_test = math.ceil(test_size * n)
    if not 0 < n_test < n:
        raise CliError(f"--test-size {test_size} of {n} samples leaves an empty part")
    order = permutation(seed, "split", 0, n)
    return order[n_test:], order[:n_test]


def _layers(args: Any, x: npt.NDArray[Any], y: npt.NDArray[Any]) -> list[int]:
    if args.layers is not None:
        try:
            return [int(v) for v in args.layers.split(",")]
        except ValueError as err:
            raise CliError(f"--layers {args.layers!r}: comma-separated integers expected") from err
    hidden = [int(v) for v in str(args.hidden).split(",")] if args.hidden else None
    return default_layers(x, y, hidden)


def default_layers(
    x: npt.NDArray[Any], y: npt.NDArray[Any], hidden: Sequence[int] | None
) -> list[int]:
    """``[inputs, *hidden, outputs]`` from the data (``hidden`` defaults to ``[128]``): as many
    outputs as classes for integer labels, as target columns for float targets (mse)."""
    n_in = int(x.shape[1]) if x.ndim == 2 else 0
    if not np.issubdtype(y.dtype, np.integer):
        n_out = 1 if y.ndim == 1 else int(y.shape[1])
    else:
        n_out = int(y.max()) + 1 if y.size else 1
    return [n_in, *(hidden if hidden is not None else [128]), n_out]


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
    """``--data``, ``--target`` and ``--test-size``, as ``nxrs train`` and ``nxrs sweep`` read
    them."""
    parser.add_argument(
        "--data",
        default="digits",
        help="'digits' (scikit-learn's bundled 1,797 8x8 digits, the default), a .npz file with "
        "arrays X and y, or a .csv file with a header row",
    )
    parser.add_argument(
        "--target", default=None, help="the label column of a .csv file (default: the last)"
    )
    parser.add_argument(
        "--test-size",
        type=_test_fraction,
        default=0.2,
        help="fraction of the samples in the deterministic test split (default 0.2)",
    )


def train_command(args: Any, out: TextIO, stop: StopFlag | None = None) -> int:
    """Runs ``nxrs train``; prints the summary (text, or JSON with ``--json``). ``stop``: the
    SIGINT/SIGTERM flag the command line installed before loading the data."""
    start = time.perf_counter()
    x, y = load_data(args.data, args.target)
    loss: Literal["cross_entropy", "mse"] = (
        "cross_entropy" if np.issubdtype(np.asarray(y).dtype, np.integer) else "mse"
    )
    train_idx, test_idx = split(len(x), args.test_size, args.seed)
    x_train, y_train, x_test, y_test = x[train_idx], y[train_idx], x[test_idx], y[test_idx]
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
    if args.plot is not None:
        _plot(history, args.plot)
        summary["plot"] = str(args.plot)
    if args.json:
        out.write(json.dumps(summary) + "\n")
        return 0
    for epoch, row in zip(history.epoch, _rows(history)):
        print(f"epoch {epoch:4d}  {row}", file=out)
    acc = "" if train_acc is None else f"train accuracy {train_acc:.4f}  "
    tacc = "" if test_acc is None else f"test accuracy {test_acc:.4f}  "
    print(f"{acc}{tacc}train loss {train_loss:.6f}  test loss {test_loss:.6f}", file=out)
    print(f"state hash {summary['state_hash']}  ({trainer.steps} steps, "
          f"{summary['seconds']:.1f} s)", file=out)  # fmt: skip
    if checkpoint is not None:
        print(f"checkpoint {checkpoint}", file=out)
    return 0


def _rows(history: nxrs.History) -> list[str]:
    h = history.history
    rows = []
    for i in range(len(history.epoch)):
        parts = [f"{key} {h[key][i]:.4f}" for key in h if i < len(h[key])]
        rows.append("  ".join(parts))
    return rows


def _plot(history: nxrs.History, path: Path) -> None:
    try:
        import matplotlib  # type: ignore[import-not-found,unused-ignore]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]
    except ImportError as err:
        raise CliError(
            "--plot needs matplotlib, which is not installed: pip install 'nxrs[plot]' "
            "(or pip install matplotlib)"
        ) from err
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
