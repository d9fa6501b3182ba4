"""The Google Cloud Storage backend of run directories on object storage (``gs://``,
``gcs://``; the ``nxrs[gcs]`` extra: gcsfs), on the JSON API: conditional writes with the
``ifGenerationMatch`` precondition (0: only if absent; a generation: only if still that
version), an object's version being its generation; checkpoints checked by the MD5 the store
keeps (given when the upload's session opens; the store refuses the completed upload if the
bytes differ) and read back by generation, so a download is the very version whose checksum
it is compared with. gcsfs reads credentials and the endpoint as Google's libraries do
(``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's login, the metadata server,
``STORAGE_EMULATOR_HOST``; ``FSSPEC_GCS_TOKEN`` et al.).
"""

from __future__ import annotations

import contextlib
import datetime
import json
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

from nxrs._storage.store import (
    AsyncObjectDirectory,
    Conflict,
    Held,
    Listed,
    Reading,
    StoredObject,
    b64,
    pieces,
)

__all__ = ["GCSDirectory"]

#: How often a read starts again when the object was replaced between reading its metadata
#: and its bytes (each read is of one generation, so it never mixes two versions).
_READ_ATTEMPTS = 5


class GCSDirectory(AsyncObjectDirectory):
    """A directory in a Google Cloud Storage bucket."""

    checksum = "md5"

    def __init__(self, url: str) -> None:
        import gcsfs  # installed: open_store checked

        super().__init__(url)
        self.fs: Any = gcsfs.GCSFileSystem(skip_instance_cache=True)

    def _translated(self, what: str, err: Exception) -> Exception:
        """The error nxrs raises for gcsfs's ``err``: 412 Precondition Failed (gcsfs's
        FileExistsError) is Conflict, 404 stays FileNotFoundError, anything else the store or
        the network answers is OSError."""
        import aiohttp
        from gcsfs.retry import HttpError

        if isinstance(err, FileExistsError):
            return Conflict(str(err))
        if isinstance(err, (HttpError, ValueError, aiohttp.ClientError)) and not isinstance(
            err, OSError
        ):
            # gcsfs's HttpError (an answer of the store), ValueError ("Bad Request": a
            # checksum that does not match, among others), aiohttp's (no answer).
            return OSError(f"{self.url}: {what}: {err}")
        return err

    def _json(self, what: str, method: str, path: str, *args: str, **params: Any) -> Any:
        return self._sync(what, 0, self.fs._call, method, path, *args, json_out=True, **params)

    def _metadata(self, name: str) -> tuple[dict[str, Any], Any] | None:
        """The object's resource (JSON) and the response's headers, or None when absent."""
        try:
            headers, content = self._sync(
                "metadata", 0, self.fs._call, "GET", "b/{}/o/{}", self.bucket, self.key(name)
            )
        except FileNotFoundError:
            return None
        return json.loads(content), headers

    def get(self, name: str) -> StoredObject | None:
        for _ in range(_READ_ATTEMPTS):
            found = self._metadata(name)
            if found is None:
                return None
            generation = found[0]["generation"]
            try:
                _, data = self._sync(
                    "get",
                    int(found[0]["size"]),
                    self.fs._call,
                    "GET",
                    "b/{}/o/{}",
                    self.bucket,
                    self.key(name),
                    alt="media",
                    generation=generation,
                )
            except FileNotFoundError:
                continue  # replaced since its metadata was read: read the new one
            return StoredObject(data, str(generation))
        raise OSError(f"{self.url_of(name)}: changed under every read")

    def put(
        self, name: str, data: bytes, *, if_match: str | None = None, if_absent: bool = False
    ) -> str:
        conditions: dict[str, str] = {}
        if if_absent:
            conditions["ifGenerationMatch"] = "0"
        if if_match is not None:
            conditions["ifGenerationMatch"] = if_match
        resource = self._sync(
            "put",
            len(data),
            self.fs._call,
            "POST",
            f"{self.fs._location}/upload/storage/v1/b/{{}}/o",
            self.bucket,
            uploadType="media",
            name=self.key(name),
            data=data,
            json_out=True,
            **conditions,
        )
        return str(resource["generation"])

    def delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._sync(
                "delete", 0, self.fs._call, "DELETE", "b/{}/o/{}", self.bucket, self.key(name)
            )

    def version(self, name: str) -> str | None:
        found = self._metadata(name)
        return None if found is None else str(found[0]["generation"])

    def clock(self, name: str) -> tuple[datetime.datetime, datetime.datetime, str] | None:
        found = self._metadata(name)
        if found is None:
            return None
        resource, headers = found
        store_now = parsedate_to_datetime(headers["Date"])
        updated = datetime.datetime.fromisoformat(resource["updated"].replace("Z", "+00:00"))
        return store_now, updated, str(resource["generation"])

    def listing(self, under: str = "", prefix: str = "") -> list[Listed]:
        folder = self.key(under.rstrip("/") + "/" if under else "")
        found = []
        token: dict[str, str] = {}
        while True:
            page = self._json(
                "listing",
                "GET",
                "b/{}/o",
                self.bucket,
                prefix=folder + prefix,
                delimiter="/",
                **token,
            )
            for item in page.get("items", []):
                found.append(Listed(item["name"][len(folder) :], str(item["generation"])))
            if "nextPageToken" not in page:
                return found
            token = {"pageToken": page["nextPageToken"]}

    def exists(self) -> bool:
        page = self._json("listing", "GET", "b/{}/o", self.bucket, prefix=self.prefix, maxResults=1)
        return bool(page.get("items"))

    def abort_uploads(self) -> None:
        """Nothing: GCS keeps no parts of an unfinished upload as objects or bills them (a
        resumable upload's session expires after a week by itself)."""

    def copy(self, name: str, to: str) -> None:
        # A rewrite may take several calls for a large object; each continues the last.
        token: dict[str, str] = {}
        while True:
            answer = self._json(
                "copy",
                "POST",
                "b/{}/o/{}/rewriteTo/b/{}/o/{}",
                self.bucket,
                self.key(name),
                self.bucket,
                self.key(to),
                **token,
            )
            if answer.get("done"):
                return
            token = {"rewriteToken": answer["rewriteToken"]}

    def _send(self, name: str, source: Path, size: int, digests: dict[str, bytes]) -> None:
        # The object's resource, with the MD5 the store checks the bytes against, and the
        # SHA-256 kept for readers (the store does not check that one).
        resource = {"md5Hash": b64(digests["md5"]), "metadata": {"sha256": digests["sha256"].hex()}}
        self._sync("upload", size, self._upload, self.key(name), source, size, resource)

    def _held(self, name: str) -> Held | None:
        found = self._metadata(name)
        if found is None:
            return None
        resource = found[0]
        return Held(int(resource["size"]), resource.get("md5Hash"), str(resource["generation"]))

    async def _upload(self, key: str, source: Path, size: int, resource: dict[str, Any]) -> None:
        """A resumable upload sent in one request: the session is opened with the object's
        resource (its MD5, which the store checks when the bytes are complete), then the
        file's bytes are streamed from disk (never held in memory) in one PUT. The object
        exists only once that PUT completes; a killed writer leaves an unfinished session,
        no object. Not retried here: a retry would need the file again, and a failed save is
        retried by the next one."""
        from gcsfs.core import quote
        from gcsfs.retry import validate_response

        await self.fs._set_session()
        url = f"{self.fs._location}/upload/storage/v1/b/{quote(self.bucket)}/o"
        opening = {
            "Content-Type": "application/json",
            "X-Upload-Content-Type": "application/octet-stream",
            "X-Upload-Content-Length": str(size),
        }
        async with self.fs.session.post(
            url,
            params={"uploadType": "resumable", "name": key},
            data=json.dumps(resource),
            headers=self.fs._get_headers(opening),
        ) as response:
            validate_response(response.status, await response.read(), url)
            session = response.headers["Location"]
        with open(source, "rb") as file:
            async with self.fs.session.put(
                session,
                data=file,
                headers=self.fs._get_headers({"Content-Length": str(size)}),
            ) as response:
                validate_response(response.status, await response.read(), url)

    def _read(self, name: str) -> Reading:
        for _ in range(_READ_ATTEMPTS):
            found = self._metadata(name)
            if found is None:
                raise FileNotFoundError(self.url_of(name))
            resource = found[0]
            try:
                response = self._sync(
                    "download", 0, self._open_media, self.key(name), resource["generation"]
                )
            except FileNotFoundError:
                continue  # replaced since its metadata was read: read the new one
            return Reading(
                pieces(self.fs.loop, response.content.read, response.release),
                str(resource["generation"]),
                resource.get("md5Hash"),  # composite objects have none
            )
        raise OSError(f"{self.url_of(name)}: changed under every read")

    async def _open_media(self, key: str, generation: str) -> Any:
        """The response whose body is the bytes of the generation ``generation`` (read piece
        by piece after)."""
        from gcsfs.retry import validate_response

        await self.fs._set_session()
        url = self.fs._format_path("b/{}/o/{}", (self.bucket, key))
        response = await self.fs.session.get(
            url,
            params={"alt": "media", "generation": generation},
            headers=self.fs._get_headers(None),
        )
        if response.status >= 400:
            content = await response.read()
            response.release()
            validate_response(response.status, content, url)
        return response
