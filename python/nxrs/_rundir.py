"""A run directory: the checkpoints of one training run, its manifest and its lock.

``fit(checkpoint=DIR)`` and ``nxrs train --ckpt-dir DIR`` keep in ``DIR``:

- the checkpoints, ``step-<12 digits>.nxck`` (a ``CheckpointManager``'s, ``keep=3``);
- ``nxrs-run.json``, the manifest: a small JSON document for people and scripts (see
  ``docs/RUNS.md``): the configuration, the data's fingerprint, nxrs's version, when the run
  started, the plan (epochs, steps), the newest checkpoint written, and the history of starts,
  stops, resumes and failed saves with their reasons. It is rewritten crash-safely (temporary
  file, fsync, rename, directory fsync), so it is always the complete old or new document;
- ``.nxrs-run.lock``, locked (``fcntl.flock``, exclusive) by the process training in ``DIR``.
  The kernel drops the lock when that process ends, however it ends, so a killed run never
  blocks a restart; the file itself stays (deleting lock files invites races);
- ``previous/<UTC time>/``: earlier runs moved aside by ``resume=False`` / ``--restart``.

A second process pointed at a locked directory gets ``RunLockedError`` and changes nothing.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import os
import signal
import socket
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any, NoReturn, Optional

from nxrs._checks import is_count
from nxrs._files import finite_or_null as finite_or_null
from nxrs._files import fsync_path, temporary_prefix
from nxrs._files import json_text as json_text
from nxrs._files import write_bytes_atomically as write_bytes_atomically
from nxrs._files import write_json_atomically as write_json_atomically
from nxrs._manager import list_checkpoints
from nxrs._nxrs import MismatchError, NxrsError, __version__
from nxrs._signals import StopFlag as StopFlag
from nxrs._signals import stop_signals as stop_signals
from nxrs._transcript import TRANSCRIPT_NAME, TRANSCRIPT_TEMP, SavedStateLike, Transcript

__all__ = [
    "EVENTS_KEPT",
    "LOCK_NAME",
    "MANIFEST_NAME",
    "CheckpointSaveError",
    "ManifestError",
    "RecordSaveError",
    "RunDirectory",
    "RunLockedError",
    "RunManifest",
    "RunStopped",
    "SaveFailedWarning",
    "finite_or_null",
    "json_text",
]

MANIFEST_NAME = "nxrs-run.json"
LOCK_NAME = ".nxrs-run.lock"
#: The lease object of a run directory on object storage (``_lease``), its lock.
LEASE_NAME = ".nxrs-run.lease"
PREVIOUS_NAME = "previous"
MANIFEST_FORMAT = "nxrs-run/1"
_MANIFEST_TEMP = temporary_prefix(MANIFEST_NAME)


class RunLockedError(NxrsError):
    """Another live process holds the run directory's lock."""


class ManifestError(MismatchError):
    """The run directory's manifest is not a valid nxrs run manifest: not JSON, another format,
    or a field missing or of the wrong type (``MANIFEST_SCHEMA``).

    A ``MismatchError``: ``fit`` refuses to resume such a directory as it refuses one holding
    another run (``nxrs train`` exit 3; ``resume=False`` / ``--restart`` moves it aside), and
    ``nxrs status`` reports it in one line (exit 1).
    """


class CheckpointSaveError(OSError):
    """A checkpoint that had to be written (at the end of a run, or when stopping on a signal)
    could not be: the newest valid checkpoint in the directory is the previous one."""


class RecordSaveError(CheckpointSaveError):
    """A run ended (complete, or stopped by a signal) with its transcript or its manifest not
    written: its checkpoints are saved, but the records that describe them and make the run
    verifiable are not (a disk full, the store unreachable). The message says which entries or
    which manifest state are missing. A CheckpointSaveError (``nxrs train`` exit 5): running the
    same command again, once they can be written, writes them (a resume records every
    checkpoint its transcript lacks)."""


class SaveFailedWarning(UserWarning):
    """A periodic checkpoint (or a manifest update) could not be written; training goes on and
    the next save point tries again. The previous checkpoint is intact."""


