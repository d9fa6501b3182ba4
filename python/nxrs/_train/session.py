"""The run directory during a ``fit`` (``nxrs._train.fit``): a ``Session`` takes it, checks it
holds this run (configuration, data) or nothing, resumes from its newest valid checkpoint,
and keeps its records (the transcript, the manifest) as the loop saves, stops and ends."""

from __future__ import annotations

import errno
import json
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nxrs._nxrs import MismatchError, NxrsError, __version__, _Checkpoint
from nxrs._runs.async_save import SaveInFlight, manager_write
from nxrs._runs.checkpoints import CheckpointEntry, CheckpointManager, CorruptCheckpointWarning
from nxrs._runs.directory import RunDirectory
from nxrs._runs.errors import CheckpointSaveError, RecordSaveError, warn_save_failed
from nxrs._runs.manifest import RunManifest, event
from nxrs._runs.transcript import DataDigests, SavedStateLike
from nxrs._util.config import config_diff
from nxrs.data import _describe_split

if TYPE_CHECKING:
    from nxrs._nxrs import Dataset, _Snapshot
    from nxrs._train.fit import RunOptions
    from nxrs._trainer import Trainer

__all__ = ["Session", "newest"]


class Session:
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
        self.metadata = {
            **options.metadata,
            "data_fingerprint": data.fingerprint,
            "nxrs_version": __version__,
        }
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
        # A token stream's run has no epochs: its plan is its steps, as one "epoch".
        stream_steps = self.options.steps
        self.manifest.begin(
            epochs=self.options.epochs if stream_steps is None else 1,
            steps_per_epoch=(
                trainer._batches_per_epoch(self.samples) if stream_steps is None else stream_steps
            ),
            command=self.options.command,
            source=self.source,
            keep=self.manager.keep,
            data_source=self.options.data_source,
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


def _data_digests(trainer: Trainer, data: Dataset, options: RunOptions) -> DataDigests:
    """The digests of the run's data: ``fit``'s ``(x, y)`` and validation data, or for ``nxrs
    train`` (which gives the file's test split as the validation data) the training and test
    splits."""
    other = validation_dataset(trainer, options)
    if options.source is not None:
        return DataDigests.of(data, test=other)
    return DataDigests.of(data, validation=other)


def validation_dataset(trainer: Trainer, options: RunOptions) -> Dataset | None:
    """The run's validation data as the core reads it: a data set, or a token stream."""
    if options.val is None:
        return None
    if options.steps is not None:
        return trainer._stream(options.val)
    return trainer._dataset(*options.val)


def newest(state: Session) -> Path:
    return state.manager.path_for(state.trainer.steps)


def _resume(trainer: Trainer, manager: CheckpointManager, fingerprint: str) -> bool:
    """Restores the newest valid checkpoint of ``manager``'s directory into ``trainer`` after
    checking it was written by ``fit`` on the same data with the same configuration."""
    entry = manager.latest()
    if entry is None:
        return False
    try:
        # The compiled checkpoint (``nxrs.open``'s class builds trainers, a layer above).
        with _Checkpoint(entry.path, verify=True) as ck:
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
