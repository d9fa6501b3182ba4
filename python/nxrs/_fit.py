"""``Trainer.fit``: the training loop around the core, with validation, checkpoints, a progress
bar and Ctrl-C.

The loop runs in Python so that it can call the ``CheckpointManager`` (itself Python) between
steps; the steps run in Rust with the GIL released, in chunks of at most ``_CHUNK_SECONDS``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

import numpy.typing as npt

from nxrs._nxrs import InputError, MismatchError, __version__
from nxrs._nxrs import open as open_checkpoint
from nxrs.manager import CheckpointManager

if TYPE_CHECKING:
    from nxrs._nxrs import Trainer

__all__ = ["History", "fit"]

#: Longest time the GIL stays released (and Ctrl-C waits) between two returns to Python.
_CHUNK_SECONDS = 0.1


@dataclass
class History:
    """What ``Trainer.fit`` returns: one entry per epoch that ended during the call.

    ``history`` maps ``"loss"`` (the mean of the epoch's step losses, in binary32, summed in
    order) and, for classification, ``"accuracy"`` (correct / samples seen), and with
    ``validation_data`` ``"val_loss"`` and ``"val_accuracy"`` (``Trainer.evaluate`` after the
    epoch) to lists aligned with ``epoch`` (1-based: the number of complete epochs after it).
    An epoch that began before this call (a resume mid-epoch) counts only the steps of this call.
    """

    epoch: list[int] = field(default_factory=list)
    history: dict[str, list[float]] = field(default_factory=dict)
    #: Optimiser steps taken by this call.
    steps: int = 0
    #: The checkpoint written last by this call, if any.
    checkpoint: Optional[str] = None  # noqa: UP045 (a dataclass field evaluated on Python 3.9)

    def _add(self, key: str, value: float) -> None:
        self.history.setdefault(key, []).append(value)


def fit(
    trainer: Trainer,
    x: npt.ArrayLike,
    y: npt.ArrayLike,
    epochs: int,
    *,
    validation_data: tuple[npt.ArrayLike, npt.ArrayLike] | None = None,
    checkpoint: str | os.PathLike[str] | CheckpointManager | None = None,
    every: int | None = None,
    resume: bool = True,
    progress: bool | None = None,
) -> History:
    """Trains ``trainer`` until ``epochs`` epochs are complete (see ``Trainer.fit``)."""
    if isinstance(epochs, bool) or not isinstance(epochs, int):
        raise TypeError(f"epochs must be an int, not {type(epochs).__name__}")
    if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
        raise ValueError(f"every must be a positive int or None, not {every!r}")
    if every is not None and checkpoint is None:
        raise ValueError("every needs a checkpoint (a directory or a CheckpointManager)")
    # Every input is converted and checked before anything changes.
    data = trainer._dataset(x, y)
    val = None
    if validation_data is not None:
        if not isinstance(validation_data, tuple) or len(validation_data) != 2:
            raise InputError("validation_data must be a tuple (x, y)")
        val = validation_data
        trainer._dataset(*val)
    manager: CheckpointManager | None
    if checkpoint is None or isinstance(checkpoint, CheckpointManager):
        manager = checkpoint
    else:
        manager = CheckpointManager(checkpoint)
    metadata = {"data_fingerprint": data.fingerprint, "nxrs_version": __version__}

    restored = manager is not None and resume and _resume(trainer, manager, data.fingerprint)
    history = History()
    # The state a checkpoint already holds needs no second save.
    last_saved = trainer.steps if restored else None
    bar = _progress_bar(progress, trainer, epochs, len(data))

    def save() -> None:
        nonlocal last_saved
        if manager is None or last_saved == trainer.steps:
            return
        path = manager.save(trainer, trainer.steps, metadata=metadata)
        history.checkpoint = str(path)
        last_saved = trainer.steps

    try:
        while trainer.epoch < epochs:
            max_steps = None if every is None else every - trainer.steps % every
            start = time.perf_counter()
            before = trainer.steps
            ended, steps, last_loss = trainer._run(
                data, epochs, max_steps, _CHUNK_SECONDS, epoch_end=val is not None
            )
            history.steps += steps
            for epoch, loss, accuracy, _samples, _whole in ended:
                history.epoch.append(epoch + 1)
                history._add("loss", loss)
                if accuracy is not None:
                    history._add("accuracy", accuracy)
                if val is not None:
                    val_loss, val_accuracy = trainer.evaluate(*val)
                    history._add("val_loss", val_loss)
                    if val_accuracy is not None:
                        history._add("val_accuracy", val_accuracy)
            if bar is not None:
                bar.update(trainer, trainer.steps - before, time.perf_counter() - start, last_loss)
            if every is not None and trainer.steps % every == 0:
                save()
            if steps == 0:
                break  # nothing left to do (cannot happen while epoch < epochs; a safeguard)
        save()
    except KeyboardInterrupt:
        # The state is at a step boundary: keep it, then stop as asked.
        if bar is not None:
            bar.close()
            bar = None
        save()
        raise
    finally:
        if bar is not None:
            bar.close()
    return history


def _resume(trainer: Trainer, manager: CheckpointManager, fingerprint: str) -> bool:
    """Restores the newest valid checkpoint of ``manager``'s directory into ``trainer`` after
    checking it was written by ``fit`` on the same data with the same configuration."""
    entry = manager.latest()
    if entry is None:
        return False
    try:
        with open_checkpoint(entry.path) as ck:
            stored: Mapping[str, str] = ck.metadata
            config = {k: ck.config[k] for k in trainer.config}
    except Exception as err:  # a v1 file: no configuration or metadata
        raise MismatchError(
            f"{entry.path} cannot be resumed by fit (no configuration or data fingerprint: "
            f"{err}); pass resume=False to train from the trainer as it is"
        ) from err
    if config != trainer.config:
        diff = sorted(k for k in config if config[k] != trainer.config[k])
        raise MismatchError(
            f"{entry.path} was written by a trainer with another configuration (differs in "
            f"{', '.join(diff)}); pass resume=False to train from the trainer as it is"
        )
    if "data_fingerprint" not in stored:
        raise MismatchError(
            f"{entry.path} records no data fingerprint (it was not written by fit); pass "
            "resume=False to train from the trainer as it is"
        )
    if stored["data_fingerprint"] != fingerprint:
        raise MismatchError(
            f"{entry.path} was trained on other data (fingerprint "
            f"{stored['data_fingerprint']}, this data's is {fingerprint}); pass resume=False "
            "to train from the trainer as it is"
        )
    trainer.restore(entry.path)
    return True


class _Bar:
    """A tqdm progress bar over the run's steps, with epoch, loss and samples/s."""

    def __init__(self, trainer: Trainer, epochs: int, samples: int) -> None:
        from tqdm.auto import tqdm

        batch_size: int = trainer.config["batch_size"]
        per_epoch = (
            samples // batch_size if trainer.config["drop_last"] else -(-samples // batch_size)
        )
        total = max(0, epochs * per_epoch)
        done = min(total, trainer.epoch * per_epoch + trainer.batch)
        self.samples_per_step = samples / max(per_epoch, 1)
        self.epochs = epochs
        self.bar: Any = tqdm(
            total=total, initial=done, unit="step", file=sys.stderr, dynamic_ncols=True
        )

    def update(self, trainer: Trainer, steps: int, seconds: float, loss: float | None) -> None:
        rate = steps * self.samples_per_step / seconds if seconds > 0 else 0.0
        postfix = {"epoch": f"{trainer.epoch}/{self.epochs}", "samples/s": f"{rate:,.0f}"}
        if loss is not None:
            postfix["loss"] = f"{loss:.4f}"
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(steps)

    def close(self) -> None:
        self.bar.close()


def _progress_bar(
    progress: bool | None, trainer: Trainer, epochs: int, samples: int
) -> _Bar | None:
    """A bar when asked (``True``), or by default when stderr is a terminal."""
    if progress is None:
        progress = sys.stderr.isatty()
    return _Bar(trainer, epochs, samples) if progress else None
