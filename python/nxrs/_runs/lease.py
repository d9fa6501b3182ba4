"""The lease of a run directory on object storage: what ``flock`` is for a local one (one writer),
for a store that has no locks (``docs/RUNS.md``, "Run directories on object storage").

The lease is the object ``.nxrs-run.lease``: a small JSON document naming its holder, a random
token, how long it lasts without renewal (``seconds``) and how often it was renewed (so that
every renewal changes its bytes, and so its version on every store). Rules:

- **Taking it.** Absent: created with ``If-None-Match: *``. Present: free when released (its
  ``released`` is true) or expired, i.e. the store's ``Date`` is more than ``seconds`` after the
  object's ``Last-Modified`` (both the store's clock: no machine's clock is trusted); then
  replaced with ``If-Match`` on the ETag read. Of two processes racing, exactly one condition
  holds; the other gets RunLockedError.
- **Waiting for it.** Held, neither released nor expired: the process watches it until it
  expires (then takes it, as above) or its holder is seen renewing it (RunLockedError), saying
  so in one line. A holder killed a moment ago (a restarted spot machine, a supervisor's
  restart) thus blocks a successor for at most ``seconds``, and never makes it fail.
- **Keeping it.** The holder rewrites it with ``If-Match`` every ``seconds / 3`` from a
  background thread. A failed condition means another process took it over (after this one
  failed to renew for ``seconds``: paused, partitioned): the lease is lost, and the training
  thread stops at its next step boundary without writing anything more (``check``).
- **Writing under it.** The manifest and the transcript are written only by ``write`` and
  ``delete``: each first makes sure the lease was renewed within the last ``seconds / 2`` (by
  this process's clock, renewing it now if not), so no other process can have taken it over
  before the write reaches the store; the write itself is conditional on the version this
  process last read or wrote. When that condition fails (a process that lost the lease wrote
  late, or another tool changed or deleted the object), this process, having renewed the
  lease, writes its own record over what is there now: its records in memory are the run's.
- **Giving it back.** Rewritten as released, with ``If-Match``.

A machine that is lost stops renewing, so its lease blocks a successor for at most ``seconds``
(``NXRS_LEASE_SECONDS``, default 60).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from nxrs._nxrs import ConfigError
from nxrs._runs.errors import LEASE_NAME, RunLockedError
from nxrs._storage.store import Conflict, ObjectDirectory
from nxrs._util.signals import StopFlag

__all__ = ["Lease", "LeaseLostError", "lease_holder", "lease_seconds"]

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
    """The lease of the directory ``store`` for this process (``acquire``, ``release``), and
    the writes made under it (``write``, ``delete``)."""

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
        #: How many times this process wrote the lease: every write's bytes differ.
        self._renewals = 0
        #: ``time.monotonic()`` just before the request that last took or renewed the lease.
        self._renewed_at = float("-inf")

    def _document(self, released: bool = False) -> bytes:
        self._renewals += 1
        return json.dumps(
            {
                "holder": self.holder,
                "token": self.token,
                "seconds": self.seconds,
                "released": released,
                "renewals": self._renewals,
            }
        ).encode()

    def acquire(
        self, say: Callable[[str], None] | None = None, stop: StopFlag | None = None
    ) -> None:
        """Takes the lease, waiting (with one line to ``say``) while it is held by a process
        that is not seen renewing it, until it expires; RunLockedError when its holder is seen
        renewing it or writing it, or when ``stop`` is set (SIGINT, SIGTERM) meanwhile."""
        watched: tuple[datetime.datetime, str] | None = None
        while True:
            started = time.monotonic()
            clock = self.store.clock(LEASE_NAME)
            try:
                if clock is None:
                    self.etag = self.store.put(LEASE_NAME, self._document(), if_absent=True)
                    break
                store_now, modified, etag = clock
                current = read_lease(self.store)
                age = (store_now - modified).total_seconds()
                if current is None or current.get("released") or age > _seconds(current):
                    self.etag = self.store.put(LEASE_NAME, self._document(), if_match=etag)
                    break
            except Conflict:
                # Another process wrote the lease between our read and write (or a retried
                # request of ours succeeded twice: then the token is ours).
                current = read_lease(self.store)
                if current is None or current.get("token") != self.token:
                    raise RunLockedError(_in_use(self.store, current, 0.0)) from None
                found = self.store.clock(LEASE_NAME)
                self.etag = None if found is None else found[2]
                break
            # Held: by a live process, or by one killed a moment ago whose lease has not
            # expired yet. Only a renewal tells them apart.
            if watched is None:
                watched = (modified, etag)
                left = max(0.0, _seconds(current) - age)
                if say is not None:
                    say(
                        f"{self.store} is held by {_holder(current)}, whose lease was last "
                        f"renewed {age:.0f} s ago and expires in {left:.0f} s: waiting for it "
                        "(or for its holder to be seen renewing it)"
                    )
            elif (modified, etag) != watched:
                raise RunLockedError(_in_use(self.store, current, age, renewing=True))
            if stop is not None and stop.signum is not None:
                raise RunLockedError(
                    f"{self.store}: stopped waiting for the lease of {_holder(current)} "
                    f"({signal.Signals(stop.signum).name})"
                )
            time.sleep(min(1.0, _seconds(current) / 10))
        self._renewed_at = started
        self._renewer = threading.Thread(target=self._renew_loop, name="nxrs-lease", daemon=True)
        self._renewer.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            try:
                self.renew()
            except Conflict:
                self._lose()
                return
            except OSError:
                # The store unreachable for a moment: the next renewal tries again; the lease
                # is lost only if another process takes it over meanwhile.
                continue

    def _lose(self) -> None:
        self._why_lost = "another process took the lease over"
        self.lost.set()

    def renew(self) -> None:
        """Rewrites the lease (``If-Match``), restarting its time; Conflict when it was taken."""
        with self._lock:
            if self.etag is None or self.lost.is_set():
                raise Conflict("the lease is not held")
            started = time.monotonic()
            self.etag = self.store.put(LEASE_NAME, self._document(), if_match=self.etag)
            self._renewed_at = started

    def check(self) -> None:
        """LeaseLostError if the lease was lost; training must stop without writing."""
        if self.lost.is_set():
            raise LeaseLostError(
                f"{self.store}: this process lost its lease on the run directory "
                f"({self._why_lost}); it stopped without writing anything more"
            )

    def confirm(self, now: bool = False) -> None:
        """Makes sure this process holds the lease for at least ``seconds / 2`` more: renewed
        that recently (by this process's clock, from before the renewal's request), else (or
        ``now``) renewed now. LeaseLostError when it was taken over; OSError when the store
        cannot be reached (the write that asked fails, as any failed write)."""
        self.check()
        if not now and time.monotonic() - self._renewed_at < self.seconds / 2:
            return
        try:
            self.renew()
        except Conflict:
            self._lose()
            self.check()

    def write(self, name: str, data: bytes, version: str | None) -> str:
        """Writes the object ``name`` under the lease (``confirm``), on the condition that it is
        still ``version`` (the one this process last read or wrote; None: absent), and returns
        its new version. If the condition fails, the object was changed or deleted by another
        writer: a process that lost the lease, whose late write lost its race to this one's
        takeover, or another tool. This process then renews the lease (LeaseLostError if it
        was taken over) and writes over what is there now."""
        self.confirm()
        try:
            return self._put(name, data, version)
        except (Conflict, FileNotFoundError):
            pass
        self.confirm(now=True)
        try:
            return self._put(name, data, self.store.version(name))
        except (Conflict, FileNotFoundError):
            raise OSError(
                f"{self.store.url_of(name)} was changed again while this process wrote it: "
                "another process is writing it"
            ) from None

    def _put(self, name: str, data: bytes, version: str | None) -> str:
        if version is None:
            return self.store.put(name, data, if_absent=True)
        return self.store.put(name, data, if_match=version)

    def delete(self, name: str) -> None:
        """Deletes the object ``name`` under the lease (``confirm``)."""
        self.confirm()
        self.store.delete(name)

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


def _holder(document: dict[str, Any] | None) -> str:
    return str((document or {}).get("holder", "another process"))


def _in_use(
    store: ObjectDirectory, document: dict[str, Any] | None, age: float, renewing: bool = False
) -> str:
    left = max(0.0, _seconds(document or {}) - age)
    if renewing:
        return (
            f"{store} is in use by {_holder(document)}, seen renewing its lease: one run per "
            "directory (wait for it to stop, or stop that process)"
        )
    return (
        f"{store} is in use by {_holder(document)}: one run per directory (its lease expires "
        f"{left:.0f} s after its holder stops renewing it; wait for it, or stop that process)"
    )
