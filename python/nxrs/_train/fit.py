"""``Trainer.fit``: the training loop around the core, with validation, checkpoints, a progress
bar and Ctrl-C.

The loop runs in Python so that it can call the ``CheckpointManager`` (itself Python) between
steps; the steps run in Rust with the GIL released, in chunks of at most ``_CHUNK_SECONDS``.
"""

from __future__ import annotations

import os
import signal
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional, SupportsIndex

import numpy.typing as npt

from nxrs._nxrs import (
    _CHUNK_SECONDS,
    ConfigError,
    InputError,
)
from nxrs._runs.checkpoints import CheckpointManager
from nxrs._runs.directory import open_run_directory
from nxrs._runs.errors import (
    CheckpointSaveError,
    RunStopped,
    stderr_line,
)
from nxrs._runs.manifest import event
from nxrs._storage.store import is_url
from nxrs._train.session import Session, newest, validation_dataset
from nxrs._util.checks import count, flag, keep_count, optional_count, save_points
from nxrs._util.progress import progress_bar
from nxrs._util.signals import StopFlag, stop_signals

if TYPE_CHECKING:
    from nxrs._nxrs import Dataset, RunChunk
    from nxrs._trainer import Trainer

__all__ = ["History", "NothingToTrainWarning", "fit"]


#: The clock of ``every_seconds`` (a seam: tests replace it to drive time-based saves).
_clock = time.monotonic


class NothingToTrainWarning(UserWarning):
    """``fit(epochs=N)`` found the trainer (or the run directory it resumed) already at epoch
    ``N`` or later: it trained nothing (``History.steps`` is 0). ``nxrs train`` says the same
    in a line on stderr instead."""


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
    #: A token stream's run: the step counts after which the losses were estimated.
    step: list[int] = field(default_factory=list)
    history: dict[str, list[float]] = field(default_factory=dict)
    #: Optimiser steps taken by this call.
    steps: int = 0
    #: The checkpoint written last by this call, if any.
    checkpoint: Optional[Path] = None  # noqa: UP045 (a dataclass field evaluated on Python 3.9)

    def _add(self, key: str, value: float) -> None:
        self.history.setdefault(key, []).append(value)


