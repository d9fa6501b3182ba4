"""The S3 backend of run directories on object storage (``s3://``, ``s3a://``; the
``nxrs[s3]`` extra: s3fs): conditional writes with ``If-None-Match: *`` and ``If-Match``
(AWS S3 has both since 2024; S3-compatible stores vary, and the lease refuses to start on
one that ignores them), checkpoints checked by the SHA-256 the store keeps
(``x-amz-checksum-sha256``). s3fs reads credentials and the endpoint as boto does
(environment, ``~/.aws`` profiles, ``AWS_ENDPOINT_URL``, instance roles)."""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import io
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, BinaryIO

from nxrs._storage.store import (
    Conflict,
    Held,
    Listed,
    ObjectDirectory,
    Reading,
    StoredObject,
    b64,
    deadline,
    pieces,
    timed_out,
)

__all__ = ["S3Directory"]


class S3Directory(ObjectDirectory):
    """A directory on an S3 store."""

    checksum = "sha256"

    def __init__(self, url: str) -> None:
        import s3fs  # installed: open_store checked

        super().__init__(url)
        # No instance cache and no listings cache: another process changes the directory, and
        # every listing must be the store's now.
        self.fs: Any = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)

    def _call(self, method: str, *, size: int = 0, **kwargs: Any) -> dict[str, Any]:
        """One S3 request through s3fs (its retries and error translation: OSError
        subclasses, FileNotFoundError for a missing object); a failed condition is Conflict.
        A request of ``size`` bytes that has not finished by its deadline (``deadline``) is
        cancelled: OSError (ETIMEDOUT)."""
        from botocore.exceptions import BotoCoreError
        from fsspec.exceptions import FSTimeoutError

        seconds = deadline(size)  # a ConfigError of its own, never a request's failure
        try:
            result: dict[str, Any] = self.fs.call_s3(
                method, Bucket=self.bucket, timeout=seconds, **kwargs
            )
        except FSTimeoutError:
            raise timed_out(method, size, self.url) from None
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

    def get(self, name: str) -> StoredObject | None:
        try:
            response = self._call("get_object", Key=self.key(name))
        except FileNotFoundError:
            return None
        body = response["Body"]
        data = b"".join(pieces(self.fs.loop, body.read, body.close))
        return StoredObject(data, str(response["ETag"]))

    def put(
        self, name: str, data: bytes, *, if_match: str | None = None, if_absent: bool = False
    ) -> str:
        conditions: dict[str, Any] = {}
        if if_absent:
            conditions["IfNoneMatch"] = "*"
        if if_match is not None:
            conditions["IfMatch"] = if_match
        response = self._call(
            "put_object", size=len(data), Key=self.key(name), Body=data, **conditions
        )
        return str(response["ETag"])

    def delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._call("delete_object", Key=self.key(name))

    def version(self, name: str) -> str | None:
        try:
            response = self._call("head_object", Key=self.key(name))
        except FileNotFoundError:
            return None
        return str(response["ETag"])

    def clock(self, name: str) -> tuple[datetime.datetime, datetime.datetime, str] | None:
        try:
            response = self._call("head_object", Key=self.key(name))
        except FileNotFoundError:
            return None
        store_now = parsedate_to_datetime(response["ResponseMetadata"]["HTTPHeaders"]["date"])
        return store_now, response["LastModified"], str(response["ETag"])

    def listing(self, under: str = "", prefix: str = "") -> list[Listed]:
        folder = self.key(under.rstrip("/") + "/" if under else "")
        found = []
        token: dict[str, Any] = {}
        while True:
            response = self._call("list_objects_v2", Prefix=folder + prefix, Delimiter="/", **token)
            for item in response.get("Contents", []):
                found.append(Listed(item["Key"][len(folder) :], str(item["ETag"])))
            if not response.get("IsTruncated"):
                return found
            token = {"ContinuationToken": response["NextContinuationToken"]}

    def exists(self) -> bool:
        response = self._call("list_objects_v2", Prefix=self.prefix, MaxKeys=1)
        return bool(response.get("KeyCount"))

    def abort_uploads(self) -> None:
        """Aborts the multipart uploads left under this directory (a killed tool's upload
        keeps its parts, and their cost, forever)."""
        response = self._call("list_multipart_uploads", Prefix=self.prefix)
        for upload in response.get("Uploads", []):
            self._call("abort_multipart_upload", Key=upload["Key"], UploadId=upload["UploadId"])

    def copy(self, name: str, to: str) -> None:
        self._call(
            "copy_object",
            Key=self.key(to),
            CopySource={"Bucket": self.bucket, "Key": self.key(name)},
        )

    def _send(self, name: str, source: Path, size: int, digests: dict[str, bytes]) -> None:
        checksum = b64(digests["sha256"])
        with open(source, "rb") as file:
            body = _HashingReader(file)
            self._call(
                "put_object",
                size=size,
                Key=self.key(name),
                Body=body,
                ContentLength=size,
                ChecksumAlgorithm="SHA256",
                ChecksumSHA256=checksum,
            )
        if body.digest.digest() != digests["sha256"]:
            # The bytes sent are not those the checksum was taken of, and this store did not
            # refuse them (AWS S3 does; S3-compatible stores vary, moto does not).
            self.delete(name)
            raise OSError(
                f"{self.url_of(name)}: the bytes sent do not match the SHA-256 taken of "
                f"{source} before the upload (the file changed); the object was deleted"
            )

    def _held(self, name: str) -> Held | None:
        try:
            head = self._call("head_object", Key=self.key(name), ChecksumMode="ENABLED")
        except FileNotFoundError:
            return None
        return Held(head["ContentLength"], head.get("ChecksumSHA256"), str(head["ETag"]))

    def _read(self, name: str) -> Reading:
        response = self._call("get_object", Key=self.key(name), ChecksumMode="ENABLED")
        body = response["Body"]
        return Reading(
            pieces(self.fs.loop, body.read, body.close),
            str(response["ETag"]),
            response.get("ChecksumSHA256"),
        )


class _HashingReader(io.RawIOBase):
    """A file as an upload's body that hashes (SHA-256) the bytes the upload reads from it, so
    that what was sent can be compared with the checksum the request carried (taken of the file
    before); a rewind (a retried request) starts the hash again."""

    def __init__(self, file: BinaryIO) -> None:
        super().__init__()
        self._file = file
        self.digest = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        piece = self._file.read(size)
        self.digest.update(piece)
        return piece

    def readinto(self, buffer: Any) -> int:
        piece = self.read(len(buffer))
        buffer[: len(piece)] = piece
        return len(piece)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        # Only a rewind is expected (a retry, or a length taken at the end first); reads
        # resumed elsewhere would hash bytes twice and fail the comparison: the safe side.
        position = self._file.seek(offset, whence)
        if position == 0:
            self.digest = hashlib.sha256()
        return position

    def tell(self) -> int:
        return self._file.tell()


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