class RunStopped(KeyboardInterrupt):
    """``fit`` stopped on SIGINT or SIGTERM after saving a checkpoint of the step it reached.

    A ``KeyboardInterrupt``, so code that handles Ctrl-C handles it. ``signal`` is the signal's
    number, ``step`` the step saved and ``checkpoint`` the file (None without a checkpoint).
    """

    def __init__(self, signum: int, step: int, checkpoint: Path | None) -> None:
        name = signal.Signals(signum).name
        where = f"saved {checkpoint}" if checkpoint is not None else "no checkpoint configured"
        super().__init__(f"stopped by {name} at step {step}; {where}")
        self.signal = signum
        self.step = step
        self.checkpoint = checkpoint


def now() -> str:
    """The current UTC time, ISO 8601 to the millisecond."""
    t = datetime.datetime.now(datetime.timezone.utc)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _host() -> str:
    return socket.gethostname()


# ---------------------------------------------------------------------- the manifest's schema

#: What is wrong with a JSON value, or None when it fits (the path names it in the message).
Check = Callable[[Any, str], Optional[str]]


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, bool):
        return names[bool]
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    return names.get(type(value), type(value).__name__)


def _is(expected: str, test: Callable[[Any], bool]) -> Check:
    def check(value: Any, path: str) -> str | None:
        return None if test(value) else f"{path} is {_kind(value)}, not {expected}"

    return check


_STRING = _is("a string", lambda v: isinstance(v, str))
_BOOLEAN = _is("a boolean", lambda v: isinstance(v, bool))
_INTEGER = _is("an integer", lambda v: is_count(v, minimum=None))
_COUNT = _is("an integer >= 0", is_count)
_OBJECT = _is("an object", lambda v: isinstance(v, dict))
_KEEP = _is("'all' or an integer >= 1", lambda v: v == "all" or is_count(v, minimum=1))


def _nullable(check: Check) -> Check:
    return lambda value, path: None if value is None else check(value, path)


def _one_of(*choices: str) -> Check:
    return _is(" or ".join(repr(c) for c in choices), lambda v: v in choices)


def _array(item: Check) -> Check:
    def check(value: Any, path: str) -> str | None:
        if not isinstance(value, list):
            return f"{path} is {_kind(value)}, not an array"
        return next((e for k, v in enumerate(value) if (e := item(v, f"{path}[{k}]"))), None)

    return check


def _counts() -> Check:
    """An object of counts (``events_omitted``: event kind -> how many)."""

    def check(value: Any, path: str) -> str | None:
        if not isinstance(value, dict):
            return f"{path} is {_kind(value)}, not an object"
        return next((e for k, v in value.items() if (e := _COUNT(v, f"{path}.{k}"))), None)

    return check


def _record(required: dict[str, Check], optional: dict[str, Check] | None = None) -> Check:
    """An object with the ``required`` keys and maybe the ``optional`` ones, each checked; other
    keys are allowed (a later nxrs may add some)."""
    optional = optional or {}

    def check(value: Any, path: str) -> str | None:
        if not isinstance(value, dict):
            return f"{path} is {_kind(value)}, not an object"
        for key, item in required.items():
            if key not in value:
                return f"{path} has no key {key!r}"
            if (error := item(value[key], f"{path}.{key}")) is not None:
                return error
        for key, item in optional.items():
            if key in value and (error := item(value[key], f"{path}.{key}")) is not None:
                return error
        return None

    return check


#: One history entry (``event``): what happened, when, where, at which step, and the details of
#: its kind.
EVENT_SCHEMA = _record(
    {
        "event": _STRING,
        "time": _STRING,
        "step": _COUNT,
        "epoch": _COUNT,
        "batch": _COUNT,
        "pid": _INTEGER,
        "host": _STRING,
    },
    {
        "reason": _STRING,
        "checkpoint": _STRING,
        "previous_end": _STRING,
        "moved_aside": _STRING,
        "error": _STRING,
        "resume": _BOOLEAN,
        "saved": _BOOLEAN,
    },
)

