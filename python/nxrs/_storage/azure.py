"""The Azure Blob Storage backend of run directories on object storage (``az://container/run``,
``abfs://``, ``abfss://``; the ``nxrs[azure]`` extra: adlfs), on the Blob service's REST API
through the Azure SDK client adlfs builds: conditional writes with ``If-None-Match: *`` (an
existing blob: 409 BlobAlreadyExists) and ``If-Match: <ETag>`` (a changed one: 412
ConditionNotMet), an object's version being its ETag; checkpoints written by one Put Blob
streamed from disk with its ``Content-MD5`` (which the service checks against the bytes it
received, and keeps as the blob's), read back, and downloaded in ranges each on the condition
``If-Match`` of the ETag read, so a download is the very version whose checksum it is compared
with. adlfs reads credentials and the endpoint as Azure's tools do
(``AZURE_STORAGE_CONNECTION_STRING``; ``AZURE_STORAGE_ACCOUNT_NAME`` with
``AZURE_STORAGE_ACCOUNT_KEY`` or ``AZURE_STORAGE_SAS_TOKEN``; a service principal's
``AZURE_STORAGE_CLIENT_ID``/``_SECRET``/``TENANT_ID``; else ``DefaultAzureCredential``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, BinaryIO

from nxrs._nxrs import ConfigError
from nxrs._storage.store import (
    AsyncObjectDirectory,
    Conflict,
    Held,
    Listed,
    Reading,
    StoredObject,
    pieces,
)

__all__ = ["AzureDirectory"]

#: Put Blob's largest body (service version 2019-12-12 on): a little less than the 5 GiB of
#: ``MAX_OBJECT_BYTES``. Larger would need staged blocks (Put Block, Put Block List).
_PUT_BLOB_BYTES = 5000 * 2**20

#: How long to wait between looks at a server-side copy the service runs asynchronously.
_COPY_POLL_SECONDS = 0.5


class AzureDirectory(AsyncObjectDirectory):
    """A directory in an Azure Blob Storage container (``az://container/path``)."""

    checksum = "md5"
    max_object_bytes = _PUT_BLOB_BYTES

    def __init__(self, url: str) -> None:
        import adlfs  # installed: open_store checked

        super().__init__(url)
        if "@" in self.bucket:
            raise ConfigError(
                f"{url}: name the container as az://container/path (the account comes from "
                "the environment: AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_ACCOUNT_NAME)"
            )
        # No instance cache and no listings cache: another process changes the directory, and
        # every listing must be the store's now.
        try:
            self.fs: Any = adlfs.AzureBlobFileSystem(
                skip_instance_cache=True, use_listings_cache=False
            )
        except ValueError as err:  # adlfs's: no account, a malformed connection string
            raise ConfigError(f"{url}: {err}") from None
        self.container: Any = self.fs.service_client.get_container_client(self.bucket)

    def _blob(self, name: str) -> Any:
        return self.container.get_blob_client(self.key(name))

    def _translated(self, what: str, err: Exception) -> Exception:
        """The error nxrs raises for the SDK's ``err``: a failed condition (409
        BlobAlreadyExists for ``If-None-Match: *``, 412 ConditionNotMet for ``If-Match``) is
        Conflict, 404 is FileNotFoundError, anything else the service or the network answers
        is OSError."""
        from azure.core.exceptions import AzureError, ResourceNotFoundError

        if isinstance(err, (OSError, Conflict)):
            return err
        if isinstance(err, ResourceNotFoundError):
            return FileNotFoundError(f"{self.url}: {what}: {err}")
        if isinstance(err, AzureError):
            status = getattr(err, "status_code", None)
            code = getattr(err, "error_code", None)
            if status == 412 or code in ("BlobAlreadyExists", "ConditionNotMet"):
                return Conflict(str(err))
            return OSError(f"{self.url}: {what}: {err}")
        if isinstance(err, (ValueError, asyncio.TimeoutError)):
            return OSError(f"{self.url}: {what}: {err}")
        return err

    async def _properties(self, key: str) -> dict[str, str]:
        """The response headers of Get Blob Properties (HEAD) of ``key``."""
        seen: dict[str, str] = {}

        def keep(response: Any) -> None:
            seen.update(response.http_response.headers)

        await self.container.get_blob_client(key).get_blob_properties(raw_response_hook=keep)
        return {name.lower(): value for name, value in seen.items()}

    def _head(self, name: str) -> dict[str, str] | None:
        """The object's headers (lower-cased names), or None when it is absent."""
        try:
            return self._sync("properties", 0, self._properties, self.key(name))
        except FileNotFoundError:
            return None

    def get(self, name: str) -> StoredObject | None:
        async def read() -> tuple[bytes, str]:
            downloader = await self._blob(name).download_blob()
            return await downloader.readall(), downloader.properties.etag

        try:
            data, etag = self._sync("get", 0, read)
        except FileNotFoundError:
            return None
        return StoredObject(data, _quoted(etag))

    def put(
        self, name: str, data: bytes, *, if_match: str | None = None, if_absent: bool = False
    ) -> str:
        from azure.core import MatchConditions

        conditions: dict[str, Any] = {}
        if if_absent:
            conditions = {"match_condition": MatchConditions.IfMissing}  # If-None-Match: *
        if if_match is not None:
            conditions = {"etag": if_match, "match_condition": MatchConditions.IfNotModified}
        answer = self._sync(
            "put", len(data), self._blob(name).upload_blob, data, overwrite=True, **conditions
        )
        return _quoted(answer["etag"])

    def delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._sync("delete", 0, self._blob(name).delete_blob)

    def version(self, name: str) -> str | None:
        headers = self._head(name)
        return None if headers is None else _quoted(headers["etag"])

    def clock(self, name: str) -> tuple[datetime.datetime, datetime.datetime, str] | None:
        headers = self._head(name)
        if headers is None:
            return None
        return (
            parsedate_to_datetime(headers["date"]),
            parsedate_to_datetime(headers["last-modified"]),
            _quoted(headers["etag"]),
        )

    async def _page(self, pages: Any) -> list[Any] | None:
        """The items of a listing's next page (one List Blobs request), None after the last."""
        try:
            page = await pages.__anext__()
        except StopAsyncIteration:
            return None
        return [item async for item in page]

    def listing(self, under: str = "", prefix: str = "") -> list[Listed]:
        from azure.storage.blob.aio import BlobPrefix

        folder = self.key(under.rstrip("/") + "/" if under else "")
        walk = self.container.walk_blobs(name_starts_with=folder + prefix, delimiter="/")
        pages = walk.by_page()
        found = []
        while (page := self._sync("listing", 0, self._page, pages)) is not None:
            for item in page:
                if not isinstance(item, BlobPrefix):  # a folder under this one
                    found.append(Listed(item.name[len(folder) :], _quoted(item.etag)))
        return found

    def exists(self) -> bool:
        pages = self.container.list_blobs(name_starts_with=self.prefix, results_per_page=1)
        return bool(self._sync("listing", 0, self._page, pages.by_page()))

    def abort_uploads(self) -> None:
        """Nothing: nxrs stages no blocks (one Put Blob per object), and the blocks another
        tool staged but never committed are invisible to every reader and deleted by the
        service a week after their upload."""

    def copy(self, name: str, to: str) -> None:
        source = self._blob(name).url
        answer = self._sync("copy", 0, self._blob(to).start_copy_from_url, source)
        status = answer.get("copy_status")
        # Within an account a copy is usually done when Copy Blob answers; one the service
        # runs asynchronously is waited for.
        while status == "pending":
            self._sync("copy", 0, asyncio.sleep, _COPY_POLL_SECONDS)
            headers = self._head(to) or {}
            status = headers.get("x-ms-copy-status")
        if status != "success":
            raise OSError(f"{self.url_of(to)}: the copy of {name} ended as {status}")

    def _send(self, name: str, source: Path, size: int, digests: dict[str, bytes]) -> None:
        # The service checks the bytes it receives against this MD5 (400 Md5Mismatch), so
        # bytes that changed after it was taken are refused, not stored.
        with open(source, "rb") as file:
            self._sync("upload", size, self._put_blob, self.key(name), file, size, digests["md5"])

    def _held(self, name: str) -> Held | None:
        headers = self._head(name)
        if headers is None:
            return None
        size = int(headers["content-length"])
        return Held(size, headers.get("content-md5"), _quoted(headers["etag"]))

    async def _put_blob(self, key: str, body: BinaryIO, size: int, md5: bytes) -> None:
        """One Put Blob of ``size`` bytes read from ``body`` as they are sent (never held in
        memory whole), with their ``Content-MD5``. The SDK's ``upload_blob`` reads a body of
        up to 64 MiB into memory and stages blocks above that, so this is its generated
        client's Put Blob, as ``upload_blob`` calls it; not retried (a retry would need the
        file again, and a failed save is retried by the next one)."""
        from azure.core.exceptions import HttpResponseError
        from azure.storage.blob._shared.response_handlers import process_storage_error

        blob = self.container.get_blob_client(key)
        try:
            await blob._client.block_blob.upload(
                content_length=size,
                body=body,
                transactional_content_md5=md5,
                retry_total=0,
            )
        except HttpResponseError as err:
            process_storage_error(err)  # the SDK's own errors (their error_code)

    def _read(self, name: str) -> Reading:
        headers = self._head(name)
        if headers is None:
            raise FileNotFoundError(self.url_of(name))
        etag, size = headers["etag"], int(headers["content-length"])
        blob = self._blob(name)
        offset = 0

        async def read(length: int) -> bytes:
            # One ranged Get Blob on the condition of the version read (If-Match): a blob
            # replaced meanwhile fails the download rather than mixing two versions.
            from azure.core import MatchConditions

            nonlocal offset
            if offset >= size:
                return b""
            try:
                downloader = await blob.download_blob(
                    offset,
                    min(length, size - offset),
                    etag=etag,
                    match_condition=MatchConditions.IfNotModified,
                )
                piece: bytes = await downloader.readall()
            except Exception as err:
                error = self._translated("download", err)
                if isinstance(error, Conflict):  # 412: the blob was replaced meanwhile
                    error = OSError(f"{self.url_of(name)}: replaced during the download")
                raise error from err
            offset += len(piece)
            if not piece:
                raise OSError(f"{self.url_of(name)}: the download ended before {size} bytes")
            return piece

        return Reading(
            pieces(self.fs.loop, read, lambda: None),
            _quoted(etag),
            headers.get("content-md5"),  # None when none was set (a blob of staged blocks)
        )


def _quoted(etag: str) -> str:
    """An ETag in one form: the service quotes it in headers (``"0x8D..."``), not in listings
    (``0x8D...``), and versions are compared as strings."""
    return f'"{etag.strip(chr(34))}"'
