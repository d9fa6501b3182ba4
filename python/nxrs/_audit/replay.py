"""Replaying a run: what ``nxrs verify`` and ``nxrs diff`` share.

- ``RunData``: a run's data, given (``fit``'s ``x``, ``y``, validation data) or read again the
  way ``nxrs train`` read it (as its manifest records: the file, the label column, the task,
  the split), with its digests (``docs/TRAINING.md`` section 16);
- ``replay``: a trainer taken from a state to a later step on the run's training data, exactly
  as the run took it (any backend or thread count gives the same bits);
- ``first_difference``: the first tensor cell or scalar in which two states differ.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, cast

import numpy as np
import numpy.typing as npt

from nxrs._nxrs import InputError, MismatchError
from nxrs._runs.transcript import DataDigests

if TYPE_CHECKING:
    from nxrs._nxrs import Dataset
    from nxrs._trainer import Trainer

__all__ = ["RunData", "first_difference", "replay", "replay_step"]

Pair = tuple[npt.ArrayLike, npt.ArrayLike]

#: The data of an ``nxrs train`` run whose manifest records only its command line (an older
#: nxrs's), read again by the command line's parser: ``(command, data, cwd)`` -> ``x_train,
#: y_train, x_test, y_test`` (as ``RunData.of_run`` passes them: the data file replacing the
#: command's ``--data``, the directory the command ran in).
ReadCommand = Callable[
    [list[str], Optional[str], Optional[str]],
    tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]],
]


@dataclass
class RunData:
    """A run's data: the training data ``x``, ``y`` and the validation data of ``fit`` or the
    test split of ``nxrs train`` (the two roles of section 16's data digest). A token
    stream's run (docs/TRAINING.md section 15.8) has ``y`` None: ``x`` is the training stream
    and ``validation`` the validation stream."""

    x: npt.ArrayLike
    y: npt.ArrayLike | None
    validation: Pair | npt.ArrayLike | None = None
    test: Pair | None = None

    def dataset(self, trainer: Trainer) -> Dataset:
        """The training data as ``trainer`` (the run's configuration) trains on it."""
        if self.y is None:
            return trainer._stream(self.x)
        return trainer._dataset(self.x, self.y)

    def digests(self, trainer: Trainer) -> DataDigests:
        """The data's digests as ``trainer`` (the run's configuration) trains on it."""
        train = self.dataset(trainer)
        if self.y is None:
            stream = cast("npt.ArrayLike | None", self.validation)
            val = None if stream is None else trainer._stream(stream)
            return DataDigests.of(train, val, None)
        pairs = (cast("Pair | None", self.validation), self.test)
        val, test = (None if p is None else trainer._dataset(*p) for p in pairs)
        return DataDigests.of(train, val, test)

    @classmethod
    def of_run(
        cls,
        manifest: Mapping[str, Any] | None,
        data: str | None,
        run: str,
        how: str = "--data FILE; data=FILE in Python",
        read_command: ReadCommand | None = None,
    ) -> RunData:
        """The training data of the run whose manifest is ``manifest`` (None: it has none), read
        again from a file: for an ``nxrs train`` run, read and split as it did (by the
        manifest's ``data_source`` and ``data.file``: ``nxrs.data._read_again``), the file
        ``data`` replacing its ``--data``; for a ``fit`` run (no command recorded), the file
        ``data`` whole, as ``nxrs.data.load`` reads it (its samples were ``fit``'s). The one
        reading of a data file that ``nxrs verify --data`` and ``nxrs diff --data`` share, so
        that both accept and refuse the same files.

        A manifest of an older nxrs records only the command line: ``read_command`` (the
        command line's own reader, which ``nxrs verify`` and ``nxrs diff`` pass) reads it
        again; without one, MismatchError.

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
        assert manifest is not None
        cwd = manifest.get("cwd")
        source = manifest.get("data_source")
        split = (manifest.get("data") or {}).get("file")
        try:
            from nxrs.data import _is_text_source, _read_text_again

            if _is_text_source(source):
                text = _read_text_again(source, data, cwd if isinstance(cwd, str) else None)
                return cls(text.train, None, validation=text.val)
            if isinstance(source, dict) and isinstance(split, dict):
                from nxrs.data import _read_again

                parts = _read_again(source, split, data, cwd if isinstance(cwd, str) else None)
            elif read_command is not None:
                parts = read_command(list(command), data, cwd if isinstance(cwd, str) else None)
            else:
                raise MismatchError(
                    f"{run} was trained by an nxrs train whose manifest records its command "
                    "line but not its data source: the nxrs command line (nxrs verify, nxrs "
                    "diff) reads its data again by that command; in Python, give its arrays"
                )
        except (InputError, OSError) as err:
            if data is not None:
                raise  # the file given: its own error names it
            raise InputError(
                f"{run}: its data, read as its command did: {err} (moved? give the file: {how})"
            ) from None
        x, y, x_test, y_test = parts
        return cls(x, y, test=(x_test, y_test))


def replay(trainer: Trainer, data: RunData, step: int) -> None:
    """Takes ``trainer`` to ``step`` on ``data``'s training data: the steps the run took from
    this state (``fit`` takes them in the same order: epochs, shuffles and batches follow from
    the state's counters alone). InputError when ``step`` is behind the trainer."""
    todo = step - trainer.steps
    if todo < 0:
        raise InputError(f"cannot replay back from step {trainer.steps} to step {step}")
    if todo and data.y is None:
        trainer._run(data.dataset(trainer), 0, steps=step)
    elif todo:
        trainer.train_steps(data.x, cast("npt.ArrayLike", data.y), todo)


def replay_step(trainer: Trainer, dataset: Dataset) -> None:
    """One step of the run, as ``replay(trainer, data, trainer.steps + 1)`` takes it, on
    ``dataset`` (``RunData.dataset`` of the run's training data, converted once: replaying a
    step at a time would otherwise convert the whole data set at every step)."""
    if dataset.is_stream:
        trainer._run(dataset, 0, max_steps=1, steps=trainer.steps + 1)
    else:
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
