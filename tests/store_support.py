"""What the object-storage tests share across stores: an emulator's process on the loopback
address (``Emulator``: each store's subclass says how to reach it and how to read and write
its objects without nxrs), and a TCP proxy in front of it that makes checkpoint uploads slow,
fail or stall (the tests' fault injection).

An emulator is not the cloud's store: it implements the API (conditional writes, checksums)
in memory. What the tests show is that nxrs keeps its promises against that API; the stores'
own behaviour under load (eventual consistency, throttling) is described in docs/RUNS.md.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Emulator(ABC):
    """A store's emulator, a process listening on ``port``."""

    port: int
    process: subprocess.Popen[bytes]
    #: The URL scheme of the store (``s3``, ``gs``, ``az``).
    scheme = ""

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        """A directory's URL in a new bucket."""
        return f"{self.scheme}://{self.bucket()}/{path}"

    @abstractmethod
    def bucket(self) -> str:
        """A new bucket's name (created now)."""

    @abstractmethod
    def environment(self, endpoint: str) -> dict[str, str]:
        """The variables that point a process's backend at ``endpoint`` (the emulator's, or a
        proxy's in front of it), with the emulator's credentials: the one place that says
        where the endpoint goes (a variable of its own, or inside a connection string)."""

    @abstractmethod
    def secrets(self) -> list[str]:
        """What must never appear in a run's objects (credentials, the endpoint)."""

    @abstractmethod
    def read(self, url: str) -> bytes:
        """The bytes of the object ``url``, read with the store's own client, not nxrs."""

    @abstractmethod
    def write(self, url: str, data: bytes) -> None:
        """Writes the object ``url`` with the store's own client, not nxrs."""

    @abstractmethod
    def keys(self, url: str) -> list[str]:
        """The URLs of every object under the folder ``url``, at any depth."""


@contextlib.contextmanager
def running(argv: list[str], port: int, name: str) -> Iterator[subprocess.Popen[bytes]]:
    """Starts ``argv`` (a server that will listen on ``port``), waits until it accepts
    connections, and stops it after."""
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start")
            time.sleep(0.1)
        yield process
    finally:
        process.terminate()
        process.wait(timeout=30)


def store_environment(emulator: Emulator, endpoint: str, cache: str) -> dict[str, str]:
    """The environment of a process using the store at ``endpoint``, with its nxrs cache in
    ``cache``."""
    return {**os.environ, **emulator.environment(endpoint), "NXRS_CACHE_DIR": cache}


@dataclass
class FaultProxy:
    """A TCP proxy to ``upstream`` on the loopback address. ``mode`` applies to connections
    while they carry an upload of a checkpoint object (``step-``): None passes everything,
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
                    line = piece.split(b"\r\n", 1)[0]
                    # S3 and Azure name the object in the path (PUT), GCS in the query
                    # (POST).
                    uploading = line.startswith((b"PUT ", b"POST ")) and b"step-" in line
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