def fit(
    trainer: Trainer,
    x: npt.ArrayLike,
    y: npt.ArrayLike | None,
    epochs: SupportsIndex | None,
    *,
    steps: SupportsIndex | None = None,
    eval_every: SupportsIndex | None = None,
    eval_batches: SupportsIndex = 20,
    validation_data: tuple[npt.ArrayLike, npt.ArrayLike] | npt.ArrayLike | None = None,
    checkpoint: str | os.PathLike[str] | CheckpointManager | None = None,
    every: SupportsIndex | None = None,
    every_seconds: float | None = None,
    resume: bool = True,
    keep: SupportsIndex | Literal["all"] = 3,
    progress: bool | None = None,
    engine: Literal["local", "ray"] = "local",
    workers: SupportsIndex | None = None,
    ray_address: str | None = None,
    async_save: bool | None = None,
    _stop: StopFlag | None = None,
    _command: list[str] | None = None,
    _say: Callable[[str], None] | None = None,
    _source: Mapping[str, Any] | None = None,
    _data_source: Mapping[str, Any] | None = None,
    _metadata: Mapping[str, str] | None = None,
) -> History:
    """``Trainer.fit``: checks every setting before anything is read or changed, then trains
    (``Trainer.fit`` describes it all)."""
    # Every setting is checked before anything is read or changed (ConfigError, a ValueError).
    stream = y is None
    if stream:
        # A token stream trains by steps (docs/TRAINING.md section 15.8).
        if epochs is not None or steps is None:
            raise ConfigError(
                "a token stream (x alone, no y) trains by steps: give steps=N, not epochs"
            )
        total_steps: int | None = count("steps", steps, minimum=1)
        epochs = 0
    else:
        if epochs is None or steps is not None:
            raise ConfigError(
                "fit(x, y, epochs) trains a data set by epochs; steps=N is for a token stream "
                "(x alone)"
            )
        total_steps = None
        epochs = count("epochs", epochs, minimum=1)
    evaluation = StreamEvaluation.of(eval_every, eval_batches, stream)
    every, every_seconds = save_points(every, every_seconds, checkpointed=checkpoint is not None)
    if checkpoint is not None and not isinstance(checkpoint, (str, os.PathLike, CheckpointManager)):
        raise ConfigError(
            "checkpoint must be a directory (a str or os.PathLike), a CheckpointManager or "
            f"None, not {type(checkpoint).__name__}"
        )
    if isinstance(checkpoint, (str, os.PathLike)) and not os.fspath(checkpoint):
        # An empty path would make the current directory the run directory.
        raise ConfigError("checkpoint must name a directory, not ''")
    resume = flag("resume", resume)
    kept = keep_count(keep)
    if isinstance(checkpoint, CheckpointManager) and kept != 3:
        raise ConfigError(
            "keep is the CheckpointManager's own setting when checkpoint is one: pass "
            "CheckpointManager(directory, keep=...)"
        )
    progress = None if progress is None else flag("progress", progress)
    if async_save is None:
        # The default: in the background on object storage, where an upload takes long.
        async_save = on_object_storage(checkpoint)
    async_save = flag("async_save", async_save)
    if async_save and checkpoint is None:
        raise ConfigError("async_save needs a checkpoint (a run directory to save into)")
    workers = check_engine(engine, workers, ray_address)
    # The whole run is one claim, taken before the trainer is first read: a second changing
    # call meanwhile is a BusyError at once (not after the chunk of steps in progress), and no
    # other thread changes the trainer between this run's chunks (reading it is allowed); the
    # loop's own calls (``_run``, ``restore``, ...) nest in the claim.
    with trainer._claim("fit"):
        if not stream and trainer.config["loss"] == "cross_entropy" and trainer.sizes[-1] < 2:
            # One output is one class: softmax gives it probability 1 whatever the weights, so
            # the loss and every gradient are 0 and nothing is learnt.
            raise ConfigError(
                "a classifier needs at least two outputs, one per class; this model "
                f"({trainer.sizes}) has one (for one class there is nothing to learn; for a "
                "single float target use loss='mse')"
            )
        if (
            not stream
            and validation_data is not None
            and (not isinstance(validation_data, tuple) or len(validation_data) != 2)
        ):
            raise InputError("validation_data must be a tuple (x, y)")
        options = RunOptions(
            epochs, validation_data, checkpoint, every, every_seconds, resume, progress, _stop,
            _command, _say, None if _source is None else dict(_source), kept, async_save,
            None if _data_source is None else dict(_data_source), total_steps, evaluation,
            dict(_metadata or {}),
        )  # fmt: skip
        return _train(trainer, x, y, options, engine == "ray", workers, ray_address)


def _train(
    trainer: Trainer,
    x: npt.ArrayLike,
    y: npt.ArrayLike | None,
    options: RunOptions,
    ray: bool,
    workers: int | None,
    ray_address: str | None,
) -> History:
    """Trains ``trainer`` as ``Trainer.fit`` (which checks the settings) describes: converts and
    checks the data, then runs the loop here or with the Ray engine."""
    # Every input is converted and checked before anything changes.
    data = trainer._stream(x) if y is None else trainer._dataset(x, y)
    if options.val is not None:
        validation_dataset(trainer, options)
    if ray:
        from nxrs._train.distributed import RayEngine

        # Its workers start at its first step, once the run directory is taken and resumed;
        # the cluster's room for them is checked now, before anything changes.
        ray_engine = RayEngine(trainer, x, y, data.fingerprint, workers, ray_address)
        ray_engine.prepare()
        try:
            return _fit_with(trainer, data, options, ray_engine.run)
        finally:
            ray_engine.close()
    return _fit_with(trainer, data, options, trainer._run)


