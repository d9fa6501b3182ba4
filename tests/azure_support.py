"""An Azure Blob Storage emulator for the object-storage tests: the tests' own, written here from
Microsoft's Blob service REST documentation, because Azurite (Microsoft's emulator) comes only
from npm or as a Docker image, neither of which this project's test machines can install, and
no Python Azure Blob emulator exists. What the tests show with it is that nxrs keeps its
promises against the API as documented, not against Azure itself.

Run as a script (``emulator()`` does), it serves one account's blobs from memory on the loopback
address, path-style (``http://127.0.0.1:<port>/<account>/<container>/<blob>``), and implements
only the operations nxrs and these tests use: Create Container; Put Blob (block blobs, with
``Content-MD5`` checked: 400 Md5Mismatch); Get Blob (whole, or a range by ``x-ms-range`` or
``Range``: 206 with ``Content-Range``; past the end: 416 InvalidRange); Get Blob Properties
(HEAD); Delete Blob; List Blobs (``prefix``, ``delimiter``, ``marker``/``NextMarker``,
``maxresults``); Copy Blob (within the account, always finished when it answers: ``x-ms-copy-
status: success``); and the conditional headers ``If-Match`` and ``If-None-Match`` (412
ConditionNotMet; Put Blob's ``If-None-Match: *`` on an existing blob: 409 BlobAlreadyExists;
a read's matching ``If-None-Match``: 304). Errors carry ``x-ms-error-code`` and the XML error
body. Every request's check and write are made under one lock, so no other request comes
between them.

Not modelled: authentication (any ``Authorization`` is accepted: it is an emulator), leases,
snapshots, versions, page and append blobs, staged blocks (Put Block, Put Block List: nxrs
writes every object with one Put Blob), asynchronous copies, ``If-Modified-Since``/
``If-Unmodified-Since``, and the service's limits and throttling.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import re
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from store_support import Emulator, free_port, running

ACCOUNT = "devstoreaccount1"
#: The development storage account's well-known key (Azurite's, published by Microsoft); the
#: emulator checks no signature.
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
#: The service version the emulator answers with (``x-ms-version``) when a request names none.
SERVICE_VERSION = "2025-11-05"
#: List Blobs' page size when ``maxresults`` is not given. Azure's is 5000; a small one makes
#: the tests' listings take several pages (``NextMarker``).
DEFAULT_PAGE = 3


class AzureEmulator(Emulator):
    """The tests' Azure Blob emulator process (this module, run as a script)."""

    scheme = "az"

    def _request(self, method: str, path: str, data: bytes | None = None, **query: str) -> bytes:
        """One REST request by urllib (not the Azure SDK, which nxrs uses)."""
        url = f"{self.endpoint}/{ACCOUNT}/{urllib.parse.quote(path)}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("x-ms-version", SERVICE_VERSION)
        if data is not None:
            request.add_header("x-ms-blob-type", "BlockBlob")
        with urllib.request.urlopen(request, timeout=60) as response:
            body: bytes = response.read()
            return body

    def bucket(self) -> str:
        name = f"nxrs-{uuid.uuid4().hex[:12]}"
        self._request("PUT", name, b"", restype="container")
        return name

    def environment(self, endpoint: str) -> dict[str, str]:
        # adlfs reads the connection string, which names the endpoint and the credentials.
        return {
            "AZURE_STORAGE_CONNECTION_STRING": (
                f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
                f"BlobEndpoint={endpoint}/{ACCOUNT};"
            )
        }

    def secrets(self) -> list[str]:
        return [ACCOUNT_KEY, self.endpoint]

    def read(self, url: str) -> bytes:
        return self._request("GET", url.removeprefix("az://"))

    def write(self, url: str, data: bytes) -> None:
        self._request("PUT", url.removeprefix("az://"), data)

    def keys(self, url: str) -> list[str]:
        container, key = url.removeprefix("az://").split("/", 1)
        found: list[str] = []
        marker = ""
        while True:
            page = ET.fromstring(
                self._request(
                    "GET",
                    container,
                    restype="container",
                    comp="list",
                    prefix=key.rstrip("/") + "/",
                    marker=marker,
                )
            )
            found += [f"az://{container}/{n.text}" for n in page.iterfind("Blobs/Blob/Name")]
            marker = page.findtext("NextMarker") or ""
            if not marker:
                return found


@contextlib.contextmanager
def emulator() -> Iterator[AzureEmulator]:
    """Starts the emulator on a free loopback port and stops it after."""
    port = free_port()
    with running([sys.executable, __file__, str(port)], port, "the Azure emulator") as process:
        yield AzureEmulator(port, process)


# ---------------------------------------------------------------------- the service


@dataclass(frozen=True)
class Blob:
    data: bytes
    etag: str  # quoted, as the ETag header carries it
    modified: float
    md5: str  # base64


