"""An S3 emulator for the object-storage tests: moto's standalone server (``moto[server]``, in
the test extra) started as a process on the loopback address."""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import Iterator
from typing import Any

from store_support import Emulator, free_port, running

#: Credentials the emulator accepts (any); never real ones.
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class S3Emulator(Emulator):
    """moto's server process."""

    scheme = "s3"

    def _client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=FAKE_CREDENTIALS["AWS_DEFAULT_REGION"],
        )

    def bucket(self) -> str:
        name = f"nxrs-{uuid.uuid4().hex[:12]}"
        self._client().create_bucket(Bucket=name)
        return name

    def environment(self, endpoint: str) -> dict[str, str]:
        return {**FAKE_CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}

    def secrets(self) -> list[str]:
        return [FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"], self.endpoint]

    def read(self, url: str) -> bytes:
        bucket, key = url.removeprefix("s3://").split("/", 1)
        body: bytes = self._client().get_object(Bucket=bucket, Key=key)["Body"].read()
        return body

    def write(self, url: str, data: bytes) -> None:
        bucket, key = url.removeprefix("s3://").split("/", 1)
        self._client().put_object(Bucket=bucket, Key=key, Body=data)

    def keys(self, url: str) -> list[str]:
        bucket, key = url.removeprefix("s3://").split("/", 1)
        listed = self._client().list_objects_v2(Bucket=bucket, Prefix=key.rstrip("/") + "/")
        return [f"s3://{bucket}/{item['Key']}" for item in listed.get("Contents", [])]


@contextlib.contextmanager
def emulator() -> Iterator[S3Emulator]:
    """Starts moto's server on a free loopback port and stops it after."""
    port = free_port()
    argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    with running(argv, port, "moto's server") as process:
        yield S3Emulator(port, process)
