"""Run directories on object storage: a directory named by a URL (``s3://bucket/run``,
``gs://bucket/run``, ``az://container/run``), its objects, and the conditional writes nxrs's
promises rest on there (``docs/RUNS.md``, "Run directories on object storage").

An object store has no rename, no append and no ``flock``. What replaces them:

- **Whole-object writes.** Every object nxrs writes (a checkpoint, the manifest, the transcript,
  the lease) is written by one request, which the store applies whole or not at all: a reader
  sees the complete old or the complete new object, never a part. A checkpoint's request
  carries its checksum (S3: SHA-256; GCS and Azure: MD5), which the store checks against the
  bytes it received and keeps; the object's size and checksum are read back before anything
  refers to it, and checked again whenever it is downloaded.
- **Conditional writes**, so that of two writers racing, one wins and the other learns it
  (``Conflict``): "only if absent" and "only if still the version read" (S3's and Azure's
  ``If-None-Match: *`` and ``If-Match: <ETag>``; GCS's ``ifGenerationMatch`` of 0 and of the
  generation read). An object's *version* is its ETag on S3 and Azure and its generation on
  GCS.
- **The store's clock** for leases: a lease is judged expired from its object's last
  modification time and the store's ``Date`` header, both the store's, so no machine's clock
  skew can shorten or stretch it.

Each backend is fsspec's (``s3fs``: the ``nxrs[s3]`` extra; ``gcsfs``: ``nxrs[gcs]``; ``adlfs``:
``nxrs[azure]``), which reads credentials and the endpoint as that cloud's own tools do; nxrs
stores none of them. Protocols without an implementation of these conditional writes
(``memory://``, ``hdfs://``, ...) are refused with a ConfigError rather than run without one
writer guaranteed.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import errno
import hashlib
import importlib
import os
import re
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from nxrs._nxrs import ConfigError

__all__ = [
    "Conflict",
    "Listed",
    "ObjectDirectory",
    "StoredObject",
    "has_scheme",
    "is_url",
    "open_store",
    "url_protocol",
]

T = TypeVar("T")

#: Text that starts with a scheme: a letter, then one or more letters, digits, "+", "-" or "."
#: (RFC 3986's scheme, less the one-letter ones: "C:" is a Windows drive), then a colon, all
#: before any "/" or backslash. Such text is a URL or a mistyped one, never a local path (as a
#: path, "s3:/bucket/run" would be the relative directory ./s3:/bucket/run); a local name with
#: a colon in its first component is written "./name:x", and "runs/a:b" is a path.
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):")
#: The URL of a directory on a store, after its scheme: "//", a bucket (or container), a path.
_URL = re.compile(r"[^:]+://[^/]+(/.*)?", re.DOTALL)

#: The backend of each protocol nxrs implements: its module and class, the fsspec package it
#: runs on, and the nxrs extra that installs that package.
_BACKENDS = {
    "s3": ("nxrs._storage.s3", "S3Directory", "s3fs", "s3"),
    "s3a": ("nxrs._storage.s3", "S3Directory", "s3fs", "s3"),
    "gs": ("nxrs._storage.gcs", "GCSDirectory", "gcsfs", "gcs"),
    "gcs": ("nxrs._storage.gcs", "GCSDirectory", "gcsfs", "gcs"),
    "az": ("nxrs._storage.azure", "AzureDirectory", "adlfs", "azure"),
    "abfs": ("nxrs._storage.azure", "AzureDirectory", "adlfs", "azure"),
    "abfss": ("nxrs._storage.azure", "AzureDirectory", "adlfs", "azure"),
}

#: The largest checkpoint nxrs writes as one object in one request (S3's largest single PUT;
#: GCS allows more in one request, but one limit for every store keeps a run directory
#: movable between them). No multipart or resumable uploads: a killed writer's parts would
#: stay behind.
MAX_OBJECT_BYTES = 5 * 2**30

#: Downloads and checksums read files in pieces of this size.
PIECE = 8 * 2**20


#: The run directory URLs nxrs takes, for messages.
URL_FORMS = (
    "s3://bucket/path (S3 and S3-compatible stores; also s3a://), gs://bucket/path (Google "
    "Cloud Storage; also gcs://) or az://container/path (Azure Blob Storage; also abfs://, "
    "abfss://)"
)


def has_scheme(text: str) -> bool:
    """Whether ``text`` starts with a scheme (``_SCHEME``: ``s3:``, ``file:``, not ``C:``),
    so that it is a URL or a mistyped one, and not a local path."""
    return _SCHEME.match(text) is not None


def url_protocol(location: object) -> str | None:
    """The protocol of ``location`` (lower case) when it is the URL of a directory on a store
    nxrs implements (``s3://bucket/run``: ``"s3"``); None when it is a local path: a path
    object, or text that does not start with a scheme (``has_scheme``). Text that starts with
    a scheme but is no such URL is a ConfigError naming the URLs nxrs takes: a mistyped one
    (``s3:/bucket/run``, ``s3://`` without a bucket), a ``file:`` URL (a local directory is
    given as its path), or a store nxrs has no conditional writes for (``memory://``).

    >>> url_protocol("S3://bucket/run"), url_protocol("runs/a:b"), url_protocol("C:/runs")
    ('s3', None, None)
    >>> url_protocol("s3:/bucket/run")  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    nxrs.ConfigError: ...
    """
    if not isinstance(location, str) or not has_scheme(location):
        return None
    protocol = location.split(":", 1)[0].lower()
    if protocol in _BACKENDS and _URL.fullmatch(location):
        return protocol
    if protocol == "file":
        why = (
            "a file: URL is not taken (nxrs keeps local paths and URLs apart); give the local "
            f"directory as a path: {urllib.parse.urlsplit(location).path or '/'}"
        )
    elif protocol in _BACKENDS:
        why = f"{protocol}: URLs are {protocol}://bucket/path, with two slashes and a bucket"
    else:
        why = (
            "run directories on object storage need conditional writes (for the lease and the "
            f"manifest), which nxrs does not implement for {protocol}: URLs"
        )
    raise ConfigError(
        f"{location!r} is not a location nxrs takes: {why}. Run directories on object storage "
        f"are {URL_FORMS}; a local path is written as one (./{location} for a relative path "
        "whose first name has a colon)"
    )


def is_url(location: object) -> bool:
    """Whether ``location`` names a directory on a store by URL (``s3://...``), not a local
    path; ConfigError for text that looks like a URL but is none nxrs takes (``url_protocol``).
    Every place that takes a run directory or a checkpoint's location asks this, so a mistyped
    URL is refused everywhere, never taken for a local directory."""
    return url_protocol(location) is not None


def open_store(url: str) -> ObjectDirectory:
    """The directory ``url`` on its store's backend; ConfigError for a URL nxrs does not take
    (``url_protocol``), or whose backend package is not installed.

    >>> open_store("memory://run")  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    nxrs.ConfigError: ...
    """
    protocol = url_protocol(url)
    if protocol is None:
        raise ConfigError(f"{url!r} is a local path, not a URL on object storage")
    module, name, package, extra = _BACKENDS[protocol]
    try:
        importlib.import_module(package)
    except ImportError:
        raise ConfigError(
            f"{url}: a {protocol}:// directory needs {package}: pip install 'nxrs[{extra}]'"
        ) from None
    backend: type[ObjectDirectory] = getattr(importlib.import_module(module), name)
    return backend(url)


class Conflict(Exception):
    """A conditional write's condition did not hold: the object exists (``if_absent``) or
    changed since it was read (``if_match``). Another process wrote it."""


@dataclass(frozen=True)
class StoredObject:
    """An object's bytes and the version they are."""

    data: bytes
    version: str


@dataclass(frozen=True)
class Listed:
    """An object of a listing: its name in the directory and its version."""

    name: str
    version: str


@dataclass(frozen=True)
class Reading:
    """An object being read: its pieces, the version they are, and the checksum the store
    keeps for them (base64, of the store's ``ObjectDirectory.checksum``; None when it keeps
    none)."""

    pieces: Iterator[bytes]
    version: str
    checksum: str | None


@dataclass(frozen=True)
class Held:
    """What the store holds under a name, as read back after an upload: its size, the
    checksum it keeps (base64; None if none) and its version."""

    size: int
    checksum: str | None
    version: str


def file_digests(path: Path, algorithms: tuple[str, ...]) -> dict[str, bytes]:
    """The digests (hashlib names) of a file, read once, in pieces."""
    digests = {name: hashlib.new(name) for name in algorithms}
    with open(path, "rb") as f:
        while piece := f.read(PIECE):
            for digest in digests.values():
                digest.update(piece)
    return {name: digest.digest() for name, digest in digests.items()}


def b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


class ObjectDirectory(ABC):
    """A directory on an object store, named by its URL: the objects directly under it.
    ``open_store`` picks the backend; each implements the requests below with the store's
    own API."""

    #: The checksum (a hashlib name) the store checks a checkpoint's upload against and keeps.
    checksum = "sha256"
    #: The largest object this store takes in one request (at most ``MAX_OBJECT_BYTES``).
    max_object_bytes = MAX_OBJECT_BYTES

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.bucket, _, prefix = self.url.split("://", 1)[1].partition("/")
        if not self.bucket:
            raise ConfigError(f"{url}: no bucket in the URL")
        self.prefix = f"{prefix}/" if prefix else ""

    def __str__(self) -> str:
        return self.url

    def url_of(self, name: str) -> str:
        """The URL of the object ``name`` of this directory."""
        return f"{self.url}/{name}"

    def key(self, name: str) -> str:
        """The store's name (key) of the object ``name`` of this directory."""
        return self.prefix + name

    # ------------------------------------------------------------------ small objects

    @abstractmethod
    def get(self, name: str) -> StoredObject | None:
        """The object ``name`` with its version, or None when there is none."""

    @abstractmethod
    def put(
        self, name: str, data: bytes, *, if_match: str | None = None, if_absent: bool = False
    ) -> str:
        """Writes the object ``name`` (one request) and returns its version: only if it is
        absent (``if_absent``) or still the version ``if_match``, else Conflict."""

    @abstractmethod
    def delete(self, name: str) -> None:
        """Deletes ``name`` (nothing when absent)."""

    @abstractmethod
    def version(self, name: str) -> str | None:
        """The version of the object ``name`` (one request), or None when there is none."""

    @abstractmethod
    def clock(self, name: str) -> tuple[datetime.datetime, datetime.datetime, str] | None:
        """The store's current time, the object's last modification time and its version
        (all from one request, so both times are the store's clock), or None when absent."""

    # ------------------------------------------------------------------ listings

    @abstractmethod
    def listing(self, under: str = "", prefix: str = "") -> list[Listed]:
        """The objects directly in this directory (or in its folder ``under``) whose names
        begin with ``prefix``, by name."""

    @abstractmethod
    def exists(self) -> bool:
        """Whether the directory holds any object (a store has no empty directories)."""

    @abstractmethod
    def copy(self, name: str, to: str) -> None:
        """A server-side copy of ``name`` to ``to`` (both in this directory)."""

    @abstractmethod
    def abort_uploads(self) -> None:
        """Ends the unfinished uploads left under this directory by another tool (nxrs
        starts none), where the store keeps and bills their parts."""

    # ------------------------------------------------------------------ checkpoints

    def upload(self, name: str, source: Path) -> tuple[int, str, str]:
        """Writes the file ``source`` as the object ``name`` in one request that carries its
        checksum (the store refuses bytes that do not match it), then reads the object's size
        and checksum back; returns the size, the file's SHA-256 (hex) and the object's
        version. OSError if the object is not exactly the file."""
        size = source.stat().st_size
        if size > self.max_object_bytes:
            raise OSError(
                f"{source} is {size} bytes, more than the {self.max_object_bytes} bytes of one "
                "request to this object store"
            )
        digests = file_digests(source, tuple({"sha256", self.checksum}))
        self._send(name, source, size, digests)
        held = self._held(name)
        expected = b64(digests[self.checksum])
        if held is None or held.size != size or held.checksum != expected:
            what = self.checksum.upper()
            holds = "nothing" if held is None else f"{held.size} bytes with {what} {held.checksum}"
            raise OSError(
                f"{self.url_of(name)}: the store holds {holds}, not the {size} bytes with "
                f"{what} {expected} written"
            )
        return size, digests["sha256"].hex(), held.version

    @abstractmethod
    def _send(self, name: str, source: Path, size: int, digests: dict[str, bytes]) -> None:
        """``upload``'s request: the file ``source`` (``size`` bytes, whose ``digests`` by
        hashlib name include the store's ``checksum``) as the object ``name``, with that
        checksum for the store to check."""

    @abstractmethod
    def _held(self, name: str) -> Held | None:
        """What the store holds under ``name`` (one request), or None when nothing."""

    def download(self, name: str, target: Path) -> str:
        """Copies the object ``name`` into the file ``target`` (a temporary file beside it,
        fsynced, then renamed, so ``target`` is never a part), checking its bytes against the
        checksum the store keeps (when it keeps one); returns the object's version."""
        reading = self._read(name)
        temp = target.with_name(f".{target.name}.download.{os.getpid()}")
        digest = hashlib.new(self.checksum)
        try:
            with open(temp, "wb") as f:
                for piece in reading.pieces:
                    digest.update(piece)
                    f.write(piece)
                f.flush()
                os.fsync(f.fileno())
            if reading.checksum is not None and b64(digest.digest()) != reading.checksum:
                raise OSError(
                    f"{self.url_of(name)}: the bytes read do not match the "
                    f"{self.checksum.upper()} the store keeps for the object"
                )
            os.replace(temp, target)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        return reading.version

    @abstractmethod
    def _read(self, name: str) -> Reading:
        """``download``'s request: the object's pieces, version and stored checksum."""


class AsyncObjectDirectory(ObjectDirectory):
    """A directory whose backend is an asynchronous fsspec file system (``self.fs``: gcsfs,
    adlfs), whose event loop runs its requests."""

    fs: Any

    def _sync(
        self,
        what: str,
        size: int,
        call: Callable[..., Awaitable[T]],
        *args: Any,
        **kwargs: Any,
    ) -> T:
        """Runs the request ``call(*args, **kwargs)`` (a coroutine function) on the backend's
        event loop within its deadline (``deadline(size)``; cancelled after it: OSError,
        ETIMEDOUT); a failure is raised as ``_translated`` says."""
        from fsspec.asyn import sync
        from fsspec.exceptions import FSTimeoutError

        seconds = deadline(size)  # a ConfigError of its own, never a request's failure
        try:
            result: T = sync(self.fs.loop, call, *args, timeout=seconds, **kwargs)
            return result
        except FSTimeoutError:
            raise timed_out(what, size, self.url) from None
        except Exception as err:
            error = self._translated(what, err)
            if error is err:
                raise
            raise error from err

    @abstractmethod
    def _translated(self, what: str, err: Exception) -> Exception:
        """The error nxrs raises for the backend's ``err`` from the request ``what``:
        Conflict for a failed condition, FileNotFoundError for a missing object, OSError for
        anything else the store or the network answers; ``err`` itself for anything that is
        neither's."""


def deadline(size: int) -> float:
    """How long one request moving ``size`` bytes may take before nxrs cancels it: the
    seconds of ``NXRS_STORE_TIMEOUT`` (default 60), plus a second per MB (a store slower than
    1 MB/s is taken for a stalled one). The backends' own timeouts do not cover every wait (a
    PUT whose answer never comes can wait forever), and a writer that never returns would hold
    the next save, and the stop, forever."""
    text = os.environ.get("NXRS_STORE_TIMEOUT", "60")
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        raise ConfigError(f"NXRS_STORE_TIMEOUT must be a number of seconds > 0, not {text!r}")
    return seconds + size / 1e6


def timed_out(what: str, size: int, where: str) -> OSError:
    """The error of a request cancelled at its deadline."""
    return OSError(
        errno.ETIMEDOUT,
        f"{what} did not finish within {deadline(size):.0f} s (NXRS_STORE_TIMEOUT)",
        where,
    )


def pieces(
    loop: Any, read: Callable[[int], Awaitable[bytes]], close: Callable[[], object]
) -> Iterator[bytes]:
    """The pieces of a streaming response body, each read on the backend's event loop
    ``loop`` by ``read(size)`` within its deadline; ``close`` releases the body after."""
    from fsspec.asyn import sync
    from fsspec.exceptions import FSTimeoutError

    try:
        while True:
            try:
                piece = sync(loop, read, PIECE, timeout=deadline(PIECE))
            except FSTimeoutError:
                raise OSError(errno.ETIMEDOUT, "a download stalled (NXRS_STORE_TIMEOUT)") from None
            if not piece:
                return
            yield piece
    finally:
        with contextlib.suppress(Exception):
            close()
