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

import errno
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, NoReturn

from nxrs._runs.errors import (
    _MANIFEST_TEMP,
    LEASE_NAME,
    LOCK_NAME,
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    PREVIOUS_NAME,
    ManifestError,
    RunLockedError,
    _host,
    now,
)
from nxrs._runs.manifest import MANIFEST_SCHEMA
from nxrs._runs.transcript import TRANSCRIPT_TEMP, Transcript
from nxrs._util.files import fsync_path, json_text, write_json_atomically
from nxrs._util.signals import StopFlag

__all__ = ["ObjectRunDirectory", "RunDirectory", "open_run_directory"]


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
    transcript as objects, a lease (``nxrs._runs.lease.Lease``) for the lock, and the manifest
    written on the condition of the version this process last read or wrote, so a process that
    lost the directory cannot overwrite its successor's manifest (``docs/RUNS.md``)."""

    def __init__(self, url: str) -> None:
        from nxrs._storage.store import open_store

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
        from nxrs._runs.lease import Lease

        lease = Lease(self.store, f"process {os.getpid()} on {_host()} since {now()}")
        lease.acquire(say, stop)
        self._lease = lease
        self.store.abort_uploads()

    def release(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def holder(self) -> str | None:
        from nxrs._runs.lease import lease_holder

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
        from nxrs._runs.lease import LeaseLostError

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
    from nxrs._storage.store import is_url

    return ObjectRunDirectory(str(location)) if is_url(location) else RunDirectory(location)