#: The manifest (``docs/RUNS.md``), checked by ``RunDirectory.read_manifest`` wherever one is
#: read (``fit`` resuming, ``nxrs status``), so no reader meets a field of another type.
MANIFEST_SCHEMA = _record(
    {
        "format": _one_of(MANIFEST_FORMAT),
        "nxrs_version": _STRING,
        "started": _STRING,
        "updated": _nullable(_STRING),
        "state": _one_of("running", "stopped", "complete", "failed"),
        "config": _OBJECT,
        "data": _record({"fingerprint": _STRING, "samples": _COUNT}),
        "plan": _record({"epochs": _COUNT, "steps_per_epoch": _COUNT, "steps": _COUNT}),
        "progress": _nullable(
            _record(
                {
                    "step": _COUNT,
                    "epoch": _COUNT,
                    "batch": _COUNT,
                    "checkpoint": _STRING,
                    "saved": _STRING,
                }
            )
        ),
        "events": _array(EVENT_SCHEMA),
    },
    {"command": _array(_STRING), "cwd": _STRING, "events_omitted": _counts(), "keep": _KEEP},
)

#: The history a manifest keeps: the run's first event and the newest ``EVENTS_KEPT``; the
#: ones dropped between them are counted by kind in ``events_omitted``. (A run resumed many
#: times would otherwise grow its manifest, rewritten at every save, without bound.)
EVENTS_KEPT = 100


