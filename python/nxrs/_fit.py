"""``Trainer.fit``: the training loop around the core, with validation, checkpoints, a progress
bar and Ctrl-C.

The loop runs in Python so that it can call the ``CheckpointManager`` (itself Python) between
steps; the steps run in Rust with the GIL released, in chunks of at most ``_CHUNK_SECONDS``.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy.typing as npt

from nxrs._async_save import SaveInFlight, manager_write
from nxrs._checkpoint import open as open_checkpoint
from nxrs._checks import optional_count
from nxrs._config import config_diff
from nxrs._manager import CheckpointEntry, CheckpointManager, CorruptCheckpointWarning
from nxrs._nxrs import (
    _CHUNK_SECONDS,
    ConfigError,
    MismatchError,
    NxrsError,
    __version__,
)
from nxrs._rundir import (
    CheckpointSaveError,
    RecordSaveError,
    RunDirectory,
    RunManifest,
    RunStopped,
    event,
    open_run_directory,
    stderr_line,
    warn_save_failed,
)
from nxrs._signals import StopFlag, stop_signals
from nxrs._store import is_url
from nxrs._transcript import DataDigests, SavedStateLike
from nxrs.data import _describe_split

if TYPE_CHECKING:
    from nxrs._nxrs import Dataset, RunChunk, _Snapshot
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
    y: npt.ArrayLike,
    options: RunOptions,
    ray: bool,
    workers: int | None,
    ray_address: str | None,
) -> History:
    """Trains ``trainer`` as ``Trainer.fit`` (which checks the settings) describes: converts and
    checks the data, then runs the loop here or with the Ray engine."""
    # Every input is converted and checked before anything changes.
    data = trainer._dataset(x, y)
    if options.val is not None:
        trainer._dataset(*options.val)
    if ray:
        from nxrs._distributed import RayEngine

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
    val: tuple[npt.ArrayLike, npt.ArrayLike] | None
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
            state = _Session(run, manager, trainer, data, options)
            state.begin(options.resume)
            return _fit(trainer, data, options, state, stop, runner)
        finally:
            run.release()


class _Session:
    """This process's turn in a run directory: the run's identity checked, its newest
    checkpoint restored, checkpoints saved and the manifest (``RunManifest``) kept up to
    date."""

    def __init__(
        self,
        run: RunDirectory,
        manager: CheckpointManager,
        trainer: Trainer,
        data: Dataset,
        options: RunOptions,
    ) -> None:
        self.say = options.say or (lambda line: None)
        self.run = run
        self.manager = manager
        self.trainer = trainer
        self.fingerprint = data.fingerprint
        self.metadata = {"data_fingerprint": data.fingerprint, "nxrs_version": __version__}
        self.options = options
        self.samples = len(data)
        self.source = options.source
        self.manifest = RunManifest(run, {})
        #: The step of the newest checkpoint known to hold this run's state.
        self.saved_step: int | None = None
        #: The periodic save being written in the background (async_save), at most one.
        self.in_flight: SaveInFlight | None = None
        #: The previous background save's copy, whose memory the next one reuses.
        self.spare: _Snapshot | None = None
        self.transcript = run.transcript()
        self.data_digests = _data_digests(trainer, data, options)

    def _config(self) -> dict[str, Any]:
        config: dict[str, Any] = json.loads(json.dumps(self.trainer.config))
        return config

    def begin(self, resume: bool) -> None:
        """Checks the directory holds this run (or nothing), restores its newest checkpoint and
        records the start or resume; or, without ``resume``, moves the old run aside first."""
        trainer = self.trainer
        moved = old = None
        if not resume:
            # Not read: whatever it holds (another run, a damaged manifest) is moved aside.
            files = [e.path.name for e in self.manager.list()]
            moved = self.run.move_aside([*files, *self.transcript.names()])
        else:
            old = RunManifest.read(self.run)  # ManifestError (a MismatchError) if not valid
            if old is not None:
                self._check_identity(old.document)
            self._read_transcript()
        entry = self.manager.latest() if resume else None
        restored = entry is not None and _resume(trainer, self.manager, self.fingerprint)
        previous_end = None if old is None else old.describe_end()
        self.manifest = (
            old
            if old is not None
            else RunManifest.new(self.run, self._config(), self.fingerprint, self.samples)
        )
        self.manifest.begin(
            epochs=self.options.epochs,
            steps_per_epoch=trainer._batches_per_epoch(self.samples),
            command=self.options.command,
            source=self.source,
            keep=self.manager.keep,
        )
        where = self.run.directory
        if moved is not None:
            self.say(f"moved the previous run in {where} aside to {where}/{moved}")
        if restored:
            assert entry is not None
            self.say(
                f"resuming {where} from {entry.path.name}: step {trainer.steps}, epoch "
                f"{trainer.epoch}, batch {trainer.batch}"
                + ("" if old is None else f" (the previous process: {previous_end})")
            )
            self.saved_step = trainer.steps
            self._checkpointed(trainer, entry.path)
            self.manifest.add_event(
                event("resume", trainer, checkpoint=entry.path.name, previous_end=previous_end)
            )
        elif old is not None:
            self.say(
                f"resuming {where}: no checkpoint yet, starting from the beginning (the "
                f"previous process: {previous_end})"
            )
            self.manifest.add_event(
                event("resume", trainer, checkpoint=None, previous_end=previous_end)
            )
        else:
            self.manifest.add_event(event("start", trainer, moved_aside=moved, resume=resume))
        if restored and entry is not None:
            self._transcribe_unrecorded(entry)
        elif not self.transcript.entries:
            # The run's first entry: the state it starts from.
            self._transcribe("start", None)
        self._write_transcript()
        self.manifest.write()

    def _read_transcript(self) -> None:
        try:
            self.transcript.read()
        except ValueError as err:
            raise MismatchError(
                f"{err}: the run's transcript is damaged, so this run cannot be continued and "
                "verified; restart to move it aside (resume=False, nxrs train --restart) or "
                "use another directory"
            ) from None

    def _transcribe(
        self, kind: str, checkpoint: str | None, saved: SavedStateLike | None = None
    ) -> None:
        """Adds the trainer's state (or ``saved``: a background save's copy, an older
        checkpoint), saved as ``checkpoint``, to the transcript in memory, unless its step is
        recorded already (a run resumed from an older checkpoint computes the same states
        again). ``record`` writes it."""
        t, last = saved or self.trainer, self.transcript.last
        if last is not None and isinstance(last.get("step"), int) and t.steps <= last["step"]:
            return
        self.transcript.add(t, kind, checkpoint, self.data_digests)

    def _transcribe_unrecorded(self, restored: CheckpointEntry) -> None:
        """Adds the entry of the checkpoint the run resumed from, and before it those of the
        older checkpoints after the transcript's last entry: saved by a process that could not
        write their entries (a disk full; one killed between a checkpoint and its entry leaves
        only the newest). Each is read, and recorded only if it is of this run's
        configuration. A run directory written before transcripts existed starts its
        transcript at the checkpoint it resumes from."""
        last = self.transcript.last
        if last is not None and isinstance(last.get("step"), int):
            config = self.trainer.config_digest()
            for older in self.manager.list():
                if last["step"] < older.step < restored.step:
                    t = self.manager._load(older)
                    if t is not None and t.config_digest() == config:
                        self._transcribe("checkpoint", older.path.name, t)
        self._transcribe("checkpoint", restored.path.name)

    def _write_transcript(self, warn: bool = True) -> str | None:
        """Writes the transcript's unwritten entries; a failure is a warning (unless not
        ``warn``), as a failed periodic save is: they are kept, and written at the next save.
        Returns what is missing then, None once written."""
        transcript = self.transcript
        try:
            transcript.write()
            return None
        except OSError as err:
            failure = f"{type(err).__name__}: {err}"
            steps = [e.get("step") for e in transcript.entries[transcript.written :]]
        if not steps:
            # Nothing unwritten, only the check that its objects are all there failed (the
            # store unreachable): tried again at the next save.
            if warn:
                warn_save_failed(f"the transcript {transcript.path} was not checked ({failure})")
            return None
        what = (
            f"its entry of step {steps[0]}"
            if len(steps) == 1
            else f"{len(steps)} entries, steps {steps[0]} to {steps[-1]}"
        )
        error = f"the transcript {transcript.path} lacks {what} ({failure})"
        if warn:
            warn_save_failed(f"{error}; they are kept in memory and written at the next save")
        return error

    def _check_identity(self, old: dict[str, Any]) -> None:
        config = self._config()
        stored = old.get("config", {})
        diff = config_diff(config, stored)
        if diff:
            raise MismatchError(
                f"{self.run.directory} holds a run with another configuration (differs in "
                f"{', '.join(diff)}); restart to move it aside (resume=False, nxrs train "
                "--restart) or use another directory"
            )
        fingerprint = old.get("data", {}).get("fingerprint")
        stored_file = old.get("data", {}).get("file")
        if self.source is not None and stored_file is not None and stored_file != self.source:

            def show(s: Mapping[str, Any]) -> str:
                return (
                    f"fingerprint {s.get('fingerprint')} of {s.get('samples')} samples, "
                    f"{_describe_split(s)}"
                )

            raise MismatchError(
                f"{self.run.directory} holds a run on another data file or split "
                f"({show(stored_file)}; this one: {show(self.source)}); restart to move it "
                "aside (nxrs train --restart) or use another directory"
            )
        if fingerprint != self.fingerprint:
            raise MismatchError(
                f"{self.run.directory} holds a run on other data (fingerprint {fingerprint}, "
                f"this data's is {self.fingerprint}); restart to move it aside (resume=False, "
                "nxrs train --restart) or use another directory"
            )

    def record(self, entry: dict[str, Any] | None, state: str | None = None) -> None:
        """Writes the run's records: the transcript's unwritten entries, then the manifest with
        ``entry`` added and ``state`` set (``RunManifest.record``). What cannot be written is a
        warning, kept in memory and written by the next ``record`` (``finish`` raises if it
        still cannot be)."""
        self._write_transcript()
        self.manifest.record(entry, state)

    def finish(self, entry: dict[str, Any], state: str) -> None:
        """The run's last records: ``entry`` (its end, complete or a stop) and ``state``, after
        the transcript's unwritten entries. RecordSaveError (a CheckpointSaveError: ``nxrs
        train`` exit 5) if the transcript or the manifest cannot be written, naming what is
        missing; the manifest then records the failure, if it can be written."""
        missing = []
        self.manifest.add_event(entry)
        transcript_error = self._write_transcript(warn=False)
        if transcript_error is not None:
            missing.append(transcript_error)
            self.manifest.add_event(event("save-failed", self.trainer, error=transcript_error))
            state = "failed"
        self.manifest.document["state"] = state
        try:
            self.manifest.write()
        except OSError as err:
            missing.append(
                f"the run manifest {self.run.manifest_path} does not record the run's end "
                f"(state {state}, step {self.trainer.steps}): {type(err).__name__}: {err}"
            )
        if missing:
            newest = "none" if self.saved_step is None else f"step {self.saved_step}"
            raise RecordSaveError(
                errno.EIO,
                f"{'; '.join(missing)}. The checkpoints are saved (the newest: {newest}); run "
                "the same command again once they can be written",
            )

    def save(self, final: bool) -> Path | None:
        """Saves a checkpoint of the trainer's step unless one exists; returns the checkpoint
        that became durable meanwhile, if any. A failure leaves the previous checkpoint; it is
        raised (CheckpointSaveError) when ``final``, otherwise reported (SaveFailedWarning) and
        training goes on.

        With ``async_save``, a periodic save copies the state and leaves the writing to a
        background thread (``_async_save``; ``poll`` records it once durable). A save in
        flight is waited for first, so at most one is; a final save is always synchronous."""
        done = self.settle()
        t = self.trainer
        if self.saved_step == t.steps:
            return done
        if self.options.async_save and not final:
            path = self.manager.path_for(t.steps)
            write = manager_write(self.manager)
            spare, self.spare = self.spare, None
            self.in_flight = SaveInFlight.start(t, path, self.metadata, write, spare)
            return done
        try:
            path = self.manager.save(t, t.steps, metadata=self.metadata)
        except (OSError, NxrsError) as err:
            self._save_failed(t, err, final)
            return done
        self.saved_step = t.steps
        self._transcribe("checkpoint", path.name)
        self._checkpointed(t, path)
        self.record(None)
        return path

    def _checkpointed(self, saved: Any, path: Path) -> None:
        """The manifest's ``progress`` set to the checkpoint ``path`` of ``saved`` (with the
        object's size and SHA-256 when this process uploaded it), which pruning now keeps."""
        objects = self.manager._objects
        stored = None if objects is None else objects.uploaded.get(path.name)
        self.manifest.checkpointed(saved, path, stored)
        self.manager._pinned = path.name

    def _save_failed(self, state: Any, err: OSError | NxrsError, final: bool) -> None:
        """Records and reports that the checkpoint of ``state`` (the trainer, or a background
        save's copy) failed: raised as CheckpointSaveError when ``final``, else a warning."""
        newest = self.saved_step
        kept = "none" if newest is None else f"step {newest}"
        self.record(event("save-failed", state, error=f"{type(err).__name__}: {err}"))
        message = (
            f"the checkpoint of step {state.steps} could not be saved ({type(err).__name__}: "
            f"{err}); the newest checkpoint of this run is still {kept}"
        )
        if final:
            save_error = CheckpointSaveError(getattr(err, "errno", None) or errno.EIO, message)
            raise save_error from err
        warn_save_failed(message + "; training goes on and retries at the next save point")

    def poll(self) -> Path | None:
        """At a step boundary: records the background save if it has finished; returns its
        checkpoint if it became durable."""
        if self.in_flight is None or not self.in_flight.done():
            return None
        return self._complete()

    def settle(self) -> Path | None:
        """Waits for the background save in flight, if any, and records it (``poll``)."""
        if self.in_flight is None:
            return None
        self.in_flight.wait()
        return self._complete()

    def _complete(self) -> Path | None:
        """The finished background save counted: its transcript entry (the digest of the copy
        it wrote), the manifest's progress; or its failure recorded and reported, as a failed
        periodic save is."""
        job, self.in_flight = self.in_flight, None
        assert job is not None and job.done()
        self.spare, job.snapshot = job.snapshot, None
        for message in job.warnings:
            warnings.warn(message, CorruptCheckpointWarning, stacklevel=2)
        if job.error is not None:
            if not isinstance(job.error, (OSError, NxrsError)):
                raise job.error  # a defect, raised as a synchronous save would raise it
            self._save_failed(job, job.error, final=False)
            return None
        saved = job.saved
        assert saved is not None
        self.saved_step = saved.steps
        self._transcribe("checkpoint", job.path.name, saved)
        self._checkpointed(saved, job.path)
        self.record(None)
        return job.path