class Failure(Exception):
    """A request the service refuses: its status and error code."""

    def __init__(self, status: HTTPStatus, code: str) -> None:
        super().__init__(code)
        self.status, self.code = status, code


_LOCK = threading.Lock()
_CONTAINERS: dict[str, dict[str, Blob]] = {}
_ETAGS = itertools.count(0x8DC000000000000)


def _new_blob(data: bytes, md5: str) -> Blob:
    return Blob(data, f'"0x{next(_ETAGS):X}"', time.time(), md5)


def _md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


class Service(BaseHTTPRequestHandler):
    """One request of the Blob service REST API."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_PUT(self) -> None:
        self._answer("PUT")

    def do_GET(self) -> None:
        self._answer("GET")

    def do_HEAD(self) -> None:
        self._answer("HEAD")

    def do_DELETE(self) -> None:
        self._answer("DELETE")

    # ------------------------------------------------------------------ dispatch

    def _answer(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        self.query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        parts = urllib.parse.unquote(url.path).lstrip("/").split("/", 2)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if len(body) < length:  # the client went away mid-request: nothing is written
            self.close_connection = True
            return
        container = parts[1] if len(parts) > 1 else ""
        key = parts[2] if len(parts) > 2 else ""
        try:
            with _LOCK:
                if not key and method == "PUT" and self.query.get("restype") == "container":
                    if container in _CONTAINERS:
                        raise Failure(HTTPStatus.CONFLICT, "ContainerAlreadyExists")
                    _CONTAINERS[container] = {}
                    return self._send(HTTPStatus.CREATED)
                blobs = _CONTAINERS.get(container)
                if blobs is None:
                    raise Failure(HTTPStatus.NOT_FOUND, "ContainerNotFound")
                if not key and method == "GET" and self.query.get("comp") == "list":
                    return self._send(HTTPStatus.OK, _listing(container, blobs, self.query))
                if method == "PUT" and "x-ms-copy-source" in self.headers:
                    return self._copy(blobs, key)
                if method == "PUT":
                    return self._put(blobs, key, body)
                if method in ("GET", "HEAD"):
                    return self._get(blobs, key, method == "HEAD")
                if method == "DELETE":
                    self._condition(blobs.get(key), write=True)
                    if blobs.pop(key, None) is None:
                        raise Failure(HTTPStatus.NOT_FOUND, "BlobNotFound")
                    return self._send(HTTPStatus.ACCEPTED)
                raise Failure(HTTPStatus.BAD_REQUEST, "UnsupportedHttpVerb")
        except Failure as failure:
            self._fail(failure, head=method == "HEAD")

    # ------------------------------------------------------------------ operations

    def _condition(self, blob: Blob | None, *, write: bool) -> None:
        """``If-Match`` and ``If-None-Match`` (the ETag, or ``*``: any blob)."""
        if_match = self.headers.get("If-Match")
        if if_match is not None and (blob is None or if_match not in ("*", blob.etag)):
            raise Failure(HTTPStatus.PRECONDITION_FAILED, "ConditionNotMet")
        if_none = self.headers.get("If-None-Match")
        if if_none is not None and blob is not None and if_none in ("*", blob.etag):
            if not write:
                raise Failure(HTTPStatus.NOT_MODIFIED, "ConditionNotMet")
            if if_none == "*":
                raise Failure(HTTPStatus.CONFLICT, "BlobAlreadyExists")
            raise Failure(HTTPStatus.PRECONDITION_FAILED, "ConditionNotMet")

    def _put(self, blobs: dict[str, Blob], key: str, body: bytes) -> None:
        """Put Blob: the whole blob, its ``Content-MD5`` checked when given."""
        if self.headers.get("x-ms-blob-type") != "BlockBlob":
            raise Failure(HTTPStatus.BAD_REQUEST, "InvalidHeaderValue")
        md5 = _md5(body)
        sent = self.headers.get("Content-MD5")
        if sent is not None and sent != md5:
            raise Failure(HTTPStatus.BAD_REQUEST, "Md5Mismatch")
        self._condition(blobs.get(key), write=True)
        blob = blobs[key] = _new_blob(body, md5)
        self._send(HTTPStatus.CREATED, headers={**_written(blob), "Content-MD5": md5})

    def _copy(self, blobs: dict[str, Blob], key: str) -> None:
        """Copy Blob from a blob of this account (finished before the answer)."""
        source = urllib.parse.unquote(urllib.parse.urlsplit(self.headers["x-ms-copy-source"]).path)
        _, container, name = source.lstrip("/").split("/", 2)
        original = _CONTAINERS.get(container, {}).get(name)
        if original is None:
            raise Failure(HTTPStatus.NOT_FOUND, "CannotVerifyCopySource")
        self._condition(blobs.get(key), write=True)
        blob = blobs[key] = _new_blob(original.data, original.md5)
        copy = {"x-ms-copy-id": str(uuid.uuid4()), "x-ms-copy-status": "success"}
        self._send(HTTPStatus.ACCEPTED, headers={**_written(blob), **copy})

    def _get(self, blobs: dict[str, Blob], key: str, head: bool) -> None:
        """Get Blob (a range: 206) and Get Blob Properties (HEAD)."""
        blob = blobs.get(key)
        if blob is None:
            raise Failure(HTTPStatus.NOT_FOUND, "BlobNotFound")
        self._condition(blob, write=False)
        headers = {
            **_written(blob),
            "x-ms-blob-type": "BlockBlob",
            "Content-Type": "application/octet-stream",
            "Accept-Ranges": "bytes",
            "x-ms-creation-time": formatdate(blob.modified, usegmt=True),
            "x-ms-lease-state": "available",
            "x-ms-lease-status": "unlocked",
            "x-ms-server-encrypted": "true",
        }
        wanted = self.headers.get("x-ms-range") or self.headers.get("Range")
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted or "")
        if head or match is None:
            headers["Content-MD5"] = blob.md5
            return self._send(HTTPStatus.OK, blob.data, headers, head=head)
        start = int(match[1])
        end = min(int(match[2] or len(blob.data) - 1), len(blob.data) - 1)
        if start >= len(blob.data):
            raise Failure(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, "InvalidRange")
        headers["Content-Range"] = f"bytes {start}-{end}/{len(blob.data)}"
        headers["x-ms-blob-content-md5"] = blob.md5  # the whole blob's
        self._send(HTTPStatus.PARTIAL_CONTENT, blob.data[start : end + 1], headers)

    # ------------------------------------------------------------------ answers

    def _send(
        self,
        status: HTTPStatus,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        *,
        head: bool = False,
    ) -> None:
        """An answer; a HEAD's has the headers of the GET's (its Content-Length too), no body."""
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("x-ms-request-id", str(uuid.uuid4()))
        self.send_header("x-ms-version", self.headers.get("x-ms-version", SERVICE_VERSION))
        if body.startswith(b"<?xml"):
            self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _fail(self, failure: Failure, head: bool) -> None:
        body = (
            b""
            if head or failure.status == HTTPStatus.NOT_MODIFIED
            else (
                '<?xml version="1.0" encoding="utf-8"?><Error>'
                f"<Code>{failure.code}</Code><Message>{failure.code}\n"
                f"RequestId:{uuid.uuid4()}</Message></Error>"
            ).encode()
        )
        self._send(failure.status, body, {"x-ms-error-code": failure.code})


def _written(blob: Blob) -> dict[str, str]:
    return {
        "ETag": blob.etag,
        "Last-Modified": formatdate(blob.modified, usegmt=True),
    }


def _listing(container: str, blobs: dict[str, Blob], query: dict[str, str]) -> bytes:
    """List Blobs' XML: the blobs under ``prefix`` from ``marker`` on, those with ``delimiter``
    after the prefix folded into one BlobPrefix each, at most ``maxresults`` of both."""
    prefix, delimiter = query.get("prefix", ""), query.get("delimiter", "")
    marker, page = query.get("marker", ""), int(query.get("maxresults", DEFAULT_PAGE))
    entries: dict[str, Blob | None] = {}  # name: the blob, or None for a BlobPrefix
    for name in sorted(blobs):
        if not name.startswith(prefix):
            continue
        cut = name.find(delimiter, len(prefix)) if delimiter else -1
        entries[name[: cut + len(delimiter)] if cut >= 0 else name] = (
            None if cut >= 0 else blobs[name]
        )
    names = [name for name in sorted(entries) if name >= marker]
    root = ET.Element("EnumerationResults", ContainerName=container)
    for tag, value in (("Prefix", prefix), ("Marker", marker), ("MaxResults", str(page))):
        ET.SubElement(root, tag).text = value
    if delimiter:
        ET.SubElement(root, "Delimiter").text = delimiter
    listed = ET.SubElement(root, "Blobs")
    for name in names[:page]:
        blob = entries[name]
        if blob is None:
            ET.SubElement(ET.SubElement(listed, "BlobPrefix"), "Name").text = name
            continue
        item = ET.SubElement(listed, "Blob")
        ET.SubElement(item, "Name").text = name
        properties = ET.SubElement(item, "Properties")
        for tag, value in (
            ("Last-Modified", formatdate(blob.modified, usegmt=True)),
            ("Etag", blob.etag.strip('"')),  # unquoted in listings, as the service writes it
            ("Content-Length", str(len(blob.data))),
            ("Content-Type", "application/octet-stream"),
            ("Content-MD5", blob.md5),
            ("BlobType", "BlockBlob"),
            ("LeaseStatus", "unlocked"),
            ("LeaseState", "available"),
            ("ServerEncrypted", "true"),
        ):
            ET.SubElement(properties, tag).text = value
    ET.SubElement(root, "NextMarker").text = names[page] if len(names) > page else ""
    return b'<?xml version="1.0" encoding="utf-8"?>' + ET.tostring(root)


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Service).serve_forever()