class RunDirectory:
    """The manifest and lock of one run directory (the checkpoints are a manager's)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.manifest_path = self.directory / MANIFEST_NAME
        self.lock_path = self.directory / LOCK_NAME
        self._lock: IO[str] | None = None

    # ------------------------------------------------------------------ lock

    def acquire(
        self, say: Callable[[str], None] | None = None, stop: StopFlag | None = None
    ) -> None:
        """Takes the directory's lock (creating the directory); RunLockedError if another
        process holds it. Then removes the manifest's and the transcript's temporary files left by
        killed writers. (``say`` and ``stop`` are for a lease on object storage, which may be
        waited for: a lock is released when its holder dies, so there is nothing to wait for.)"""
        import fcntl

        self.directory.mkdir(parents=True, exist_ok=True)
        f = open(self.lock_path, "a+", encoding="utf-8")  # noqa: SIM115 (held until release)
        try:
            # A few tries: ``holder()`` (nxrs status) takes a shared lock for an instant.
            for attempt in range(10):
                try:
                    fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if attempt == 9:
                        raise
                    time.sleep(0.02)
        except OSError as err:
            f.seek(0)
            holder = f.read().strip() or "another process"
            f.close()
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunLockedError(
                    f"{self.directory} is in use by {holder}: one run per directory (wait for "
                    "it to stop, or stop it; a killed process's lock is released by the system)"
                ) from None
            raise
        f.seek(0)
        f.truncate()
        f.write(f"process {os.getpid()} on {_host()} since {now()}\n")
        f.flush()
        self._lock = f
        for child in self.directory.iterdir():
            if child.name.startswith((_MANIFEST_TEMP, TRANSCRIPT_TEMP)):
                child.unlink(missing_ok=True)

    def release(self) -> None:
        """Releases the lock (closing the file releases it)."""
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def holder(self) -> str | None:
        """Who holds the lock now (its file's line), or None when nobody does."""
        import fcntl

        if not self.lock_path.is_file():
            return None
        with open(self.lock_path, encoding="utf-8") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return f.read().strip() or "another process"
            return None

    # ------------------------------------------------------------------ manifest

    def read_manifest(self) -> dict[str, Any] | None:
        """The manifest, checked against ``MANIFEST_SCHEMA``, or None when the directory has
        none. ManifestError (a MismatchError) when it is not a valid manifest."""
        data = self._manifest_bytes()
        if data is None:
            return None
        try:
            manifest = json.loads(data)
        except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
            self._refuse(f"not a JSON document: {err}")
        if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
            self._refuse(f"not an nxrs run manifest ({MANIFEST_FORMAT})")
        error = MANIFEST_SCHEMA(manifest, "manifest")
        if error is not None:
            self._refuse(f"not a valid nxrs run manifest: {error}")
        return manifest

    def _refuse(self, why: str) -> NoReturn:
        raise ManifestError(
            f"{self.manifest_path}: {why}; restart to move the directory's run aside "
            "(resume=False, nxrs train --restart) or use another directory"
        )

    def _manifest_bytes(self) -> bytes | None:
        """The manifest's bytes, or None when there is none."""
        try:
            return self.manifest_path.read_bytes()
        except FileNotFoundError:
            return None

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        manifest["updated"] = now()
        write_json_atomically(self.manifest_path, manifest)

    def check(self) -> None:
        """Raises if this process no longer holds the directory (a lease lost on a store;
        never for a local directory, whose lock the kernel keeps until the process ends)."""

    def exists(self) -> bool:
        return self.directory.is_dir()

    def transcript(self) -> Transcript:
        """The run's transcript, read and written where the directory is."""
        return Transcript(self.directory)

    def temporary_files(self) -> list[str]:
        """The temporary files of interrupted writes in the directory (``nxrs status``)."""
        return sorted(
            c.name
            for c in self.directory.iterdir()
            if ".nxck-tmp." in c.name or c.name.startswith((_MANIFEST_TEMP, TRANSCRIPT_TEMP))
        )

    def move_aside(self, names: list[str]) -> str | None:
        """Moves the files ``names`` (those that exist) and the manifest into
        ``previous/<UTC time>/``; returns that folder relative to the directory (None when
        there was nothing to move)."""
        files = [self.directory / n for n in names if (self.directory / n).exists()]
        if self.manifest_path.exists():
            files.append(self.manifest_path)
        if not files:
            return None
        stamp = now().replace(":", "").replace("-", "")
        folder = f"{PREVIOUS_NAME}/{stamp}"
        k = 1
        while (self.directory / folder).exists():
            k += 1
            folder = f"{PREVIOUS_NAME}/{stamp}-{k}"
        target = self.directory / folder
        target.mkdir(parents=True)
        for p in files:
            os.replace(p, target / p.name)
        fsync_path(target)
        fsync_path(self.directory)
        return folder


class ObjectRunDirectory(RunDirectory):
    """A run directory on object storage (``s3://...``, ``gs://...``): the same manifest and
    transcript as objects, a lease (``_lease.Lease``) for the lock, and the manifest written
    on the condition of the version this process last read or wrote, so a process that lost the
    directory cannot overwrite its successor's manifest (``docs/RUNS.md``)."""

    def __init__(self, url: str) -> None:
        from nxrs._store import open_store

        self.store = open_store(url)
        self.directory = self.store.url  # type: ignore[assignment]  # a URL, not a Path
        self.manifest_path = self.store.url_of(MANIFEST_NAME)  # type: ignore[assignment]
        self.lock_path = self.store.url_of(LEASE_NAME)  # type: ignore[assignment]
        self._lock = None
        self._lease: Any = None
        #: The manifest's version this process read or wrote (None: there is none yet).
        self._manifest_etag: str | None = None

    def acquire(
        self, say: Callable[[str], None] | None = None, stop: StopFlag | None = None
    ) -> None:
        """Takes the directory's lease, waiting while its holder is not seen renewing it
        (``Lease.acquire``: RunLockedError while a live process holds it), then aborts multipart
        uploads left under it (nxrs writes none; a killed tool's would keep their parts)."""
        from nxrs._lease import Lease

        lease = Lease(self.store, f"process {os.getpid()} on {_host()} since {now()}")
        lease.acquire(say, stop)
        self._lease = lease
        self.store.abort_uploads()

    def release(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def holder(self) -> str | None:
        from nxrs._lease import lease_holder

        return lease_holder(self.store)

    def check(self) -> None:
        if self._lease is not None:
            self._lease.check()

    def exists(self) -> bool:
        return self.store.exists()

    def transcript(self) -> Transcript:
        return Transcript(self.store.url, self.store, self._lease)

    def temporary_files(self) -> list[str]:
        return []  # every object is written whole by one PUT: there are no partial ones

    def _manifest_bytes(self) -> bytes | None:
        found = self.store.get(MANIFEST_NAME)
        self._manifest_etag = None if found is None else found.version
        return None if found is None else found.data

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        from nxrs._lease import LeaseLostError

        if self._lease is None:
            raise LeaseLostError(f"{self.store}: this process does not hold the run's lease")
        manifest["updated"] = now()
        data = (json_text(manifest, indent=1) + "\n").encode()
        self._manifest_etag = self._lease.write(MANIFEST_NAME, data, self._manifest_etag)

    def move_aside(self, names: list[str]) -> str | None:
        """As a local directory's: the objects are copied into ``previous/<UTC time>/`` on the
        store, then deleted (the manifest last, so a kill midway leaves the run in place with
        its copy aside, and a second restart moves it again)."""
        present = {o.name for o in self.store.listing()}
        moving = [n for n in names if n in present]
        if MANIFEST_NAME in present:
            moving.append(MANIFEST_NAME)
        if not moving:
            return None
        stamp = now().replace(":", "").replace("-", "")
        folder, k = stamp, 1
        while self.store.listing(f"{PREVIOUS_NAME}/{folder}"):
            k += 1
            folder = f"{stamp}-{k}"
        for name in moving:
            self.store.copy(name, f"{PREVIOUS_NAME}/{folder}/{name}")
        for name in moving:
            self.store.delete(name)
        self._manifest_etag = None
        return f"{PREVIOUS_NAME}/{folder}"


def open_run_directory(location: str | os.PathLike[str]) -> RunDirectory:
    """The run directory at ``location``: a local path, or a URL on object storage."""
    from nxrs._store import is_url

    return ObjectRunDirectory(str(location)) if is_url(location) else RunDirectory(location)


def event(kind: str, trainer: Any, **details: Any) -> dict[str, Any]:
    """A manifest history entry: what happened, when, where, at which step."""
    entry: dict[str, Any] = {
        "event": kind,
        "time": now(),
        "step": trainer.steps,
        "epoch": trainer.epoch,
        "batch": trainer.batch,
        "pid": os.getpid(),
        "host": _host(),
    }
    entry.update({k: v for k, v in details.items() if v is not None})
    return entry


class RunManifest:
    """The manifest of a run directory (``docs/RUNS.md``): made when a run starts, updated when
    it resumes, saves, stops and ends, and written crash-safely after every change. ``fit``
    keeps one for the run it trains; ``read`` gives one back, checked against
    ``MANIFEST_SCHEMA``. ``document`` is the JSON object itself."""

    def __init__(self, run: RunDirectory, document: dict[str, Any]) -> None:
        self.run = run
        self.document = document

    @classmethod
    def read(cls, run: RunDirectory) -> RunManifest | None:
        """The manifest of ``run``'s directory, or None when it has none; ManifestError (a
        MismatchError) when it is not a valid manifest."""
        document = run.read_manifest()
        return None if document is None else cls(run, document)

    @classmethod
    def new(
        cls, run: RunDirectory, config: Mapping[str, Any], fingerprint: str, samples: int
    ) -> RunManifest:
        """The manifest of a run starting now with ``config`` on data of ``fingerprint`` and
        ``samples`` (not written yet: ``begin`` then ``write``)."""
        return cls(
            run,
            {
                "format": MANIFEST_FORMAT,
                "nxrs_version": __version__,
                "started": now(),
                "updated": None,
                "state": "running",
                "config": dict(config),
                "data": {"fingerprint": fingerprint, "samples": samples},
                "plan": {},
                "progress": None,
                "events": [],
                # Nothing pruned yet; ``begin`` lowers it to the count a process keeps.
                "keep": "all",
            },
        )

    def begin(
        self,
        *,
        epochs: int,
        steps_per_epoch: int,
        command: list[str] | None,
        source: Mapping[str, Any] | None,
        keep: int | None = 3,
    ) -> None:
        """Records that this nxrs runs the run now, towards ``epochs`` epochs, started by
        ``command`` (when known) on data split from the file ``source`` (when known), keeping
        the newest ``keep`` checkpoints (None: every one)."""
        document = self.document
        # The fewest any process of the run kept, so "all" (nxrs verify then requires every
        # checkpoint) only while none pruned; a manifest of an nxrs that did not record it
        # stays without (unknown).
        kept = document.get("keep")
        if kept is not None and keep is not None:
            document["keep"] = keep if kept == "all" else min(kept, keep)
        document["nxrs_version"] = __version__
        document["state"] = "running"
        if command is not None:
            document["command"] = command
            # Where it ran: the command's relative paths (its --data) are relative to it.
            document["cwd"] = os.getcwd()
        if source is not None:
            # Recorded from now on, also in a run directory written by an older nxrs, which
            # recorded only the training split's fingerprint (still checked by fit).
            document["data"]["file"] = dict(source)
        document["plan"] = {
            "epochs": epochs,
            "steps_per_epoch": steps_per_epoch,
            "steps": epochs * steps_per_epoch,
        }

    def describe_end(self) -> str:
        """How the previous process in this directory ended."""
        state = self.document.get("state")
        events = self.document.get("events") or [{}]
        last = events[-1]
        if state == "stopped":
            return f"stopped ({last.get('reason', 'signal')})"
        if state == "complete":
            return "complete"
        if state == "failed":
            return f"failed ({last.get('error', 'error')})"
        return "unclean (no stop recorded: killed or crashed)"

    def checkpointed(
        self,
        trainer: SavedStateLike,
        checkpoint: Path,
        stored: tuple[int, str] | None = None,
    ) -> None:
        """Records ``checkpoint`` as the newest holding the run's state (``trainer``'s); on
        object storage with the object's ``stored`` size and SHA-256 (``bytes``, ``sha256``),
        checked when it was uploaded, before this refers to it."""
        self.document["progress"] = {
            "step": trainer.steps,
            "epoch": trainer.epoch,
            "batch": trainer.batch,
            "checkpoint": checkpoint.name,
            "saved": now(),
        }
        if stored is not None:
            self.document["progress"].update(bytes=stored[0], sha256=stored[1])

    def add_event(self, entry: dict[str, Any]) -> None:
        """Appends ``entry`` (``event``) to the history, keeping it to the first event and the
        newest ``EVENTS_KEPT`` (the others counted in ``events_omitted``)."""
        events: list[dict[str, Any]] = self.document["events"]
        events.append(entry)
        while len(events) > EVENTS_KEPT + 1:
            dropped = events.pop(1)
            omitted: dict[str, int] = self.document.setdefault("events_omitted", {})
            omitted[dropped["event"]] = omitted.get(dropped["event"], 0) + 1

    def write(self) -> None:
        """Writes the manifest (its ``updated`` time set now), crash-safely."""
        self.run.write_manifest(self.document)

    def record(self, entry: dict[str, Any] | None, state: str | None = None) -> None:
        """Adds ``entry`` to the history, sets ``state``, and writes the manifest; a failure to
        write is a warning (SaveFailedWarning), not an error: training goes on, and the next
        ``record`` writes the manifest whole again."""
        if entry is not None:
            self.add_event(entry)
        if state is not None:
            self.document["state"] = state
        try:
            self.write()
        except OSError as err:
            warn_save_failed(
                f"the run manifest {self.run.manifest_path} was not updated: {err}; it is kept "
                "in memory and written at the next save"
            )


def warn_save_failed(message: str) -> None:
    warnings.warn(message, SaveFailedWarning, stacklevel=3)


def stderr_line(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- nxrs status


def run_status(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """What ``nxrs status`` reports: the manifest, every checkpoint file with the validity of
    the newest ones (read newest first until one validates), the lock, what the records lack
    (``records_missing``), and ``ok`` (False when the newest checkpoint is damaged, the
    directory holds no run, or the records lack its newest valid checkpoint)."""
    from nxrs._manager import CheckpointManager
    from nxrs._trainer import Trainer

    run = open_run_directory(directory)
    if not run.exists():
        raise FileNotFoundError(errno.ENOENT, "no such directory", str(run.directory))
    manifest = run.read_manifest()
    if isinstance(run, ObjectRunDirectory):
        # A store's listing; the newest checkpoints are read from the local cache (downloaded
        # into it when it does not hold them).
        manager = CheckpointManager(run.directory)
        entries, local_copy = manager.list(), manager._local_copy
    else:
        # Listed as a CheckpointManager lists them, without making one: its constructor sweeps
        # temporary files, and status only looks.
        entries, local_copy = list_checkpoints(run.directory), lambda entry: entry.path
    checkpoints: list[dict[str, Any]] = []
    resumable = None
    for entry in reversed(entries):
        step, path = entry.step, entry.path
        row: dict[str, Any] = {"file": path.name, "step": step, "bytes": None}
        if resumable is None:
            try:
                path = local_copy(entry)
                row["bytes"] = path.stat().st_size
                t = Trainer.load(path)
                row.update(valid=True, epoch=t.epoch, batch=t.batch, error=None)
                resumable = path.name
            except (OSError, NxrsError) as err:
                row.update(valid=False, error=f"{type(err).__name__}: {err}")
        else:
            row["valid"] = None  # not checked: an older file than the one a resume would use
        checkpoints.append(row)
    temporary = run.temporary_files()
    newest_ok = not checkpoints or checkpoints[0]["valid"] is True
    plan = (manifest or {}).get("plan") or {}
    progress = (manifest or {}).get("progress") or None
    done = None
    if resumable is not None:
        done = next(c for c in checkpoints if c["file"] == resumable)
    percent = None
    beyond = False
    if done is not None and plan.get("steps"):
        # The plan is the newest invocation's (its --epochs); a resume asking for fewer epochs
        # than the run had reached trains nothing, and the run is past that plan, not at 200%.
        beyond = done["step"] > plan["steps"]
        percent = 100.0 if beyond else round(100 * done["step"] / plan["steps"], 1)
    running = run.holder()
    transcript = _transcript_summary(run.transcript())
    # A running process may be between a checkpoint and its records: only a run no process
    # holds is judged.
    missing = [] if running is not None else _records_missing(manifest, transcript, done)
    return {
        "directory": str(run.directory),
        "manifest": manifest,
        "running": running,
        "checkpoints": checkpoints,
        "resume_from": resumable,
        "resume_step": None if done is None else done["step"],
        "resume_epoch": None if done is None else done.get("epoch"),
        "percent": percent,
        "beyond_plan": beyond,
        "progress": progress,
        "temporary_files": temporary,
        "transcript": transcript,
        "records_missing": missing,
        "ok": manifest is not None and newest_ok and not missing,
    }


def _records_missing(
    manifest: dict[str, Any] | None,
    transcript: dict[str, Any] | None,
    newest: dict[str, Any] | None,
) -> list[str]:
    """What the run's records (its transcript, its manifest) lack of its newest valid
    checkpoint ``newest`` (``run_status``'s row): written by a process that could not write
    them (a disk full, a store unreachable: it ended with exit 5) or killed between the
    checkpoint and them. Resuming the run writes them."""
    if newest is None:
        return []
    name, step = newest["file"], newest["step"]
    missing = []
    if transcript is None:
        missing.append(f"the transcript {TRANSCRIPT_NAME} is missing")
    elif transcript["error"] is None and not (
        isinstance(transcript["last_step"], int) and transcript["last_step"] >= step
    ):
        missing.append(
            f"the transcript has no entry for {name} (its last entry is of step "
            f"{transcript['last_step']})"
        )
    progress = (manifest or {}).get("progress")
    if manifest is not None and (progress is None or progress["step"] < step):
        recorded = "none" if progress is None else progress["checkpoint"]
        missing.append(f"the manifest does not record {name} (its newest checkpoint: {recorded})")
    return missing


def _transcript_summary(transcript: Transcript) -> dict[str, Any] | None:
    """The transcript's size and newest entry for ``nxrs status`` (None when there is none;
    ``error`` when it cannot be read). Its chain is ``nxrs verify``'s to check."""
    if not transcript.exists():
        return None
    try:
        entries = transcript.read()
    except (OSError, ValueError) as err:
        return {"entries": None, "torn_bytes": None, "error": str(err)}
    last = entries[-1] if entries else {}
    return {
        "entries": len(entries),
        "last_step": last.get("step"),
        "last_state_digest": last.get("state_digest"),
        "torn_bytes": transcript.torn,
        "error": None,
    }
