"""Run directories on object storage: a directory named by a URL (``s3://bucket/run``), its
objects, and the conditional writes nxrs's promises rest on there (``docs/RUNS.md``, "Run
directories on object storage").

An object store has no rename, no append and no ``flock``. What replaces them:

- **Whole-object writes.** Every object nxrs writes (a checkpoint, the manifest, the transcript,
  the lease) is written by one PUT, which the store applies whole or not at all: a reader sees
  the complete old or the complete new object, never a part. A checkpoint's PUT carries its
  SHA-256, which the store checks against the bytes it received and keeps; the object's size and
  checksum are read back before anything refers to it, and checked again whenever it is
  downloaded.
- **Conditional writes** (``If-None-Match: *``: only if absent; ``If-Match: <ETag>``: only if
  unchanged since read) for the lease and the manifest, so that of two writers racing, one wins
  and the other learns it (``Conflict``).
- **The store's clock** for leases: a lease is judged expired from its object's
  ``Last-Modified`` and the store's ``Date`` header, both the store's, so no machine's clock
  skew can shorten or stretch it.

The backend is fsspec's (``s3fs``: the ``nxrs[s3]`` extra), which reads credentials and the
endpoint as boto does (environment, ``~/.aws`` profiles, ``AWS_ENDPOINT_URL``); nxrs stores
none of them. Conditional writes are S3's API (AWS S3 has both since 2024; S3-compatible stores
vary: the lease refuses to start on one that ignores them, see ``Lease``). Other fsspec
protocols are refused with a ConfigError naming what is missing rather than run without one
writer guaranteed.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import errno
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nxrs._nxrs import ConfigError

__all__ = ["Conflict", "ObjectDirectory", "StoredObject", "is_url"]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

#: The protocols whose conditional writes nxrs implements (fsspec's names for S3).
_S3_PROTOCOLS = ("s3", "s3a")

#: S3's largest single PUT: a checkpoint is one object written by one request (no multipart
#: upload, whose parts a killed writer would leave behind).
MAX_OBJECT_BYTES = 5 * 2**30

#: Downloads and checksums read files in pieces of this size.
_PIECE = 8 * 2**20


def is_url(location: object) -> bool:
    """Whether ``location`` names a directory on a store by URL (``s3://...``), not a local
    path. ``file://`` URLs are local paths."""
    return (
        isinstance(location, str)
        and _SCHEME.match(location) is not None
        and not location.lower().startswith("file://")
    )


class Conflict(Exception):
    """A conditional write's condition did not hold: the object exists (``if_absent``) or
    changed since it was read (``if_match``). Another process wrote it."""


@dataclass(frozen=True)
class StoredObject:
    """An object's bytes and the version (ETag) they are."""

    data: bytes
    etag: str


@dataclass(frozen=True)
class Listed:
    """An object of a listing: its name in the directory and its ETag."""

    name: str
    etag: str


def sha256_file(path: Path) -> bytes:
    """The SHA-256 of a file, read in pieces."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while piece := f.read(_PIECE):
            digest.update(piece)
    return digest.digest()


class ObjectDirectory:
    """A directory on an S3 store, named by its URL: the objects directly under it.

    >>> ObjectDirectory("gs://bucket/run")  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    nxrs.ConfigError: ...
    """

    def __init__(self, url: str) -> None:
        protocol = url.split("://", 1)[0].lower()
        if protocol not in _S3_PROTOCOLS:
            raise ConfigError(
                f"{url}: run directories on object storage need conditional writes (for the "
                "lease and the manifest), which nxrs implements for s3:// (S3 and S3-compatible "
                f"stores); {protocol}:// is not supported yet"
            )
        try:
            import s3fs
        except ImportError:
            raise ConfigError(
                f"{url}: an s3:// directory needs s3fs: pip install 'nxrs[s3]'"
            ) from None
        self.url = url.rstrip("/")
        # No instance cache and no listings cache: another process changes the directory, and
        # every listing must be the store's now.
        self.fs: Any = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)
        bucket_and_prefix = self.url.split("://", 1)[1]
        self.bucket, _, prefix = bucket_and_prefix.partition("/")
        if not self.bucket:
            raise ConfigError(f"{url}: no bucket in the URL")
        self.prefix = f"{prefix}/" if prefix else ""

    def __str__(self) -> str:
        return self.url

    def url_of(self, name: str) -> str:
        """The URL of the object ``name`` of this directory."""
        return f"{self.url}/{name}"

    def _key(self, name: str) -> str:
        return self.prefix + name

    def _call(self, method: str, *, size: int = 0, **kwargs: Any) -> dict[str, Any]:
        """One S3 request through s3fs (its retries and error translation: OSError
        subclasses, FileNotFoundError for a missing object); a failed condition is Conflict.
        A request of ``size`` bytes that has not finished by its deadline (``deadline``) is
        cancelled: OSError (ETIMEDOUT)."""
        from botocore.exceptions import BotoCoreError
        from fsspec.exceptions import FSTimeoutError

        try:
            result: dict[str, Any] = self.fs.call_s3(
                method, Bucket=self.bucket, timeout=deadline(size), **kwargs
            )
        except FSTimeoutError:
            raise OSError(
                errno.ETIMEDOUT,
                f"{method} did not finish within {deadline(size):.0f} s (NXRS_STORE_TIMEOUT)",
                self.url,
            ) from None
        except FileExistsError as err:  # s3fs's translation of a failed If-None-Match
            raise Conflict(str(err)) from err
        except OSError as err:
            if _precondition_failed(err):
                raise Conflict(str(err)) from err
            raise
        except BotoCoreError as err:
            # What s3fs leaves untranslated (no credentials, an endpoint that does not answer):
            # an OSError too, so that a save that meets it fails as any failed write does.
            raise OSError(f"{self.url}: {err}") from err
        return result

    # ------------------------------------------------------------------ small objects

    def get(self, name: str) -> StoredObject | None:
        """The object ``name`` with its ETag, or None when there is none."""
        try:
            response = self._call("get_object", Key=self._key(name))
        except FileNotFoundError:
            return None
        body = response["Body"]
        return StoredObject(_read_body(self.fs, body), str(response["ETag"]))

    def put(
        self, name: str, data: bytes, *, if_match: str | None = None, if_absent: bool = False
    ) -> str:
        """Writes the object ``name`` (one PUT) and returns its ETag: only if it is absent
        (``if_absent``) or still the version ``if_match``, else Conflict."""
        conditions: dict[str, Any] = {}
        if if_absent:
            conditions["IfNoneMatch"] = "*"
        if if_match is not None:
            conditions["IfMatch"] = if_match
        response = self._call(
            "put_object", size=len(data), Key=self._key(name), Body=data, **conditions
        )
        return str(response["ETag"])

    def delete(self, name: str) -> None:
        """Deletes ``name`` (nothing when absent)."""
        with contextlib.suppress(FileNotFoundError):
            self._call("delete_object", Key=self._key(name))

    def version(self, name: str) -> str | None:
        """The ETag of the object ``name`` (one HEAD request), or None when there is none."""
        try:
            response = self._call("head_object", Key=self._key(name))
        except FileNotFoundError:
            return None
        return str(response["ETag"])

    def clock(self, name: str) -> tuple[datetime.datetime, datetime.datetime, str] | None:
        """The store's current time, the object's ``Last-Modified`` time and ETag (all from
        one HEAD request, so both times are the store's clock), or None when absent."""
        try:
            response = self._call("head_object", Key=self._key(name))
        except FileNotFoundError:
            return None
        headers = response["ResponseMetadata"]["HTTPHeaders"]
        from email.utils import parsedate_to_datetime

        store_now = parsedate_to_datetime(headers["date"])
        return store_now, response["LastModified"], str(response["ETag"])

    # ------------------------------------------------------------------ listings

    def listing(self, under: str = "") -> list[Listed]:
        """The objects directly in this directory (or in its folder ``under``), by name."""
        prefix = self._key(under.rstrip("/") + "/" if under else "")
        found = []
        token: dict[str, Any] = {}
        while True:
            response = self._call("list_objects_v2", Prefix=prefix, Delimiter="/", **token)
            for item in response.get("Contents", []):
                name = item["Key"][len(prefix) :]
                found.append(Listed(name, str(item["ETag"])))
            if not response.get("IsTruncated"):
                return found
            token = {"ContinuationToken": response["NextContinuationToken"]}

    def exists(self) -> bool:
        """Whether the directory holds any object (a store has no empty directories)."""
        response = self._call("list_objects_v2", Prefix=self.prefix, MaxKeys=1)
        return bool(response.get("KeyCount"))

    def abort_uploads(self) -> None:
        """Aborts the multipart uploads left under this directory (nxrs starts none; another
        tool's killed upload would keep its parts, and their cost, forever)."""
        response = self._call("list_multipart_uploads", Prefix=self.prefix)
        for upload in response.get("Uploads", []):
            self._call("abort_multipart_upload", Key=upload["Key"], UploadId=upload["UploadId"])

    def copy(self, name: str, to: str) -> None:
        """A server-side copy of ``name`` to ``to`` (both in this directory)."""
        self._call(
            "copy_object",
            Key=self._key(to),
            CopySource={"Bucket": self.bucket, "Key": self._key(name)},
        )

    # ------------------------------------------------------------------ checkpoints

    def upload(self, name: str, source: Path) -> tuple[int, str, str]:
        """Writes the file ``source`` as the object ``name`` in one PUT that carries its
        SHA-256 (the store refuses bytes that do not match it), then reads the object's size
        and stored checksum back; returns them (size, hex SHA-256) and the object's ETag.
        OSError if the object is not exactly the file."""
        size = source.stat().st_size
        if size > MAX_OBJECT_BYTES:
            raise OSError(
                f"{source} is {size} bytes, more than the {MAX_OBJECT_BYTES} bytes of one PUT "
                "to an object store"
            )
        digest = sha256_file(source)
        checksum = base64.b64encode(digest).decode()
        with open(source, "rb") as body:
            self._call(
                "put_object",
                size=size,
                Key=self._key(name),
                Body=body,
                ContentLength=size,
                ChecksumAlgorithm="SHA256",
                ChecksumSHA256=checksum,
            )
        head = self._call("head_object", Key=self._key(name), ChecksumMode="ENABLED")
        stored = head.get("ChecksumSHA256")
        if head["ContentLength"] != size or stored != checksum:
            raise OSError(
                f"{self.url_of(name)}: the store holds {head['ContentLength']} bytes with "
                f"SHA-256 {stored}, not the {size} bytes with SHA-256 {checksum} written"
            )
        return size, digest.hex(), str(head["ETag"])

    def download(self, name: str, target: Path) -> str:
        """Copies the object ``name`` into the file ``target`` (a temporary file beside it,
        fsynced, then renamed, so ``target`` is never a part), checking its SHA-256 against
        the one the store keeps (when it keeps one); returns the object's ETag."""
        response = self._call("get_object", Key=self._key(name), ChecksumMode="ENABLED")
        expected = response.get("ChecksumSHA256")
        temp = target.with_name(f".{target.name}.download.{os.getpid()}")
        digest = hashlib.sha256()
        try:
            with open(temp, "wb") as f:
                for piece in _pieces(self.fs, response["Body"]):
                    digest.update(piece)
                    f.write(piece)
                f.flush()
                os.fsync(f.fileno())
            if expected is not None and base64.b64encode(digest.digest()).decode() != expected:
                raise OSError(
                    f"{self.url_of(name)}: the bytes read do not match the SHA-256 the store "
                    "keeps for the object"
                )
            os.replace(temp, target)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        return str(response["ETag"])


def deadline(size: int) -> float:
    """How long one request moving ``size`` bytes may take before nxrs cancels it: the
    seconds of ``NXRS_STORE_TIMEOUT`` (default 60), plus a second per MB (a store slower than
    1 MB/s is taken for a stalled one). The backend's own timeouts do not cover every wait (a
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


def _precondition_failed(err: OSError) -> bool:
    """Whether s3fs's OSError is S3's 412 Precondition Failed (s3fs maps it to EINVAL; the
    botocore error it came from says which)."""
    cause = err.__cause__
    response = getattr(cause, "response", None)
    if not isinstance(response, dict):
        return False
    code = response.get("Error", {}).get("Code")
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return bool(code == "PreconditionFailed" or status == 412)


def _read_body(fs: Any, body: Any) -> bytes:
    return b"".join(_pieces(fs, body))


def _pieces(fs: Any, body: Any) -> Iterator[bytes]:
    """The pieces of a streaming response body (aiobotocore's, read on s3fs's event loop)."""
    from fsspec.asyn import sync
    from fsspec.exceptions import FSTimeoutError

    try:
        while True:
            try:
                piece = sync(fs.loop, body.read, _PIECE, timeout=deadline(_PIECE))
            except FSTimeoutError:
                raise OSError(errno.ETIMEDOUT, "a download stalled (NXRS_STORE_TIMEOUT)") from None
            if not piece:
                return
            yield piece
    finally:
        body.close()
