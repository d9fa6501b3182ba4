"""The lease of a run directory on object storage: what ``flock`` is for a local one (one writer),
for a store that has no locks (``docs/RUNS.md``, "Run directories on object storage").

The lease is the object ``.nxrs-run.lease``: a small JSON document naming its holder, a random
token, and how long it lasts without renewal (``seconds``). Rules:

- **Taking it.** Absent: created with ``If-None-Match: *``. Present: free when released (its
  ``released`` is true) or expired, i.e. the store's ``Date`` is more than ``seconds`` after the
  object's ``Last-Modified`` (both the store's clock: no machine's clock is trusted); then
  replaced with ``If-Match`` on the ETag read. Of two processes racing, exactly one condition
  holds; the other gets RunLockedError.
- **Keeping it.** The holder rewrites it with ``If-Match`` every ``seconds / 3`` from a
  background thread. A failed condition means another process took it over (after this one
  failed to renew for ``seconds``: paused, partitioned): the lease is lost, and the training
  thread stops at its next step boundary without writing anything more (``check``).
- **Giving it back.** Rewritten as released, with ``If-Match``.

A machine that is lost stops renewing, so its lease blocks a successor for at most ``seconds``
(``NXRS_LEASE_SECONDS``, default 60).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import threading
from typing import Any

from nxrs._nxrs import ConfigError
from nxrs._rundir import LEASE_NAME, RunLockedError
from nxrs._store import Conflict, ObjectDirectory

__all__ = ["Lease", "LeaseLostError", "lease_holder", "lease_seconds", "write_unchanged"]

#: How long a lease lasts without renewal when ``NXRS_LEASE_SECONDS`` is not set.
DEFAULT_LEASE_SECONDS = 60.0


class LeaseLostError(RunLockedError):
    """This process's lease on a run directory was taken over by another process (it could not
    renew it in time): it stopped without writing anything more. A RunLockedError: the
    directory is another process's now (``nxrs train`` exit 4)."""


def lease_seconds() -> float:
    """The lease's duration: ``NXRS_LEASE_SECONDS`` (a number of seconds, at least 1), or 60."""
    text = os.environ.get("NXRS_LEASE_SECONDS")
    if text is None:
        return DEFAULT_LEASE_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds >= 1 or seconds == float("inf"):
        raise ConfigError(f"NXRS_LEASE_SECONDS must be a number of seconds >= 1, not {text!r}")
    return seconds


class Lease:
    """The lease of the directory ``store`` for this process (``acquire``, ``release``)."""

    def __init__(self, store: ObjectDirectory, holder: str) -> None:
        self.store = store
        self.holder = holder
        self.seconds = lease_seconds()
        self.token = secrets.token_hex(16)
        self.etag: str | None = None
        #: Set when the lease was lost (a renewal's condition failed); ``check`` raises then.
        self.lost = threading.Event()
        self._why_lost = ""
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._lock = threading.Lock()

    def _document(self, released: bool = False) -> bytes:
        return json.dumps(
            {
                "holder": self.holder,
                "token": self.token,
                "seconds": self.seconds,
                "released": released,
            }
        ).encode()

    def acquire(self) -> None:
        """Takes the lease, or raises RunLockedError naming its live holder."""
        clock = self.store.clock(LEASE_NAME)
        try:
            if clock is None:
                self.etag = self.store.put(LEASE_NAME, self._document(), if_absent=True)
            else:
                store_now, modified, etag = clock
                current = read_lease(self.store)
                age = (store_now - modified).total_seconds()
                if current is not None and not current.get("released") and age <= _seconds(current):
                    raise RunLockedError(_in_use(self.store, current, age))
                self.etag = self.store.put(LEASE_NAME, self._document(), if_match=etag)
        except Conflict:
            # Another process wrote the lease between our read and write (or a retried
            # request of ours succeeded twice: then the token is ours).
            current = read_lease(self.store)
            if current is None or current.get("token") != self.token:
                raise RunLockedError(_in_use(self.store, current, 0.0)) from None
            found = self.store.clock(LEASE_NAME)
            self.etag = None if found is None else found[2]
        self._renewer = threading.Thread(target=self._renew_loop, name="nxrs-lease", daemon=True)
        self._renewer.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            try:
                self.renew()
            except Conflict:
                self._why_lost = "another process took the lease over"
                self.lost.set()
                return
            except OSError:
                # The store unreachable for a moment: the next renewal tries again; the lease
                # is lost only if another process takes it over meanwhile.
                continue

    def renew(self) -> None:
        """Rewrites the lease (``If-Match``), restarting its time; Conflict when it was taken."""
        with self._lock:
            if self.etag is None or self.lost.is_set():
                raise Conflict("the lease is not held")
            self.etag = self.store.put(LEASE_NAME, self._document(), if_match=self.etag)

    def check(self) -> None:
        """LeaseLostError if the lease was lost; training must stop without writing."""
        if self.lost.is_set():
            raise LeaseLostError(
                f"{self.store}: this process lost its lease on the run directory "
                f"({self._why_lost}); it stopped without writing anything more"
            )

    def release(self) -> None:
        """Stops renewing and gives the lease back (if still ours)."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
            self._renewer = None
        with self._lock:
            if self.etag is not None and not self.lost.is_set():
                # Taken over, or the store unreachable: then it expires by itself.
                with contextlib.suppress(Conflict, OSError):
                    self.store.put(LEASE_NAME, self._document(released=True), if_match=self.etag)
            self.etag = None


def write_unchanged(store: ObjectDirectory, name: str, data: bytes, version: str | None) -> str:
    """Writes the object ``name`` on the condition that it is still ``version`` (the ETag this
    process last read or wrote; None: absent), and returns its new version. The manifest and
    the transcript are written so: a process that lost the lease cannot overwrite its
    successor's (LeaseLostError, naming the object)."""
    try:
        if version is None:
            return store.put(name, data, if_absent=True)
        return store.put(name, data, if_match=version)
    except Conflict:
        raise LeaseLostError(
            f"{store.url_of(name)} was changed by another process since this one wrote it: the "
            "run directory is no longer this process's; it stopped without writing more"
        ) from None


def read_lease(store: ObjectDirectory) -> dict[str, Any] | None:
    """The lease document, or None when absent or not a JSON object (a damaged lease is
    treated as absent: it names no holder to wait for)."""
    found = store.get(LEASE_NAME)
    if found is None:
        return None
    try:
        document = json.loads(found.data)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def lease_holder(store: ObjectDirectory) -> str | None:
    """Who holds the lease now (its ``holder``), or None when nobody does (absent, released
    or expired)."""
    clock = store.clock(LEASE_NAME)
    document = read_lease(store)
    if clock is None or document is None or document.get("released"):
        return None
    store_now, modified, _ = clock
    if (store_now - modified).total_seconds() > _seconds(document):
        return None
    return str(document.get("holder", "another process"))


def _seconds(document: dict[str, Any]) -> float:
    seconds = document.get("seconds")
    return float(seconds) if isinstance(seconds, (int, float)) else DEFAULT_LEASE_SECONDS


def _in_use(store: ObjectDirectory, document: dict[str, Any] | None, age: float) -> str:
    holder = "another process" if document is None else document.get("holder", "another process")
    left = max(0.0, _seconds(document or {}) - age)
    return (
        f"{store} is in use by {holder}: one run per directory (its lease expires {left:.0f} s "
        "after its holder stops renewing it; wait for it, or stop that process)"
    )
