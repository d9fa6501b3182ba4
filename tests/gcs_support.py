"""A Google Cloud Storage emulator for the object-storage tests: gcp-storage-emulator (in the
test extra), started as a process on the loopback address by ``emulator()``.

That emulator implements the JSON API's objects, listings, rewrites and upload checksums, but
not generation preconditions: it ignores ``ifGenerationMatch`` on uploads and ``generation`` on
reads. Run as a script, this module starts it with both added, as the JSON API documents them
(an upload whose ``ifGenerationMatch`` is not the object's generation, 0 for an absent object,
gets 412 Precondition Failed; a read of a generation that is not the live one gets 404), in
its request handlers, which one thread runs one request at a time, so a check and the write it
guards are never split by another request. Only these two rules are the tests'; everything
else is the emulator's.
"""

from __future__ import annotations

import contextlib
import json
import sys
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any

from store_support import Emulator, free_port, running


class GCSEmulator(Emulator):
    """gcp-storage-emulator's server process, with generation preconditions."""

    scheme = "gs"

    def _request(self, method: str, path: str, data: bytes | None = None, **query: str) -> bytes:
        """One request of the JSON API, by urllib (not gcsfs, which nxrs uses)."""
        url = f"{self.endpoint}{path}?{urllib.parse.urlencode(query)}"
        request = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            kind = "octet-stream" if query.get("uploadType") == "media" else "json"
            request.add_header("Content-Type", f"application/{kind}")
        with urllib.request.urlopen(request, timeout=60) as response:
            body: bytes = response.read()
            return body

    @staticmethod
    def _split(url: str) -> tuple[str, str]:
        bucket, key = url.removeprefix("gs://").split("/", 1)
        return bucket, key

    def bucket(self) -> str:
        name = f"nxrs-{uuid.uuid4().hex[:12]}"
        self._request("POST", "/storage/v1/b", json.dumps({"name": name}).encode())
        return name

    def environment(self, endpoint: str) -> dict[str, str]:
        # gcsfs reads the endpoint from STORAGE_EMULATOR_HOST, and its ``token`` (here: no
        # credentials) from fsspec's configuration variable. Its default file system looks
        # each bucket's type up over gRPC (the storage control API, which the emulator does
        # not serve: a minute's timeout per lookup, for its own operations such as ``pipe``;
        # nxrs's requests never look it up): off.
        return {
            "STORAGE_EMULATOR_HOST": endpoint,
            "FSSPEC_GCS_TOKEN": "anon",
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        }

    def secrets(self) -> list[str]:
        return [self.endpoint]

    def read(self, url: str) -> bytes:
        bucket, key = self._split(url)
        return self._request("GET", f"/storage/v1/b/{bucket}/o/{_quote(key)}", alt="media")

    def write(self, url: str, data: bytes) -> None:
        bucket, key = self._split(url)
        self._request(
            "POST", f"/upload/storage/v1/b/{bucket}/o", data, uploadType="media", name=key
        )

    def keys(self, url: str) -> list[str]:
        bucket, key = self._split(url)
        listed = json.loads(
            self._request("GET", f"/storage/v1/b/{bucket}/o", prefix=key.rstrip("/") + "/")
        )
        return [f"gs://{bucket}/{item['name']}" for item in listed.get("items", [])]


def _quote(key: str) -> str:
    return urllib.parse.quote(key, safe="")


@contextlib.contextmanager
def emulator() -> Iterator[GCSEmulator]:
    """Starts the emulator (with generation preconditions) on a free loopback port."""
    port = free_port()
    with running([sys.executable, __file__, str(port)], port, "the GCS emulator") as process:
        yield GCSEmulator(port, process)


def _with_generation_preconditions() -> None:
    """Adds the two rules to the emulator's handlers (before its server module binds them)."""
    from gcp_storage_emulator.exceptions import NotFound
    from gcp_storage_emulator.handlers import objects

    def live(storage: Any, bucket: str, name: str | None) -> str:
        try:
            return str(storage.get_file_obj(bucket, name)["generation"])
        except NotFound:
            return "0"

    def first(request: Any, key: str) -> str | None:
        values = request.query.get(key)
        return values[0] if values else None

    insert, download = objects.insert, objects.download

    def checked_insert(request: Any, response: Any, storage: Any, *args: Any, **kwargs: Any) -> Any:
        wanted = first(request, "ifGenerationMatch")
        # nxrs names the object in the query of each of its uploads.
        name = first(request, "name")
        if wanted is not None and live(storage, request.params["bucket_name"], name) != wanted:
            response.status = HTTPStatus.PRECONDITION_FAILED
            response.json({"error": {"code": 412, "message": "conditionNotMet"}})
            return None
        return insert(request, response, storage, *args, **kwargs)

    def checked_download(
        request: Any, response: Any, storage: Any, *args: Any, **kwargs: Any
    ) -> Any:
        wanted = first(request, "generation")
        params = request.params
        if (
            wanted is not None
            and live(storage, params["bucket_name"], params["object_id"]) != wanted
        ):
            response.status = HTTPStatus.NOT_FOUND
            return None
        return download(request, response, storage, *args, **kwargs)

    objects.insert = checked_insert
    objects.download = checked_download


if __name__ == "__main__":
    _with_generation_preconditions()
    from gcp_storage_emulator.server import create_server

    create_server("127.0.0.1", int(sys.argv[1]), in_memory=True).run()
