"""Run directories on object storage (``docs/RUNS.md``, "Run directories on object storage"),
against each store's emulator started on the loopback address (S3: moto's standalone server,
``s3_support``; GCS: gcp-storage-emulator with generation preconditions, ``gcs_support``; Azure:
the tests' own emulator of the Blob service's REST API, ``azure_support``), every test once per
store: the same bits as a local run, resume from the local cache, the lease (a second
process refused, a lost machine's lease expiring, a process whose lease was taken over stopping),
the manifest's conditional writes, kills at random moments (uploads included), uploads that fail
or are slow, and ``nxrs status`` on a URL.

Every claim of sameness compares full-state hashes or bytes, never a tolerance.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from store_support import Emulator, FaultProxy, store_environment

import nxrs
import nxrs._runs.async_save
from nxrs._runs.async_save import SavedState
from nxrs._runs.directory import ObjectRunDirectory
from nxrs._runs.errors import LEASE_NAME, MANIFEST_NAME, RunLockedError
from nxrs._runs.lease import LeaseLostError, lease_holder
from nxrs._runs.transcript import TRANSCRIPT_NAME, DataDigests, Transcript, segment_name
from nxrs._storage.store import ObjectDirectory, open_store

LAYERS = [16, 32, 4]
#: Short leases, so that a killed holder's lease expires within the tests' patience.
LEASE_SECONDS = "2"


#: Each store: its backend package, its emulator's package, and the emulator's starter.
STORES = {
    "s3": ("s3fs", "moto", "s3_support"),
    "gs": ("gcsfs", "gcp_storage_emulator", "gcs_support"),
    # The tests' own emulator (Azurite cannot be installed here): it needs no package.
    "az": ("adlfs", "azure_support", "azure_support"),
}


@pytest.fixture(scope="module", params=sorted(STORES))
def store(request: pytest.FixtureRequest) -> Iterator[Emulator]:
    """The store's emulator (every test of this module runs once per store)."""
    import importlib

    backend, server, starter = STORES[request.param]
    for package in (backend, server):
        if os.environ.get("CI"):
            importlib.import_module(package)  # the test extra installs them: missing fails CI
        else:
            pytest.importorskip(package)
    with importlib.import_module(starter).emulator() as emulator:
        yield emulator


@pytest.fixture
def env(store: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process (and the children given the returned environment) pointed at the emulator,
    with a fresh nxrs cache."""
    environment = store_environment(store, store.endpoint, str(tmp_path / "cache"))
    environment["NXRS_LEASE_SECONDS"] = LEASE_SECONDS
    for key in (*store.environment(store.endpoint), "NXRS_CACHE_DIR", "NXRS_LEASE_SECONDS"):
        monkeypatch.setenv(key, environment[key])
    # fsspec read its FSSPEC_* variables when it was imported, before these were set.
    import fsspec.config

    conf = copy.deepcopy(fsspec.config.conf)
    fsspec.config.set_conf_env(conf, environment)
    monkeypatch.setattr(fsspec.config, "conf", conf)
    return environment


@pytest.fixture
def url(store: Emulator, env: dict[str, str]) -> str:
    """A run directory's URL in a new bucket."""
    return store.url("runs/a")


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(96, 16)).astype(np.float32)
    return x, np.argmax(x[:, :4], axis=1).astype(np.int64)


def trainer() -> nxrs.Trainer:
    return nxrs.Trainer(LAYERS, seed=5, batch_size=8, lr=0.01)


def uninterrupted_hash(data: tuple[np.ndarray, np.ndarray], epochs: int) -> int:
    t = trainer()
    t.fit(*data, epochs=epochs, progress=False)
    return t.state_hash()


def names(url: str) -> list[str]:
    return [o.name for o in open_store(url).listing()]


