"""Run directories on object storage: checkpoints of a ~1 GB state saved to a
store, against the fsspec backend's own upload of the same bytes and against synchronous saves.

Run from the repository root (needs the test extra: moto[server] and s3fs; for ``--store gs``
gcp-storage-emulator and gcsfs; for ``--store az`` adlfs)::

    python bench/bench_object_store.py            # 4096-10240-4096 MLP, Adam: ~1 GB of state
    python bench/bench_object_store.py --quick    # 1024-4096-1024: ~100 MB
    python bench/bench_object_store.py --store gs --quick

The store is an emulator started on the loopback address (S3: moto's standalone server,
``tests/s3_support.py``; GCS: gcp-storage-emulator, ``tests/gcs_support.py``; Azure: the
tests' own Blob service emulator, ``tests/azure_support.py``): it measures
nxrs's side of the work (the local write, the checksum, the request) and the emulator's, not a
network; a real store's bandwidth bounds both sides the same way.

1. **Throughput of the background writer** on a store: what its thread runs for one
   checkpoint (``_Snapshot.save`` into the cache, crash-safe, then the upload in one PUT with
   its checksum and the size and checksum read back) against the backend's ``pipe`` of the
   same number of bytes from memory (what a user of fsspec would otherwise do; s3fs splits it
   into a multipart upload above 100 MB), best of 3; MB/s of the file's bytes. Also the upload
   alone.
2. **Training blocked per checkpoint**: the same ``fit`` on the store with synchronous and with
   background saves (the default there), saving every 60 steps (so that an upload finishes
   before the next save point); the training thread's time inside the run directory's save
   calls per checkpoint (``bench_async_save.blocked_time``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench_async_save import MB, arguments, blocked_time, data

import nxrs
from nxrs._runs.object_checkpoints import ObjectCheckpoints


def backend_upload(url: str) -> Callable[[bytes], object]:
    """What a user of the store's own library would write bytes with: fsspec's ``pipe`` (s3fs,
    gcsfs); for Azure the SDK's ``upload_blob`` in one Put Blob (adlfs's ``pipe`` stages blocks
    above 64 MiB, which the tests' emulator does not implement)."""
    if url.startswith("az://"):
        from azure.storage.blob import BlobServiceClient

        container, key = url.removeprefix("az://").split("/", 1)
        service = BlobServiceClient.from_connection_string(
            os.environ["AZURE_STORAGE_CONNECTION_STRING"], max_single_put_size=5000 * 2**20
        )
        blob = service.get_blob_client(container, f"{key}/raw.bin")
        return lambda payload: blob.upload_blob(payload, overwrite=True)
    import fsspec

    fs = fsspec.filesystem(url.split("://")[0], skip_instance_cache=True)
    return lambda payload: fs.pipe(f"{url}/raw.bin", payload)


def writer_against_pipe(layers: list[int], url: str, runs: int = 3) -> dict[str, float]:
    t = nxrs.Trainer(layers=layers, batch_size=1, lr=1e-4, seed=0)
    x, y = data(layers, 4)
    t.train_steps(x, y, 1)
    snapshot = t._snapshot()
    del t
    objects = ObjectCheckpoints(url)
    path = objects.cache / "step-000000000001.nxck"
    snapshot.save(path, metadata=[])
    size = path.stat().st_size
    payload = np.ones(size, dtype=np.uint8).tobytes()
    pipe = backend_upload(url)
    best = {"writer": float("inf"), "upload": float("inf"), "pipe": float("inf")}
    for run in range(runs + 1):  # the first of each untimed
        for kind in best:
            path.unlink(missing_ok=True)
            start = time.perf_counter()
            if kind == "pipe":
                pipe(payload)
            else:
                snapshot.save(path, metadata=[("data_fingerprint", "0" * 16)])
                if kind == "upload":
                    start = time.perf_counter()  # the upload alone
                objects.upload(path)
            seconds = time.perf_counter() - start
            if run > 0:
                best[kind] = min(best[kind], seconds)
    return {kind: size / seconds / MB for kind, seconds in best.items()} | {"bytes": size}


def blocked(layers: list[int], url: str, every: int, saves: int, async_save: bool) -> float:
    x, y = data(layers, every * (saves + 1) - 1)
    with blocked_time() as spent:
        t = nxrs.Trainer(layers=layers, batch_size=1, lr=1e-4, seed=0)
        t.fit(x, y, epochs=1, checkpoint=url, every=every, async_save=async_save, progress=False)
    return sum(sum(times) for times in spent.values()) / saves


def main() -> None:
    # Saves far enough apart that an upload (slower than a local write) finishes between two:
    # otherwise the second save point waits for the first, as documented, and that wait is
    # what would be measured.
    def store_option(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--store", choices=("s3", "gs", "az"), default="s3", help="default s3")

    args, layers = arguments(__doc__, every=60, more=store_option)
    starters = {"s3": "s3_support", "gs": "gcs_support", "az": "azure_support"}
    starter = importlib.import_module(starters[args.store])
    with starter.emulator() as server, tempfile.TemporaryDirectory() as cache:
        os.environ.update(server.environment(server.endpoint), NXRS_CACHE_DIR=cache)
        import fsspec.config

        fsspec.config.set_conf_env(fsspec.config.conf)  # the FSSPEC_* variables just set
        print(f"store: {args.store}:// ({type(server).__name__})")
        rates = writer_against_pipe(layers, server.url("writer"))
        print(f"1. one checkpoint of {rates['bytes'] / MB:.1f} MB to the emulator (best of 3):")
        print(f"   background writer (local write + upload + check): {rates['writer']:.0f} MB/s")
        print(f"   its upload alone (one request, checksum, checked): {rates['upload']:.0f} MB/s")
        print(f"   the backend's pipe of the same bytes from memory: {rates['pipe']:.0f} MB/s")
        print(f"   ratio writer / pipe: {rates['writer'] / rates['pipe']:.2f}x (goal >= 0.8x); "
              f"upload / pipe: {rates['upload'] / rates['pipe']:.2f}x")  # fmt: skip
        sync = blocked(layers, server.url("sync"), args.every, args.saves, False)
        background = blocked(layers, server.url("async"), args.every, args.saves, True)
        print(f"2. training blocked per checkpoint on the store ({args.saves} periodic saves):")
        print(f"   synchronous: {sync * 1e3:.0f} ms; background (the default): "
              f"{background * 1e3:.0f} ms; ratio {background / sync:.3f}x")  # fmt: skip


if __name__ == "__main__":
    main()