def _fit(
    trainer: Trainer,
    data: Dataset,
    options: RunOptions,
    state: _Session | None,
    stop: StopFlag | None,
    runner: Runner,
) -> History:
    epochs, val, every, every_seconds = (
        options.epochs, options.val, options.every, options.every_seconds
    )  # fmt: skip
    progress, say = options.progress, options.say
    history = History()
    if trainer.epoch >= epochs:
        # Allowed (a finished run asked again, a resumed one already past the plan), and said:
        # a call that trains nothing is otherwise easy to mistake for one that trained. A
        # caller with its own channel (nxrs train's stderr lines) is told there.
        message = (
            f"epochs={epochs}: the trainer has already completed {trainer.epoch} epochs; "
            "nothing to train (pass a larger epochs to train more)"
        )
        if say is not None:
            say(message)
        else:
            warnings.warn(
                f"fit: {message}",
                NothingToTrainWarning,
                stacklevel=5,  # the caller of Trainer.fit -> fit -> _fit_with -> _fit
            )
    bar = _progress_bar(progress, trainer, epochs, len(data))
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
        while trainer.epoch < epochs:
            if stop is not None and stop.signum is not None:
                break
            max_steps = None if every is None else every - trainer.steps % every
            start = time.perf_counter()
            before = trainer.steps
            chunk = runner(data, epochs, max_steps, _CHUNK_SECONDS, epoch_end=val is not None)
            history.steps += chunk.steps
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
                break  # nothing left to do (cannot happen while epoch < epochs; a safeguard)
        if stop is not None and stop.signum is not None:
            if bar is not None:
                bar.close()
                bar = None
            stopped(signal.Signals(stop.signum).name)
            saved = None if state is None else history.checkpoint or _newest(state)
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


