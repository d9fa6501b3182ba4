"""Replaying a run: what ``nxrs verify`` and ``nxrs diff`` share.

- ``RunData``: a run's data, given (``fit``'s ``x``, ``y``, validation data) or read again the
  way ``nxrs train`` read it (from the command its manifest records: the file, the label
  column, the split), with its digests (``docs/TRAINING.md`` section 16);
- ``replay``: a trainer taken from a state to a later step on the run's training data, exactly
  as the run took it (any backend or thread count gives the same bits);
- ``first_difference``: the first tensor cell or scalar in which two states differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from nxrs._nxrs import InputError, MismatchError
from nxrs._transcript import DataDigests

if TYPE_CHECKING:
    from nxrs._nxrs import Dataset
    from nxrs._trainer import Trainer

__all__ = ["RunData", "first_difference", "replay", "replay_step"]

Pair = tuple[npt.ArrayLike, npt.ArrayLike]


@dataclass
class RunData:
    """A run's data: the training data ``x``, ``y`` and the validation data of ``fit`` or the
    test split of ``nxrs train`` (the two roles of section 16's data digest)."""

    x: npt.ArrayLike
    y: npt.ArrayLike
    validation: Pair | None = None
    test: Pair | None = None

    def digests(self, trainer: Trainer) -> DataDigests:
        """The data's digests as ``trainer`` (the run's configuration) trains on it."""
        train = trainer._dataset(self.x, self.y)
        val, test = (
            None if p is None else trainer._dataset(*p) for p in (self.validation, self.test)
        )
        return DataDigests.of(train, val, test)

    @classmethod
    def of_run(
        cls,
        manifest: Mapping[str, Any] | None,
        data: str | None,
        run: str,
        how: str = "--data FILE; data=FILE in Python",
    ) -> RunData:
        """The training data of the run whose manifest is ``manifest`` (None: it has none), read
        again from a file: for an ``nxrs train`` run, read and split as its recorded command did
        (``of_command``), the file ``data`` replacing its ``--data``; for a ``fit`` run (no
        command recorded), the file ``data`` whole, as ``nxrs.data.load`` reads it (its samples
        were ``fit``'s). The one reading of a data file that ``nxrs verify --data`` and ``nxrs
        diff --data`` share, so that both accept and refuse the same files.

        ``run`` names the run in messages, ``how`` says how a file is given (the option and
        the parameter). MismatchError when a ``fit`` run's file is not given; InputError when
        the file its command names cannot be read (a file moved: give it)."""
        command = None if manifest is None else manifest.get("command")
        if command is None:
            if data is None:
                what = "was trained by fit" if manifest is not None else "has no run manifest"
                raise MismatchError(
                    f"{run} {what}: give its data: the file it trained on, read whole as "
                    f"nxrs.data.load reads it ({how}), or in Python its arrays"
                )
            from nxrs.data import load

            return cls(*load(data))
        cwd = manifest.get("cwd") if manifest is not None else None
        try:
            return cls.of_command(list(command), data, cwd=cwd if isinstance(cwd, str) else None)
        except (InputError, OSError) as err:
            if data is not None:
                raise  # the file given: its own error names it
            raise InputError(
                f"{run}: its data, read as its command did: {err} (moved? give the file: {how})"
            ) from None

    @classmethod
    def of_command(
        cls, command: list[str], data: str | None = None, cwd: str | None = None
    ) -> RunData:
        """The data ``nxrs train`` trained on when run as ``command`` (the run manifest's
        ``command``): read and split again as it did; ``data`` replaces its ``--data`` (a file
        moved since); ``cwd`` (the manifest's) is where the command ran, which a relative data
        path is relative to. MismatchError when ``command`` is not an ``nxrs train`` command
        line."""
        from nxrs.cli import build_parser
        from nxrs.cli._common import apply_recipe
        from nxrs.data import BUILTIN, load, train_test

        if len(command) < 2 or command[1] != "train":
            raise MismatchError(
                f"the run's recorded command is not an nxrs train command ({command!r}): its "
                "data cannot be read again as it was"
            )
        try:
            args = build_parser().parse_args(command[1:])
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
        return cls(x[train_idx], y[train_idx], test=(x[test_idx], y[test_idx]))


def replay(trainer: Trainer, data: RunData, step: int) -> None:
    """Takes ``trainer`` to ``step`` on ``data``'s training data: the steps the run took from
    this state (``fit`` takes them in the same order: epochs, shuffles and batches follow from
    the state's counters alone). InputError when ``step`` is behind the trainer."""
    todo = step - trainer.steps
    if todo < 0:
        raise InputError(f"cannot replay back from step {trainer.steps} to step {step}")
    if todo:
        trainer.train_steps(data.x, data.y, todo)


def replay_step(trainer: Trainer, dataset: Dataset) -> None:
    """One step of the run, as ``replay(trainer, data, trainer.steps + 1)`` takes it, on
    ``dataset`` (``trainer._dataset`` of the run's training data, converted once: replaying a
    step at a time would otherwise convert the whole data set at every step)."""
    trainer._run(dataset, trainer.epoch + 1, max_steps=1)


def first_difference(a: Trainer, b: Trainer) -> str | None:
    """Where the states of ``a`` and ``b`` first differ, in section 11's order (tensors, then
    scalars), in words: ``"tensor W2, element 17 (row-major [1, 7]): 0x3f800000 vs
    0x3f800001"``; None when they are the same bits. States of other models differ in the
    first tensor name or shape."""
    ta, tb = a.state_dict(), b.state_dict()
    for (name, va), (other, vb) in zip(ta.items(), tb.items()):
        if name != other or va.shape != vb.shape:
            return f"tensor {name} {list(va.shape)} vs {other} {list(vb.shape)}"
        ua, ub = va.reshape(-1).view(np.uint32), vb.reshape(-1).view(np.uint32)
        differ = np.flatnonzero(ua != ub)
        if differ.size:
            i = int(differ[0])
            where = list(np.unravel_index(i, va.shape)) if va.ndim > 1 else None
            at = "" if where is None else f" (row-major {[int(k) for k in where]})"
            return f"tensor {name}, element {i}{at}: {int(ua[i]):#010x} vs {int(ub[i]):#010x}"
    if len(ta) != len(tb):
        return f"tensor count {len(ta)} vs {len(tb)}"
    for name, va_, vb_ in _scalars(a, b):
        if va_ != vb_:
            return f"scalar {name}: {va_} vs {vb_}"
    return None


def _scalars(a: Trainer, b: Trainer) -> list[tuple[str, Any, Any]]:
    names = ("epoch", "steps", "batch")
    return [(n, getattr(a, n), getattr(b, n)) for n in names]
