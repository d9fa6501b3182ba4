"""The data of an ``nxrs train`` run whose manifest records only its command line (written by
an nxrs before the manifest recorded ``data_source``): its command read again by ``nxrs
train``'s own parser. ``nxrs verify`` and ``nxrs diff`` hand ``read_command`` to the library
(``nxrs.verify``, ``nxrs.diff``), which never reads a command line itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy.typing as npt

import nxrs.cli.train as train
from nxrs._nxrs import MismatchError
from nxrs.cli._common import Parser, apply_recipe
from nxrs.data import BUILTIN, load, train_test

__all__ = ["read_command"]


def read_command(
    command: list[str], data: str | None = None, cwd: str | None = None
) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]:
    """The training and test samples (``x_train, y_train, x_test, y_test``) ``nxrs train``
    trained on when run as ``command`` (the run manifest's ``command``): read and split again
    as it did; ``data`` replaces its ``--data`` (a file moved since); ``cwd`` (the manifest's)
    is where the command ran, which a relative data path is relative to. MismatchError when
    ``command`` is not an ``nxrs train`` command line."""
    if len(command) < 2 or command[1] != "train":
        raise MismatchError(
            f"the run's recorded command is not an nxrs train command ({command!r}): its "
            "data cannot be read again as it was"
        )
    parser = Parser(prog="nxrs train")
    train.add_arguments(parser)
    try:
        args = parser.parse_args(command[2:])
    except SystemExit:
        raise MismatchError(f"the run's recorded command cannot be read: {command!r}") from None
    args.argv = command[1:]
    apply_recipe(args)
    if data is not None:
        args.data = data
    elif cwd is not None and args.data not in BUILTIN:
        # A file named relative to where the command ran (the manifest's ``cwd``).
        args.data = str(Path(cwd) / args.data)
    x, y = load(args.data, args.target, getattr(args, "task", "auto"))
    test_size = getattr(args, "test_size", None)
    train_idx, test_idx = train_test(args.data, len(x), test_size, args.seed)
    return x[train_idx], y[train_idx], x[test_idx], y[test_idx]