def _data_digests(trainer: Trainer, data: Dataset, options: RunOptions) -> DataDigests:
    """The digests of the run's data: ``fit``'s ``(x, y)`` and validation data, or for ``nxrs
    train`` (which gives the file's test split as the validation data) the training and test
    splits."""
    other = None if options.val is None else trainer._dataset(*options.val)
    if options.source is not None:
        return DataDigests.of(data, test=other)
    return DataDigests.of(data, validation=other)


def _newest(state: _Session) -> Path:
    return state.manager.path_for(state.trainer.steps)


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
            f"{err}); pass resume=False to start over (the old run is moved aside)"
        ) from err
    diff = config_diff(config, trainer.config)
    if diff:
        raise MismatchError(
            f"{entry.path} was written by a trainer with another configuration (differs in "
            f"{', '.join(diff)}); pass resume=False to start over (the old run is moved aside)"
        )
    if "data_fingerprint" not in stored:
        raise MismatchError(
            f"{entry.path} records no data fingerprint (it was not written by fit); pass "
            "resume=False to start over (the old run is moved aside)"
        )
    if stored["data_fingerprint"] != fingerprint:
        raise MismatchError(
            f"{entry.path} was trained on other data (fingerprint "
            f"{stored['data_fingerprint']}, this data's is {fingerprint}); pass resume=False "
            "to start over (the old run is moved aside)"
        )
    trainer.restore(entry.path)
    return True


class _Bar:
    """A tqdm progress bar over the run's steps, with epoch, loss and samples/s."""

    def __init__(self, trainer: Trainer, epochs: int, samples: int) -> None:
        from tqdm.auto import tqdm

        per_epoch = trainer._batches_per_epoch(samples)
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