def count_downloads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the objects downloaded from now on."""
    seen: list[str] = []
    original = ObjectDirectory.download

    def download(self: ObjectDirectory, name: str, target: Path) -> str:
        seen.append(name)
        return original(self, name, target)

    monkeypatch.setattr(ObjectDirectory, "download", download)
    return seen


# ---------------------------------------------------------------------- the same bits


@pytest.mark.parametrize("async_save", [False, True])
def test_a_run_on_a_store_ends_in_the_bits_and_bytes_of_a_local_run(
    store: Emulator, url: str, tmp_path: Path, data: tuple[np.ndarray, np.ndarray], async_save: bool
) -> None:
    remote, local = trainer(), trainer()
    history = remote.fit(*data, epochs=3, checkpoint=url, every=5, async_save=async_save)
    local.fit(*data, epochs=3, checkpoint=tmp_path / "local", every=5, async_save=async_save)
    assert remote.state_hash() == local.state_hash() == uninterrupted_hash(data, 3)
    # The final checkpoint object is byte for byte the local run's file.
    assert history.checkpoint is not None
    name = history.checkpoint.name
    assert store.read(f"{url}/{name}") == (tmp_path / "local" / name).read_bytes()
    manifest = json.loads(store.read(f"{url}/{MANIFEST_NAME}"))
    assert manifest["state"] == "complete"
    progress = manifest["progress"]
    assert progress["checkpoint"] == name
    assert progress["bytes"] == len(store.read(f"{url}/{name}"))
    import hashlib

    assert progress["sha256"] == hashlib.sha256(store.read(f"{url}/{name}")).hexdigest()
    # keep=3 pruned the store as it prunes a directory.
    assert sorted(n for n in names(url) if n.endswith(".nxck")) == sorted(
        p.name for p in (tmp_path / "local").glob("step-*.nxck")
    )


def test_a_token_stream_run_on_a_store_resumes_to_the_bits_of_a_local_run(
    store: Emulator, url: str, tmp_path: Path
) -> None:
    """A character model trained by steps on a token stream (docs/TRAINING.md section 15.8):
    the same run directory features on object storage (async saves by default), resumed."""
    text = nxrs.data.Text.from_string("to be, or not to be, that is the question:\n" * 10)
    layers = nxrs.layers.gpt(len(text.vocab), context=8, layers=1, heads=1, width=8)

    def gpt() -> nxrs.Trainer:
        return nxrs.Trainer(layers=layers, optimizer="adamw", batch_size=3, seed=2)

    first, again, local = gpt(), gpt(), gpt()
    first.fit(text.train, steps=4, checkpoint=url, every=2)
    history = again.fit(text.train, steps=8, checkpoint=url, every=2, validation_data=text.val)
    local.fit(text.train, steps=8, checkpoint=tmp_path / "local", every=2)
    assert again.state_digest() == local.state_digest()
    assert history.step == [8] and history.checkpoint is not None
    name = history.checkpoint.name
    assert store.read(f"{url}/{name}") == (tmp_path / "local" / name).read_bytes()


def test_async_saves_are_the_default_on_a_store(
    url: str, data: tuple[np.ndarray, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    from nxrs._runs import async_save as _async_save

    started: list[int] = []
    original = _async_save.SaveInFlight.start

    def start(*args: object, **kwargs: object) -> _async_save.SaveInFlight:
        job = original(*args, **kwargs)  # type: ignore[arg-type]
        started.append(job.steps)
        return job

    monkeypatch.setattr(_async_save.SaveInFlight, "start", start)
    trainer().fit(*data, epochs=2, checkpoint=url, every=6)
    assert started, "no periodic save went to the background"
    started.clear()
    trainer().fit(*data, epochs=3, checkpoint=url, every=6, async_save=False)
    assert started == []


def test_a_resume_on_the_same_machine_reads_the_checkpoint_from_the_cache(
    url: str,
    data: tuple[np.ndarray, np.ndarray],
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
) -> None:
    trainer().fit(*data, epochs=2, checkpoint=url, every=5)
    downloads = count_downloads(monkeypatch)
    resumed = trainer()
    resumed.fit(*data, epochs=4, checkpoint=url, every=5)
    assert downloads == []
    assert resumed.state_hash() == uninterrupted_hash(data, 4)
    # Another machine (an empty cache) downloads the newest checkpoint, once.
    import shutil

    shutil.rmtree(env["NXRS_CACHE_DIR"])
    again = trainer()
    again.fit(*data, epochs=5, checkpoint=url, every=5)
    assert downloads == ["step-000000000048.nxck"]
    assert again.state_hash() == uninterrupted_hash(data, 5)


def test_a_damaged_newer_object_is_skipped_never_used(
    store: Emulator, url: str, data: tuple[np.ndarray, np.ndarray]
) -> None:
    trainer().fit(*data, epochs=2, checkpoint=url, every=5)
    good = store.read(f"{url}/step-000000000024.nxck")
    # A torn object under a newer checkpoint's name (another tool's partial upload, say).
    store.write(f"{url}/step-000000000030.nxck", good[:-9])
    resumed = trainer()
    with pytest.warns(nxrs.CorruptCheckpointWarning, match="step-000000000030"):
        resumed.fit(*data, epochs=3, checkpoint=url, every=5)
    assert resumed.state_hash() == uninterrupted_hash(data, 3)


def test_an_upload_whose_bytes_do_not_match_its_checksum_is_never_stored(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store checks a checkpoint's bytes against the checksum sent with them: bytes that
    changed after their checksum was taken (a failing disk, say) are refused, not stored."""
    from nxrs._storage import store as _store

    path = tmp_path / "step-000000000001.nxck"
    path.write_bytes(b"x" * 100_000)
    original = _store.file_digests

    def digests_then_change(source: Path, algorithms: tuple[str, ...]) -> dict[str, bytes]:
        found = original(source, algorithms)
        source.write_bytes(b"y" * 100_000)
        return found

    monkeypatch.setattr(_store, "file_digests", digests_then_change)
    with pytest.raises(OSError):
        open_store(url).upload(path.name, path)
    assert path.name not in names(url)


def test_checkpoint_manager_on_a_store(store: Emulator, url: str) -> None:
    manager = nxrs.CheckpointManager(url, keep=2)
    for step in range(1, 5):
        t = trainer()
        t.fit(np.zeros((8, 16), np.float32), np.zeros(8, np.int64), epochs=step, progress=False)
        manager.save(t, step=step)
    assert [e.step for e in manager.list()] == [3, 4]
    latest = manager.latest()
    assert latest is not None and latest.url == f"{url}/step-000000000004.nxck"
    loaded = manager.load_latest()
    assert loaded is not None and loaded.epoch == 4
    assert store.read(latest.url) == latest.path.read_bytes()