@dataclass(frozen=True)
class RunOptions:
    """``fit``'s settings, checked (by ``fit``), as the loop and the run directory use them.
    (A private dataclass: its annotations are never evaluated, so ``X | None`` is fine on 3.9.)"""

    epochs: int
    #: ``(x, y)`` of a data set's run, or a token stream's validation stream.
    val: Any
    checkpoint: str | os.PathLike[str] | CheckpointManager | None
    every: int | None
    every_seconds: float | None
    resume: bool
    progress: bool | None
    #: The SIGINT/SIGTERM flag of a caller that installed the handlers itself (nxrs train).
    stop: StopFlag | None
    #: The command line recorded in the manifest (nxrs train).
    command: list[str] | None
    #: Where what fit says goes (nxrs train's stderr lines); None: warnings.
    say: Callable[[str], None] | None
    #: The identity of the whole data file the training data was split from (nxrs train).
    source: dict[str, Any] | None
    #: Checkpoints the run directory keeps (None: every one); for a directory given as a path.
    keep: int | None = 3
    #: Periodic saves written by a background thread while training goes on (_async_save).
    async_save: bool = False
    #: How the data was read (``--data``, ``--target``, ``--task``; nxrs train): what replay
    #: reads it again by.
    data_source: dict[str, Any] | None = None
    #: A token stream's run: the steps it ends at (None: a data set's run, by epochs).
    steps: int | None = None
    #: A token stream's loss estimates.
    evaluation: StreamEvaluation | None = None
    #: More metadata for the run's checkpoints (a text's vocabulary, for nxrs sample).
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StreamEvaluation:
    """When and on how many windows a token stream's losses are estimated (``fit``'s
    ``eval_every`` and ``eval_batches``)."""

    every: int | None
    batches: int

    @staticmethod
    def of(every: object, batches: object, stream: bool) -> StreamEvaluation | None:
        """The settings checked; None for a data set's run, which takes neither."""
        if not stream:
            if every is not None or batches != 20:
                raise ConfigError("eval_every and eval_batches are for a token stream's run")
            return None
        return StreamEvaluation(
            optional_count("eval_every", every, minimum=1),
            count("eval_batches", batches, minimum=1),
        )


def on_object_storage(checkpoint: object) -> bool:
    """Whether ``checkpoint`` (``fit``'s) is a run directory on object storage."""
    if isinstance(checkpoint, CheckpointManager):
        return isinstance(checkpoint.directory, str)
    return is_url(checkpoint)


def check_engine(engine: str, workers: object, ray_address: str | None) -> int | None:
    """The number of workers asked for (None: one per CPU of the cluster), checked with the
    engine they need."""
    if engine not in ("local", "ray"):
        raise ConfigError(f"engine must be 'local' or 'ray', not {engine!r}")
    checked = optional_count("workers", workers, minimum=1)
    if ray_address is not None and not isinstance(ray_address, str):
        raise ConfigError(f"ray_address must be a str or None, not {type(ray_address).__name__}")
    if engine == "local" and (checked is not None or ray_address is not None):
        raise ConfigError("workers and ray_address need engine='ray'")
    return checked


#: ``Trainer._run``'s signature: how ``_fit`` takes steps, in this process or on Ray workers.
Runner = Callable[..., "RunChunk"]


def _fit_with(trainer: Trainer, data: Dataset, options: RunOptions, runner: Runner) -> History:
    checkpoint = options.checkpoint
    if checkpoint is None:
        # No run directory: nothing to save on a stop, but a caller that turned the signals into
        # a stop flag (nxrs train) is obeyed all the same: RunStopped at the next chunk.
        return _fit(trainer, data, options, None, options.stop, runner)
    directory = checkpoint.directory if isinstance(checkpoint, CheckpointManager) else checkpoint
    run = open_run_directory(directory)
    with stop_signals(options.stop) as stop:
        # A lease on object storage may be waited for: one line on stderr says so.
        run.acquire(options.say or (lambda line: stderr_line(f"nxrs: {line}")), stop)
        try:
            # The manager (which sweeps dead writers' temporary files) only under the lock.
            manager = (
                checkpoint
                if isinstance(checkpoint, CheckpointManager)
                else CheckpointManager(
                    checkpoint, keep="all" if options.keep is None else options.keep
                )
            )
            state = Session(run, manager, trainer, data, options)
            state.begin(options.resume)
            return _fit(trainer, data, options, state, stop, runner)
        finally:
            run.release()


