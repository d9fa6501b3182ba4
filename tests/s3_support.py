"""An S3 emulator for the object-storage tests: moto's standalone server (``moto[server]``, in
the test extra) started as a process on the loopback address, and a TCP proxy in front of it
that can make checkpoint uploads slow or fail (the tests' fault injection).

The emulator is not S3: it implements the API (conditional writes, checksums) in memory. What
it shows is that nxrs keeps its promises against that API; AWS's own behaviour under load
(eventual consistency of listings in other stores, throttling) is described in docs/RUNS.md.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

#: Credentials the emulator accepts (any); never real ones.
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Emulator:
    """moto's server process, listening on ``port``."""

    port: int
    process: subprocess.Popen[bytes]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def bucket(self) -> str:
        """A new bucket's name (created now)."""
        import boto3

        name = f"nxrs-{uuid.uuid4().hex[:12]}"
        client = boto3.client("s3", endpoint_url=self.endpoint, **_boto_credentials())
        client.create_bucket(Bucket=name)
        return name


def _boto_credentials() -> dict[str, str]:
    return {
        "aws_access_key_id": FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "region_name": FAKE_CREDENTIALS["AWS_DEFAULT_REGION"],
    }


@contextlib.contextmanager
def emulator() -> Iterator[Emulator]:
    """Starts moto's server on a free loopback port and stops it after."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("moto's server did not start")
            time.sleep(0.1)
        yield Emulator(port, process)
    finally:
        process.terminate()
        process.wait(timeout=30)


@dataclass
class FaultProxy:
    """A TCP proxy to ``upstream`` on the loopback address. ``mode`` applies to connections
    while they carry a PUT of a checkpoint object (``/step-``): None passes everything,
    ``"slow"`` delays each piece of the upload by ``delay`` seconds, ``"fail"`` cuts the
    connection (the client sees a reset, retries, and gives up), ``"stall"`` stops forwarding
    (no answer ever comes: the client's read timeout decides)."""

    upstream: int
    mode: str | None = None
    delay: float = 0.02
    port: int = 0
    #: Checkpoint uploads the proxy has seen (any mode), and those under way now (a request
    #: ends when its connection starts the next one or closes).
    uploads: int = 0
    uploading_now: int = 0
    _server: socket.socket | None = None
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> FaultProxy:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        self.port = server.getsockname()[1]
        self._server = server
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

    def _accept(self) -> None:
        assert self._server is not None
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self._forward, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    def _forward(self, client: socket.socket, upstream: socket.socket) -> None:
        """Client to server, where the faults are: a piece that starts a request decides
        whether the connection now carries a checkpoint upload."""
        uploading = False
        try:
            while piece := client.recv(65536):
                if piece[:8].split(b" ", 1)[0] in (b"GET", b"PUT", b"HEAD", b"POST", b"DELETE"):
                    self.uploading_now -= uploading
                    uploading = piece.startswith(b"PUT ") and b"/step-" in piece.split(b"\r\n")[0]
                    self.uploads += uploading
                    self.uploading_now += uploading
                if uploading and self.mode == "fail":
                    return
                if uploading and self.mode == "stall":
                    continue  # swallowed: the server never sees the request
                if uploading and self.mode == "slow":
                    time.sleep(self.delay)
                upstream.sendall(piece)
        except OSError:
            pass
        finally:
            self.uploading_now -= uploading
            _close(client, upstream)

    @staticmethod
    def _pipe(source: socket.socket, target: socket.socket) -> None:
        try:
            while piece := source.recv(65536):
                target.sendall(piece)
        except OSError:
            pass
        finally:
            _close(source, target)


def _close(*sockets: socket.socket) -> None:
    for s in sockets:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        s.close()


def store_environment(endpoint: str, cache: str) -> dict[str, str]:
    """The environment a process needs to use the emulator at ``endpoint`` (botocore reads
    ``AWS_ENDPOINT_URL``), with its nxrs cache in ``cache``."""
    return {**os.environ, **FAKE_CREDENTIALS, "AWS_ENDPOINT_URL": endpoint, "NXRS_CACHE_DIR": cache}