@pytest.mark.parametrize("location", ["memory://run", "hdfs://namenode/run"])
def test_stores_without_the_conditional_writes_nxrs_implements_are_refused(
    location: str, data: tuple[np.ndarray, np.ndarray]
) -> None:
    with pytest.raises(nxrs.ConfigError, match="conditional writes"):
        nxrs.CheckpointManager(location)
    t = trainer()
    with pytest.raises(nxrs.ConfigError, match="conditional writes"):
        t.fit(*data, epochs=1, checkpoint=location)
    assert t.steps == 0


@pytest.mark.parametrize(
    ("location", "package", "extra"),
    [
        ("s3://bucket/run", "s3fs", "s3"),
        ("gs://bucket/run", "gcsfs", "gcs"),
        ("az://container/run", "adlfs", "azure"),
    ],
)
def test_a_store_whose_backend_is_not_installed_names_the_extra(
    location: str, package: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, package, None)  # import fails as if not installed
    with pytest.raises(nxrs.ConfigError, match=rf"pip install 'nxrs\[{extra}\]'"):
        nxrs.CheckpointManager(location)


def test_azure_urls_abfs_names_the_same_directory_and_the_account_comes_from_the_environment(
    store: Emulator, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``abfs://`` and ``abfss://`` are adlfs's other names of ``az://``; the account is the
    environment's, never the URL's (nxrs stores no credential, and reads none from a URL)."""
    if store.scheme != "az":
        pytest.skip("Azure's URL forms")
    open_store(url).put("x", b"1")
    for scheme in ("abfs", "abfss", "AZ"):
        assert [o.name for o in open_store(scheme + url[2:]).listing()] == ["x"]
    with pytest.raises(nxrs.ConfigError, match="az://container/path"):
        open_store("abfs://container@account.dfs.core.windows.net/run")
    for variable in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT_NAME"):
        monkeypatch.delenv(variable, raising=False)
    with pytest.raises(nxrs.ConfigError, match="connection_string or account_name"):
        open_store(url)


def test_an_azure_download_reads_one_version_only(
    store: Emulator, url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each ranged read of a download is conditional on the ETag read first: a blob replaced
    between two of them fails the download (OSError) rather than mixing two versions."""
    if store.scheme != "az":
        pytest.skip("Azure's ranged downloads")
    from nxrs._storage import store as _store

    monkeypatch.setattr(_store, "PIECE", 1000)  # three pieces
    directory = open_store(url)
    first = b"a" * 2500
    directory.put("blob", first)
    reading = directory._read("blob")
    assert next(reading.pieces) == first[:1000]
    directory.put("blob", b"b" * len(first))
    with pytest.raises(OSError, match="replaced during the download"):
        next(reading.pieces)
    assert directory.download("blob", tmp_path / "blob") == directory.version("blob")
    assert (tmp_path / "blob").read_bytes() == b"b" * len(first)


def test_a_bad_lease_duration_is_a_config_error(
    url: str, data: tuple[np.ndarray, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    for text in ("0", "soon", "inf", "nan"):
        monkeypatch.setenv("NXRS_LEASE_SECONDS", text)
        with pytest.raises(nxrs.ConfigError, match="NXRS_LEASE_SECONDS"):
            trainer().fit(*data, epochs=1, checkpoint=url)


def test_a_bad_store_timeout_is_a_config_error(
    url: str, data: tuple[np.ndarray, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    for text in ("0", "-1", "soon", "inf", "nan"):
        monkeypatch.setenv("NXRS_STORE_TIMEOUT", text)
        t = trainer()
        with pytest.raises(nxrs.ConfigError, match="NXRS_STORE_TIMEOUT"):
            t.fit(*data, epochs=1, checkpoint=url)
        assert t.steps == 0
    monkeypatch.setenv("NXRS_STORE_TIMEOUT", "30")
    assert names(url) == [], "a refused run wrote to the store"


# ---------------------------------------------------------------------- one writer

HOLD = """
import sys, time
from nxrs._runs.directory import ObjectRunDirectory
run = ObjectRunDirectory(sys.argv[1])
run.acquire()
print("held", flush=True)
time.sleep(600)
"""


def hold(url: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """A process holding ``url``'s lease (renewing it) until killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, url], env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def wait_until_free(url: str, seconds: float = 30) -> float:
    start = time.monotonic()
    while lease_holder(open_store(url)) is not None:
        assert time.monotonic() - start < seconds, "the lease never expired"
        time.sleep(0.2)
    return time.monotonic() - start


def test_a_second_process_is_refused_and_takes_over_once_the_lease_expires(
    url: str, env: dict[str, str], data: tuple[np.ndarray, np.ndarray]
) -> None:
    holder = hold(url, env)
    try:
        # Renewed while its holder lives: longer than a lease, still refused.
        time.sleep(float(LEASE_SECONDS) * 1.5)
        with pytest.raises(RunLockedError, match="in use by process"):
            trainer().fit(*data, epochs=1, checkpoint=url)
        status = subprocess.run(
            [sys.executable, "-m", "nxrs", "status", url, "--json"],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert json.loads(status.stdout)["running"].startswith(f"process {holder.pid} ")
    finally:
        holder.send_signal(signal.SIGKILL)  # a lost machine: no release
        holder.communicate()
    waited = wait_until_free(url)
    assert waited <= float(LEASE_SECONDS) + 3
    t = trainer()
    t.fit(*data, epochs=1, checkpoint=url)
    assert t.state_hash() == uninterrupted_hash(data, 1)


def killed_holder(url: str, env: dict[str, str]) -> int:
    """The pid of a process that held ``url``'s lease and was killed a moment ago (a spot
    machine reclaimed): its lease is neither released nor expired."""
    holder = hold(url, env)
    holder.send_signal(signal.SIGKILL)
    holder.communicate()
    return holder.pid


def test_a_restart_right_after_a_kill_waits_for_the_lease_and_takes_the_run_over(
    url: str, env: dict[str, str], data_file: Path
) -> None:
    argv = train_argv(data_file, url, 1, 20)
    # A lease longer than an interpreter's start, so that it is still held when nxrs starts.
    env = {**env, "NXRS_LEASE_SECONDS": "8"}
    pid = killed_holder(url, env)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (waiting,) = [line for line in done.stderr.splitlines() if "waiting for it" in line]
    assert waiting.startswith(f"nxrs train: {url} is held by process {pid} on ")
    assert "expires in" in waiting
    assert json.loads(done.stdout.splitlines()[-1])["state_hash"] == uninterrupted_command(
        argv, env
    )
    # A signal while waiting ends the wait at once, changing nothing.
    before = {n: store_bytes(url, n) for n in names(url) if not n.startswith(".")}
    pid = killed_holder(url, env)
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    proc = subprocess.Popen(argv, env=env, **pipes)  # type: ignore[call-overload]
    assert proc.stderr is not None
    while "waiting for it" not in (line := proc.stderr.readline()):
        assert line, "it never waited"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 4 and "stopped waiting for the lease" in err and "SIGTERM" in err
    assert {n: store_bytes(url, n) for n in names(url) if not n.startswith(".")} == before


def store_bytes(url: str, name: str) -> bytes | None:
    found = open_store(url).get(name)
    return None if found is None else found.data


def test_a_holder_seen_renewing_its_lease_is_refused_at_once(
    url: str, env: dict[str, str], data: tuple[np.ndarray, np.ndarray]
) -> None:
    # A lease of 8 s, renewed every 2.7 s: a loaded machine (a holder whose renewal comes late,
    # a slow start of fit) still sees a renewal long before the lease would expire.
    lease = 8.0
    holder = hold(url, {**env, "NXRS_LEASE_SECONDS": str(int(lease))})
    try:
        start = time.monotonic()
        with pytest.raises(
            RunLockedError, match=f"in use by process {holder.pid} .*, seen renewing its lease"
        ):
            trainer().fit(*data, epochs=1, checkpoint=url)
        # It renews every third of its lease: seen well before the lease would expire.
        assert time.monotonic() - start < lease
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.communicate()


def test_of_two_processes_racing_for_a_free_lease_exactly_one_wins(url: str) -> None:
    a, b = ObjectRunDirectory(url), ObjectRunDirectory(url)
    a.acquire()
    try:
        with pytest.raises(RunLockedError):
            b.acquire()
    finally:
        a.release()
    b.acquire()  # released: free at once, no waiting for expiry
    b.release()


def test_only_the_lease_holder_writes_the_manifest(store: Emulator, url: str) -> None:
    a, b = ObjectRunDirectory(url), ObjectRunDirectory(url)
    a.acquire()
    try:
        a.write_manifest({"written_by": "a"})
        b._manifest_bytes()  # b read the version a wrote
        with pytest.raises(LeaseLostError, match="does not hold the run's lease"):
            b.write_manifest({"written_by": "b"})
    finally:
        a.release()
    assert json.loads(store.read(f"{url}/{MANIFEST_NAME}"))["written_by"] == "a"


# ---------------------------------------------------------------------- a takeover


def pause(run: ObjectRunDirectory) -> None:
    """``run``'s process stops renewing its lease, as one paused (a stopped VM, SIGSTOP) or
    cut off from the store does, without knowing it."""
    lease = run._lease
    lease._stop.set()
    lease._renewer.join()


DATA = DataDigests(digest="d" * 64, train="t" * 64)


def saved(step: int) -> SavedState:
    return SavedState(step, 0, step, f"{step:064x}", "c" * 64)


def test_a_process_that_lost_its_lease_writes_nothing_more(store: Emulator, url: str) -> None:
    a = ObjectRunDirectory(url)
    a.acquire()
    a.write_manifest({"written_by": "a"})
    late = a.transcript()
    late.read()
    late.add(saved(0), "start", None, DATA)
    late.write()
    pause(a)
    wait_until_free(url)
    b = ObjectRunDirectory(url)
    b.acquire()
    try:
        b._manifest_bytes()  # b read what a wrote, as fit does when it starts
        before = {n: store.read(f"{url}/{n}") for n in names(url) if not n.startswith(".")}
        # a goes on (its renewer has not noticed yet): it learns it lost the lease before
        # it writes anything.
        with pytest.raises(LeaseLostError, match="lost its lease"):
            a.write_manifest({"written_by": "a, late"})
        late.add(saved(3), "checkpoint", "step-000000000003.nxck", DATA)
        with pytest.raises(LeaseLostError, match="lost its lease"):
            late.write()
        after = {n: store.read(f"{url}/{n}") for n in names(url) if not n.startswith(".")}
        assert after == before
        b.write_manifest({"written_by": "b"})
    finally:
        b.release()
    assert json.loads(store.read(f"{url}/{MANIFEST_NAME}"))["written_by"] == "b"


def test_the_holder_survives_a_late_write_that_lost_its_race(store: Emulator, url: str) -> None:
    b = ObjectRunDirectory(url)
    b.acquire()
    try:
        b.write_manifest({"written_by": "b"})
        transcript = b.transcript()
        transcript.read()
        transcript.add(saved(0), "start", None, DATA)
        transcript.write()
        # The process b took the lease from wrote late: its requests left before the takeover.
        directory = open_store(url)
        directory.put(MANIFEST_NAME, b'{"written_by": "the previous holder"}')
        directory.put(segment_name(1), b'{"entry": 1, "written_by": "the previous holder"}\n')
        b.write_manifest({"written_by": "b, again"})
        transcript.add(saved(3), "checkpoint", "step-000000000003.nxck", DATA)
        transcript.write()
    finally:
        b.release()
    assert json.loads(store.read(f"{url}/{MANIFEST_NAME}"))["written_by"] == "b, again"
    reread = Transcript(url, open_store(url)).read()
    assert reread == transcript.entries and [e["step"] for e in reread] == [0, 3]


def train_argv(data_file: Path, url: str, epochs: int, every: int, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "nxrs", "train", "--data", str(data_file), "--layers",
        "16,256,256,4", "--batch-size", "8", "--lr", "0.01", "--epochs", str(epochs),
        "--ckpt-dir", url, "--every", str(every), "--json", *extra,
    ]  # fmt: skip


def uninterrupted_command(argv: list[str], env: dict[str, str]) -> str:
    """The full-state hash ``nxrs train`` ends on without its run directory (uninterrupted)."""
    reference = subprocess.run(
        [*argv[: argv.index("--ckpt-dir")], "--json"], env=env, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert reference.returncode == 0, reference.stderr
    state_hash: str = json.loads(reference.stdout.splitlines()[-1])["state_hash"]
    return state_hash


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(11)
    x = rng.normal(size=(500, 16)).astype(np.float32)
    path = tmp_path_factory.mktemp("s3-data") / "data.npz"
    np.savez(path, X=x, y=np.argmax(x[:, :4], axis=1).astype(np.int64))
    return path


def test_a_process_whose_lease_is_taken_over_stops_without_writing(
    store: Emulator, url: str, env: dict[str, str], data_file: Path
) -> None:
    proc = subprocess.Popen(
        train_argv(data_file, url, 10_000, 50), env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        directory = open_store(url)
        deadline = time.monotonic() + 120
        while directory.get(MANIFEST_NAME) is None:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        # Another process takes the lease over (as one would after this one failed to renew).
        usurper = json.dumps({"holder": "the usurper", "token": "x", "seconds": 600}).encode()
        directory.put(LEASE_NAME, usurper)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 4, err
    assert "lost its lease" in err or "changed by another process" in err
    assert directory.get(LEASE_NAME).data == usurper  # type: ignore[union-attr]


def test_after_a_takeover_the_old_holder_stops_and_the_new_one_finishes(
    store: Emulator, env: dict[str, str], data_file: Path
) -> None:
    """A process paused (SIGSTOP) past its lease, its successor taking the run over, then the
    paused one let go on: it stops (exit 4) without writing, and the successor ends the run
    as an uninterrupted one, with a transcript that verifies."""
    url = store.url("takeover")
    argv = train_argv(data_file, url, 30, 50)
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    first = subprocess.Popen(argv, env=env, **pipes)  # type: ignore[call-overload]
    try:
        directory = open_store(url)
        deadline = time.monotonic() + 120
        while len(Transcript(url, directory).read() if directory.exists() else []) < 4:
            assert first.poll() is None and time.monotonic() < deadline, "it ended too soon"
            time.sleep(0.05)
        first.send_signal(signal.SIGSTOP)
        wait_until_free(url)
        second = subprocess.Popen(argv, env=env, **pipes)  # type: ignore[call-overload]
        assert second.stderr is not None
        while f"resuming {url}" not in (line := second.stderr.readline()):
            assert line, "the second process never resumed the run"
        first.send_signal(signal.SIGCONT)
        _, first_err = first.communicate(timeout=120)
        out, err = second.communicate(timeout=600)
    finally:
        first.kill()
    assert first.returncode == 4, first_err
    assert "lost its lease" in first_err
    assert second.returncode == 0, err
    assert json.loads(out.splitlines()[-1])["state_hash"] == uninterrupted_command(argv, env)
    verified = subprocess.run(
        [sys.executable, "-m", "nxrs", "verify", url, "--json"],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr


# ---------------------------------------------------------------------- kills and faults


@pytest.fixture
def proxy(store: Emulator) -> Iterator[FaultProxy]:
    p = FaultProxy(store.port).start()
    yield p
    p.close()


@pytest.fixture
def via_proxy(
    store: Emulator, proxy: FaultProxy, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> FaultProxy:
    """This process's requests to the store go through ``proxy``."""
    for key, value in store.environment(proxy.endpoint).items():
        monkeypatch.setenv(key, value)
    return proxy


def test_killed_at_random_moments_including_uploads_the_run_ends_in_the_same_bits(
    store: Emulator,
    env: dict[str, str],
    proxy: FaultProxy,
    data_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """SIGKILL 12 times, at random instants of a process's life and of a checkpoint's upload
    (uploads slowed through the proxy), restarting the same command each time (after the
    killed holder's lease expired):
    the final state equals the uninterrupted run's, and no partial object is ever used."""
    kills_wanted = 12
    seed = random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    env = {**env, **store.environment(proxy.endpoint), "NXRS_LEASE_SECONDS": "1"}
    proxy.mode, proxy.delay = "slow", 0.03
    url = store.url("chaos")
    argv = train_argv(data_file, url, 4, 25)
    expected = uninterrupted_command(argv, env)
    start = time.monotonic()
    first = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    span = time.monotonic() - start
    url = store.url("chaos")
    argv = train_argv(data_file, url, 4, 25)
    kills = processes = kills_in_uploads = 0
    while True:
        processes += 1
        assert processes < 10 * kills_wanted, f"seed {seed}: the kills never landed"
        proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        if kills < kills_wanted and kills % 2 == 0:
            # A random instant of the process's life.
            try:
                proc.wait(timeout=rng.uniform(0, span))
            except subprocess.TimeoutExpired:
                kills_in_uploads += proxy.uploading_now > 0
                proc.send_signal(signal.SIGKILL)
        elif kills < kills_wanted:
            # A random instant of a checkpoint's upload.
            while proc.poll() is None and proxy.uploading_now == 0:
                time.sleep(0.002)
            time.sleep(rng.uniform(0, 0.1))
            if proc.poll() is None:
                kills_in_uploads += proxy.uploading_now > 0
                proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
        if proc.returncode == -signal.SIGKILL:
            kills += 1
            wait_until_free(url)
            continue
        if proc.returncode == 4:  # the previous holder's lease had not quite expired
            time.sleep(0.5)
            continue
        assert proc.returncode == 0, err
        final = json.loads(out.splitlines()[-1])
        assert final["state_hash"] == expected
        if kills >= kills_wanted:
            break
        # The run completed before enough kills: another round, in a new directory.
        url = store.url("chaos")
        argv = train_argv(data_file, url, 4, 25)
    # Half the kills aimed at uploads (each upload takes about 0.4 s): most landed in one.
    assert kills_in_uploads >= kills_wanted // 4, f"seed {seed}: {kills_in_uploads} in uploads"
    assert final["checkpoint"].startswith(url + "/")
    # Every checkpoint object is whole: each loads with every checksum verified.
    for name in names(url):
        if name.endswith(".nxck"):
            manager = nxrs.CheckpointManager(url)
            entry = next(e for e in manager.list() if e.path.name == name)
            nxrs.Trainer.load(manager._local_copy(entry))
    with capsys.disabled():
        print(
            f"\n[{store.scheme} chaos] seed {seed}: {kills} kills ({kills_in_uploads} during an "
            f"upload) in {processes} processes",
            flush=True,
        )


def test_failed_uploads_keep_the_previous_checkpoint_and_training_goes_on(
    store: Emulator,
    via_proxy: FaultProxy,
    data: tuple[np.ndarray, np.ndarray],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy = via_proxy
    if store.scheme == "s3":
        # Give up soon: one botocore attempt (AWS_MAX_ATTEMPTS, as a user would set it) per
        # s3fs try, two s3fs tries (its class attribute). (A GCS upload is one attempt.)
        import s3fs

        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
        monkeypatch.setattr(s3fs.S3FileSystem, "retries", 2)
    url = store.url("faults")
    trainer().fit(*data, epochs=1, checkpoint=url, every=6)
    assert "step-000000000012.nxck" in names(url)
    proxy.mode = "fail"
    t = trainer()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(nxrs.CheckpointSaveError, match="newest checkpoint of this run is"):
            t.fit(*data, epochs=2, checkpoint=url, every=6, async_save=True)
    failed = [w for w in caught if issubclass(w.category, nxrs.SaveFailedWarning)]
    assert failed, "a failed periodic upload was not reported"
    assert t.steps == 24  # training went on to the end despite the failed uploads
    # The store's newest checkpoint is still the last one uploaded whole.
    assert max(n for n in names(url) if n.endswith(".nxck")) == "step-000000000012.nxck"
    manifest = json.loads(store.read(f"{url}/{MANIFEST_NAME}"))
    assert manifest["progress"]["checkpoint"] == "step-000000000012.nxck"
    assert manifest["state"] == "failed"
    # The store back: the run resumes from that checkpoint and ends in the same bits.
    proxy.mode = None
    resumed = trainer()
    resumed.fit(*data, epochs=2, checkpoint=url, every=6)
    assert resumed.state_hash() == uninterrupted_hash(data, 2)


def test_uploads_that_time_out_are_failed_saves(
    store: Emulator,
    via_proxy: FaultProxy,
    data: tuple[np.ndarray, np.ndarray],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A store that takes an upload and never answers: nxrs's deadline (``NXRS_STORE_TIMEOUT``
    plus a second per MB) cancels the request, and the save fails as any failed save does."""
    proxy = via_proxy
    url = store.url("stalls")
    trainer().fit(*data, epochs=1, checkpoint=url, every=12)
    # Short, but not so short that a loaded machine's first request (which sets up the
    # backend's session) misses it.
    monkeypatch.setenv("NXRS_STORE_TIMEOUT", "5")
    proxy.mode = "stall"
    t = trainer()
    start = time.monotonic()
    with pytest.warns(nxrs.SaveFailedWarning), pytest.raises(nxrs.CheckpointSaveError):
        t.fit(*data, epochs=2, checkpoint=url, every=6)
    assert time.monotonic() - start < 60
    assert t.steps == 24
    proxy.mode = None
    assert max(n for n in names(url) if n.endswith(".nxck")) == "step-000000000012.nxck"


def test_slow_uploads_do_not_hold_training_and_change_no_bit(
    store: Emulator,
    via_proxy: FaultProxy,
    data: tuple[np.ndarray, np.ndarray],
) -> None:
    proxy = via_proxy
    proxy.mode, proxy.delay = "slow", 0.2
    url = store.url("slow")
    t = trainer()
    t.fit(*data, epochs=3, checkpoint=url, every=4)
    assert proxy.uploads > 0
    assert t.state_hash() == uninterrupted_hash(data, 3)


# ---------------------------------------------------------------------- nxrs status


def test_nxrs_status_on_a_url(url: str, env: dict[str, str], data_file: Path) -> None:
    run = subprocess.run(
        train_argv(data_file, url, 1, 20), env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout.splitlines()[-1])
    status = subprocess.run(
        [sys.executable, "-m", "nxrs", "status", url, "--json"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert report["directory"] == url
    assert report["ok"] is True and report["running"] is None
    assert report["manifest"]["state"] == "complete"
    assert report["resume_from"] == summary["checkpoint"].rsplit("/", 1)[1]
    assert report["checkpoints"][0]["valid"] is True
    assert report["transcript"]["last_step"] == summary["steps"]
    text = subprocess.run(
        [sys.executable, "-m", "nxrs", "status", url],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert text.returncode == 0 and f"run directory {url}" in text.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "nxrs", "status", url + "-nothing"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert missing.returncode != 0 and "no such directory" in missing.stderr


def test_nothing_in_the_directory_names_a_credential(
    store: Emulator, url: str, data_file: Path
) -> None:
    """Credentials and endpoints stay the backend's (the environment here): nxrs writes none
    into the run's objects."""
    trainer().fit(np.zeros((8, 16), np.float32), np.zeros(8, np.int64), epochs=1, checkpoint=url)
    for name in names(url):
        content = store.read(f"{url}/{name}")
        for secret in store.secrets():
            assert secret.encode() not in content, name


# ---------------------------------------------------------------------- nxrs verify, nxrs diff


def test_nxrs_verify_and_diff_on_a_url(
    store: Emulator, url: str, env: dict[str, str], data_file: Path
) -> None:
    run = subprocess.run(
        train_argv(data_file, url, 2, 20, "--keep", "all"),
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    verified = subprocess.run(
        [sys.executable, "-m", "nxrs", "verify", url, "--all", "--json"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stderr
    report = json.loads(verified.stdout)
    assert report["ok"] is True and report["run_dir"] == url
    assert report["segments"] and all(s["status"] == "ok" for s in report["segments"])
    same = subprocess.run(
        [sys.executable, "-m", "nxrs", "diff", url, url, "--json"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert same.returncode == 0, same.stderr
    assert json.loads(same.stdout)["identical"] is True
    # A checkpoint flipped by one bit on the store is caught.
    name = "step-000000000040.nxck"
    content = bytearray(store.read(f"{url}/{name}"))
    content[-5] ^= 1
    store.write(f"{url}/{name}", bytes(content))
    tampered = nxrs.verify(url, segments=0)
    assert not tampered.ok and name in (tampered.first_failure or "")


def test_sigterm_during_an_upload_waits_for_it_saves_and_resumes_to_the_same_bits(
    store: Emulator, env: dict[str, str], proxy: FaultProxy, data_file: Path
) -> None:
    env = {**env, **store.environment(proxy.endpoint)}
    proxy.mode, proxy.delay = "slow", 0.05
    url = store.url("term")
    argv = train_argv(data_file, url, 3, 25)
    expected = uninterrupted_command(argv, env)
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    proc = subprocess.Popen(argv, env=env, **pipes)  # type: ignore[call-overload]
    while proc.poll() is None and proxy.uploading_now == 0:
        time.sleep(0.002)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, err
    stop = json.loads(store.read(f"{url}/{MANIFEST_NAME}"))
    assert stop["state"] == "stopped"
    # The stop's checkpoint is the step reached, uploaded whole, and the lease was released:
    # the same command resumes at once.
    assert stop["progress"]["step"] == stop["events"][-1]["step"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"resuming {url} from" in done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["state_hash"] == expected


def test_a_restart_moves_the_run_aside_on_the_store(
    store: Emulator, url: str, data: tuple[np.ndarray, np.ndarray]
) -> None:
    trainer().fit(*data, epochs=1, checkpoint=url, every=6)
    before = {n: store.read(f"{url}/{n}") for n in names(url) if not n.startswith(".")}
    restarted = trainer()
    restarted.fit(*data, epochs=2, checkpoint=url, every=6, resume=False)
    assert restarted.state_hash() == uninterrupted_hash(data, 2)
    folders = {o.name.split("/")[0] for o in open_store(f"{url}/previous").listing()}
    assert folders == set(), "previous/ holds a folder per restart, not objects"
    moved = {key.rsplit("/", 1)[1]: key for key in store.keys(f"{url}/previous")}
    assert set(moved) == set(before)
    for name, content in before.items():
        assert store.read(moved[name]) == content
    manifest = json.loads(store.read(f"{url}/{MANIFEST_NAME}"))
    assert manifest["events"][0]["moved_aside"].startswith("previous/")
    assert manifest["state"] == "complete"


# ---------------------------------------------------------------------- the transcript


def local_entries(directory: Path) -> list[tuple[int, str | None, str]]:
    return [(e["step"], e["checkpoint"], e["state_digest"]) for e in Transcript(directory).read()]


def store_entries(url: str) -> list[tuple[int, str | None, str]]:
    return [
        (e["step"], e["checkpoint"], e["state_digest"])
        for e in Transcript(url, open_store(url)).read()
    ]


def test_the_transcript_grows_by_segments_and_reads_as_one(
    store: Emulator,
    url: str,
    tmp_path: Path,
    data: tuple[np.ndarray, np.ndarray],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = type(open_store(url))
    sent: list[int] = []
    put = backend.put

    def counting(self: ObjectDirectory, name: str, body: bytes, **conditions: Any) -> str:
        if name.startswith("nxrs-transcript."):
            sent.append(len(body))
        return put(self, name, body, **conditions)

    monkeypatch.setattr(backend, "put", counting)
    trainer().fit(*data, epochs=6, checkpoint=url, every=1, async_save=False, progress=False)
    trainer().fit(*data, epochs=6, checkpoint=tmp_path / "local", every=1, progress=False)
    assert store_entries(url) == local_entries(tmp_path / "local")
    n = len(store_entries(url))
    assert n == 73
    # Objects: the first entries, then segments each named by its first entry, in order.
    objects = sorted(o.name for o in open_store(url).listing() if o.name.startswith("nxrs-tr"))
    assert TRANSCRIPT_NAME in objects and len(objects) > 1
    levels = math.ceil(math.log(n, 8))
    assert len(objects) <= 1 + 7 * levels
    # Each entry written about log8(n) times, not once per later save.
    size = sum(len(store.read(f"{url}/{name}")) for name in objects)
    assert sum(sent) <= size * (1 + levels)


def test_a_transcript_written_whole_by_an_earlier_nxrs_is_read_and_appended_to(
    store: Emulator, url: str, tmp_path: Path, data: tuple[np.ndarray, np.ndarray]
) -> None:
    earlier = tmp_path / "earlier"
    trainer().fit(*data, epochs=1, checkpoint=earlier, every=6, progress=False)
    for path in earlier.iterdir():
        if path.is_file() and not path.name.startswith("."):
            store.write(f"{url}/{path.name}", path.read_bytes())
    trainer().fit(*data, epochs=2, checkpoint=url, every=6, progress=False)
    trainer().fit(*data, epochs=2, checkpoint=tmp_path / "straight", every=6, progress=False)
    assert store_entries(url) == local_entries(tmp_path / "straight")
    assert segment_name(3) in names(url)  # appended, the earlier object left as it was


def test_a_manifest_and_transcript_deleted_during_a_run_are_written_again(
    url: str,
    tmp_path: Path,
    data: tuple[np.ndarray, np.ndarray],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    directory = open_store(url)
    deleted: list[str] = []

    def delete_the_records(path: Path) -> None:  # in the writer of each periodic checkpoint
        if path.name == "step-000000000018.nxck":
            for listed in directory.listing():
                if listed.name.startswith("nxrs-"):
                    directory.delete(listed.name)
                    deleted.append(listed.name)

    monkeypatch.setattr(nxrs._runs.async_save, "_before_write", delete_the_records)
    t = trainer()
    t.fit(*data, epochs=3, checkpoint=url, every=6, progress=False)  # background saves
    assert MANIFEST_NAME in deleted and TRANSCRIPT_NAME in deleted
    manifest = json.loads(directory.get(MANIFEST_NAME).data)  # type: ignore[union-attr]
    assert manifest["state"] == "complete" and manifest["progress"]["step"] == 36
    trainer().fit(*data, epochs=3, checkpoint=tmp_path / "local", every=6, progress=False)
    assert store_entries(url) == local_entries(tmp_path / "local")