def _fit(
    trainer: Trainer,
    data: Dataset,
    options: RunOptions,
    state: Session | None,
    stop: StopFlag | None,
    runner: Runner,
) -> History:
    epochs, val, every, every_seconds = (
        options.epochs, options.val, options.every, options.every_seconds
    )  # fmt: skip
    progress, say = options.progress, options.say
    history = History()
    stream = options.steps is not None
    estimate = _Estimates.of(trainer, data, options)

    def finished() -> bool:
        if options.steps is not None:
            return trainer.steps >= options.steps
        return trainer.epoch >= epochs

    if finished():
        # Allowed (a finished run asked again, a resumed one already past the plan), and said:
        # a call that trains nothing is otherwise easy to mistake for one that trained. A
        # caller with its own channel (nxrs train's stderr lines) is told there.
        message = (
            f"steps={options.steps}: the trainer has already taken {trainer.steps} steps; "
            "nothing to train (pass a larger steps to train more)"
            if stream
            else f"epochs={epochs}: the trainer has already completed {trainer.epoch} epochs; "
            "nothing to train (pass a larger epochs to train more)"
        )
        if say is not None:
            say(message)
        else:
            warnings.warn(
                f"fit: {message}",
                NothingToTrainWarning,
                stacklevel=6,  # the caller of Trainer.fit -> fit -> _train -> _fit_with -> _fit
            )
    bar = _progress_bar(progress, trainer, epochs, len(data), options.steps)
    last_save = _clock()

    def save(final: bool) -> None:
        nonlocal last_save
        last_save = _clock()
        if state is not None:
            path = state.save(final)
            if path is not None:
                history.checkpoint = path

    def poll() -> None:
        """Records a background save that has finished since the last step boundary."""
        if state is not None:
            path = state.poll()
            if path is not None:
                history.checkpoint = path

    def stopped(reason: str) -> None:
        """Saves the step reached and records the stop."""
        if state is None:
            return
        try:
            save(final=True)
        except CheckpointSaveError as err:
            state.record(event("stop", trainer, reason=reason, saved=False), state="failed")
            raise err from err.__cause__
        state.finish(
            event(
                "stop",
                trainer,
                reason=reason,
                checkpoint=state.manager.path_for(trainer.steps).name,
            ),
            "stopped",
        )

    try:
        while not finished():
            if stop is not None and stop.signum is not None:
                break
            periods = [every, None if estimate is None else estimate.every]
            bounds = [p - trainer.steps % p for p in periods if p is not None]
            max_steps = min(bounds) if bounds else None
            start = time.perf_counter()
            before = trainer.steps
            # A token stream's run steps towards its step count (its data set has no epochs).
            towards = {"steps": options.steps} if stream else {}
            chunk = runner(
                data,
                epochs,
                max_steps,
                _CHUNK_SECONDS,
                epoch_end=val is not None and not stream,
                **towards,
            )
            history.steps += chunk.steps
            if estimate is not None and chunk.steps and estimate.due(trainer, finished()):
                estimate.record(trainer, history)
                if say is not None:
                    say(_estimate_line(history))
            for end in chunk.epochs:
                history.epoch.append(end.epoch + 1)
                history._add("loss", end.loss)
                if end.accuracy is not None:
                    history._add("accuracy", end.accuracy)
                if val is not None:
                    val_loss, val_accuracy = trainer.evaluate(*val)
                    history._add("val_loss", val_loss)
                    if val_accuracy is not None:
                        history._add("val_accuracy", val_accuracy)
            if bar is not None:
                bar.update(
                    trainer, trainer.steps - before, time.perf_counter() - start, chunk.last_loss
                )
            poll()
            if state is not None:
                state.run.check()  # a lease taken over: stop, writing nothing more
            if stop is not None and stop.signum is not None:
                break
            if (every is not None and trainer.steps % every == 0) or (
                every_seconds is not None and _clock() - last_save >= every_seconds
            ):
                save(final=False)
            if chunk.steps == 0:
                break  # nothing left to do (cannot happen before the end; a safeguard)
        if stop is not None and stop.signum is not None:
            if bar is not None:
                bar.close()
                bar = None
            stopped(signal.Signals(stop.signum).name)
            saved = None if state is None else history.checkpoint or newest(state)
            raise RunStopped(stop.signum, trainer.steps, saved)
        try:
            save(final=True)
        except CheckpointSaveError:
            if state is not None:
                state.record(None, state="failed")
            raise
        if state is not None:
            state.finish(event("complete", trainer), "complete")
    except RunStopped:
        raise
    except KeyboardInterrupt:
        # Ctrl-C outside the handlers (fit not in the main thread's control): the state is at a
        # step boundary; keep it, then stop as asked.
        if bar is not None:
            bar.close()
            bar = None
        stopped("KeyboardInterrupt")
        raise
    finally:
        if bar is not None:
            bar.close()
        if state is not None:
            # Never leave a background save behind (the lock is released after this): an
            # error while training still waits for it and records it.
            state.settle()
    return history


class _Estimates:
    """A token stream's loss estimates (``fit``'s ``eval_every``, ``eval_batches``): the same
    windows of the training stream and of the validation stream at every evaluation, drawn
    once from streams no step reads (docs/TRAINING.md section 15.8)."""

    def __init__(self, every: int | None, train: Dataset, val: Dataset | None) -> None:
        self.every, self.train, self.val = every, train, val

    @staticmethod
    def of(trainer: Trainer, data: Dataset, options: RunOptions) -> _Estimates | None:
        evaluation = options.evaluation
        if options.steps is None or evaluation is None:
            return None
        if evaluation.every is None and options.val is None:
            return None  # nothing asked for: no estimate (each costs eval_batches batches)
        windows = evaluation.batches * trainer.config["batch_size"]
        val = validation_dataset(trainer, options)
        return _Estimates(
            evaluation.every,
            trainer._stream_windows(data, windows, 0),
            None if val is None else trainer._stream_windows(val, windows, 1),
        )

    def due(self, trainer: Trainer, finished: bool) -> bool:
        """Whether the step reached is an evaluation point: a multiple of ``every``, or the
        run's end."""
        return finished or (self.every is not None and trainer.steps % self.every == 0)

    def record(self, trainer: Trainer, history: History) -> None:
        history.step.append(trainer.steps)
        for prefix, windows in (("", self.train), ("val_", self.val)):
            if windows is None:
                continue
            loss, accuracy = trainer._evaluate(windows)
            history._add(f"{prefix}loss", loss)
            if accuracy is not None:
                history._add(f"{prefix}accuracy", accuracy)


def _estimate_line(history: History) -> str:
    """The newest loss estimates of a token stream's run, as ``nxrs train`` prints them."""
    values = "  ".join(f"{key} {values[-1]:.4f}" for key, values in history.history.items())
    return f"step {history.step[-1]}  {values}"


class _Bar:
    """A progress bar over the run's steps, with epoch, loss and samples/s."""

    def __init__(self, bar: Any, epochs: int, samples_per_step: float) -> None:
        self.bar, self.epochs, self.samples_per_step = bar, epochs, samples_per_step

    def update(self, trainer: Trainer, steps: int, seconds: float, loss: float | None) -> None:
        rate = steps * self.samples_per_step / seconds if seconds > 0 else 0.0
        postfix = {"samples/s": f"{rate:,.0f}"}
        if self.epochs:
            postfix = {"epoch": f"{trainer.epoch}/{self.epochs}", **postfix}
        if loss is not None:
            postfix["loss"] = f"{loss:.4f}"
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(steps)

    def close(self) -> None:
        self.bar.close()


def _progress_bar(
    progress: bool | None, trainer: Trainer, epochs: int, samples: int, steps: int | None
) -> _Bar | None:
    """A bar when asked (``True``), or by default when stderr is a terminal: over the epochs'
    steps, or a token stream's ``steps``."""
    if steps is not None:
        bar = progress_bar(progress, steps, "step", initial=min(steps, trainer.steps))
        return None if bar is None else _Bar(bar, 0, trainer.config["batch_size"])
    per_epoch = trainer._batches_per_epoch(samples)
    total = max(0, epochs * per_epoch)
    done = min(total, trainer.epoch * per_epoch + trainer.batch)
    bar = progress_bar(progress, total, "step", initial=done)
    return None if bar is None else _Bar(bar, epochs, samples / max(per_epoch, 1))
