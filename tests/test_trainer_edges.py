"""Edges of the Trainer class: v1 files only of the seed model, a trainer used from
several threads, pickling and copying, and the one rule for integer parameters."""

from __future__ import annotations

import contextlib
import copy
import pickle
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import nxrs
from nxrs._util.signals import StopFlag

X, Y = nxrs.seed_dataset()


def trained(trainer: nxrs.Trainer, epochs: int) -> nxrs.Trainer:
    trainer.train_until(X, Y, epochs)
    return trainer


# --- v1 holds the seed model, and nothing else ---------------------------------------------


def mid_epoch() -> nxrs.Trainer:
    trainer = nxrs.Trainer()
    trainer.train_steps(X, Y, 3)
    return trainer


# Each trainer v1 cannot hold, with a part of what the refusal must name.
NOT_V1 = [
    pytest.param(
        lambda: trained(nxrs.Trainer(sizes=[6, 12, 4]), 2), "layers [6, 12, 4]", id="sizes"
    ),
    pytest.param(
        lambda: trained(nxrs.Trainer(layers=[6, 10, 4], batch_size=4, lr=0.05, seed=7), 3),
        "batch_size 4",
        id="general",
    ),
    pytest.param(lambda: nxrs.Trainer(seed=7), "seed 7", id="seed"),
    pytest.param(lambda: nxrs.Trainer.seed_model(7), "seed 7", id="seed_model-7"),
    pytest.param(lambda: nxrs.Trainer(lr=0.05), "lr 0.05", id="lr"),
    pytest.param(lambda: nxrs.Trainer(optimizer="adamw"), "optimizer adamw", id="adamw"),
    pytest.param(lambda: nxrs.Trainer(optimizer="sgd"), "optimizer sgd", id="sgd"),
    pytest.param(lambda: nxrs.Trainer(shuffle=True), "shuffle true", id="shuffle"),
    pytest.param(lambda: nxrs.Trainer(clip_norm=1.0), "clip_norm", id="clip_norm"),
    pytest.param(mid_epoch, "inside an epoch (batch 3", id="mid-epoch"),
]


@pytest.mark.parametrize(("make", "named"), NOT_V1)
def test_v1_refuses_every_trainer_but_the_seed_model_and_keeps_the_file(
    tmp_path: Path, make: Callable[[], nxrs.Trainer], named: str
) -> None:
    path = tmp_path / "run.nxck"
    trained(nxrs.Trainer(), 1).save(path, format="v1")
    before = path.read_bytes()
    trainer = make()
    with pytest.raises(nxrs.ConfigError, match="v1") as refused:
        trainer.save(path, format="v1")
    assert named in str(refused.value) and "save as v2" in str(refused.value)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.nxck"]  # no temporary left
    # v2 holds it all.
    trainer.save(path)
    assert nxrs.Trainer.load(path).state_hash() == trainer.state_hash()


@pytest.mark.parametrize(
    "make",
    [nxrs.Trainer, lambda: nxrs.Trainer(seed=1), nxrs.Trainer.seed_model],
    ids=["Trainer()", "Trainer(seed=1)", "seed_model()"],
)
def test_the_seed_model_still_saves_the_seeds_v1_bytes(
    tmp_path: Path, seed_ref: ModuleType, make: Callable[[], nxrs.Trainer]
) -> None:
    ref = seed_ref.mk_state(1)
    seed_ref.train_run(ref, *seed_ref.dataset(), 2)
    trainer = trained(make(), 2)
    trainer.save(tmp_path / "a.nxck", format="v1")
    assert (tmp_path / "a.nxck").read_bytes() == seed_ref.v1_bytes(ref)
    loaded = nxrs.Trainer.load(tmp_path / "a.nxck")
    assert loaded.config == trainer.config and loaded.hash() == trainer.hash()


# --- one trainer, several threads ------------------------------------------------------------

RNG = np.random.default_rng(18)
BIG_X = RNG.standard_normal((800, 16)).astype(np.float32)
BIG_Y = RNG.integers(0, 4, 800)
EPOCHS = 6


def busy_trainer() -> nxrs.Trainer:
    """600 steps (softf32, one thread), each its own chunk (``one_step_chunks``), for other
    threads to meet the run in its middle."""
    return nxrs.Trainer(layers=[16, 64, 4], batch_size=8, seed=3, backend="soft", threads=1)


@pytest.fixture(scope="module")
def undisturbed() -> int:
    trainer = busy_trainer()
    trainer.fit(BIG_X, BIG_Y, EPOCHS, progress=False)
    return trainer.state_hash()


@pytest.fixture(autouse=True)
def one_step_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """``fit`` takes its steps in chunks of one step (a chunk of at most 0 s still takes one), so
    a run has hundreds of chunk boundaries where another thread gets the trainer."""
    monkeypatch.setattr(nxrs._train.fit, "_CHUNK_SECONDS", 0.0)


#: The step at whose chunk boundary ``fit`` waits for the second thread (mid-epoch 2 of 6).
MEET_AT = 250
#: How many calls the second thread makes while ``fit`` waits for it.
CALLS_WHILE_WAITING = 5


def run_beside_fit(
    trainer: nxrs.Trainer, other: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> tuple[list[BaseException], list[int]]:
    """Runs ``fit`` while a second thread calls ``other``: the second thread's exceptions, and
    the step counts it saw before each call.

    The meeting is not left to timing (a fast or loaded machine let a whole run pass by before
    the second thread got in): ``fit``'s runner waits, inside ``fit``, at the chunk boundary of
    step ``MEET_AT`` until the second thread has made ``CALLS_WHILE_WAITING`` calls. Every call
    is made then: one made while the run goes on may be scheduled only after ``fit`` returned
    (the GIL decides), when it rightly succeeds."""
    paused, resume = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    seen: list[int] = []
    fit_with = nxrs._train.fit._fit_with

    def waiting_fit_with(
        t: nxrs.Trainer, data: object, options: object, runner: Callable[..., object]
    ) -> object:
        def run(*args: object, **kwargs: object) -> object:
            chunk = runner(*args, **kwargs)
            if t.steps == MEET_AT:
                paused.set()
                assert resume.wait(timeout=120), "the second thread never made its calls"
            return chunk

        return fit_with(t, data, options, run)  # type: ignore[arg-type]

    monkeypatch.setattr(nxrs._train.fit, "_fit_with", waiting_fit_with)

    def call() -> None:
        seen.append(trainer.steps)
        try:
            other()
        except BaseException as err:  # every failure is the test's finding
            errors.append(err)

    def loop() -> None:
        if not paused.wait(timeout=120):
            return  # fit failed before the meeting; its own exception is the finding
        for _ in range(CALLS_WHILE_WAITING):
            call()
        resume.set()

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        trainer.fit(BIG_X, BIG_Y, EPOCHS, progress=False)
    finally:
        resume.set()
        thread.join()
    return errors, seen


def test_reading_a_trainer_during_fit_works_and_changes_no_bit(
    undisturbed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = busy_trainer()

    def read() -> None:
        steps = trainer.steps
        assert trainer.config["batch_size"] == 8
        assert trainer.predict(BIG_X[:5]).shape == (5,)
        trainer.state_hash()
        _ = (trainer.epoch, trainer.batch, trainer.sizes, trainer.state_dict(), repr(trainer))
        # A consistent state between two steps: it loads, checksums and all.
        snapshot = nxrs.Trainer.from_bytes(trainer.to_bytes())
        assert snapshot.steps >= steps

    errors, seen = run_beside_fit(trainer, read, monkeypatch)
    assert errors == []
    assert trainer.state_hash() == undisturbed
    assert seen == [MEET_AT] * CALLS_WHILE_WAITING  # in the run's middle


@pytest.mark.parametrize(
    "call",
    [
        lambda t, _: t.step(BIG_X[0], BIG_Y[0]),
        lambda t, _: t.train_until(BIG_X, BIG_Y, EPOCHS + 1),
        lambda t, _: t.train_steps(BIG_X, BIG_Y, 2),
        lambda t, _: t.fit(BIG_X, BIG_Y, EPOCHS + 1, progress=False),
        lambda t, saved: t.restore(saved),
        lambda t, _: setattr(t, "threads", 2),
        lambda t, _: setattr(t, "backend", "soft"),
    ],
    ids=["step", "train_until", "train_steps", "fit", "restore", "threads", "backend"],
)
def test_a_second_change_during_fit_is_busy_and_never_kills_the_run(
    tmp_path: Path,
    undisturbed: int,
    call: Callable[[nxrs.Trainer, Path], object],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trainer = busy_trainer()
    saved = tmp_path / "start.nxck"
    trainer.save(saved)
    errors, seen = run_beside_fit(trainer, lambda: call(trainer, saved), monkeypatch)
    assert seen == [MEET_AT] * CALLS_WHILE_WAITING  # in the run's middle
    assert len(errors) == len(seen)
    assert all(isinstance(e, nxrs.BusyError) for e in errors), errors[:3]
    assert "another thread is in Trainer.fit" in str(errors[0])
    assert trainer.state_hash() == undisturbed
    # Once fit has returned, the trainer is free again.
    trainer.threads = 2
    assert trainer.threads == 2


@contextlib.contextmanager
def fitting_until_stopped(
    trainer: nxrs.Trainer, x: np.ndarray, y: np.ndarray
) -> Iterator[threading.Thread]:
    """``trainer.fit(x, y)`` in another thread for as long as the block lasts (nothing paused,
    unlike ``run_beside_fit``), then stopped by its stop flag: the block gets the thread, and
    the run must end stopped (``RunStopped``), not by an error or by running out of epochs."""
    stop = StopFlag()
    ended: list[BaseException] = []

    def train() -> None:
        try:
            trainer.fit(x, y, 100_000, progress=False, _stop=stop)  # until stopped
        except BaseException as err:  # RunStopped, or the test's finding
            ended.append(err)

    fit_thread = threading.Thread(target=train)
    fit_thread.start()
    try:
        yield fit_thread
    finally:
        stop.signum = signal.SIGTERM
        fit_thread.join(timeout=120)
    assert not fit_thread.is_alive()
    assert len(ended) == 1 and isinstance(ended[0], nxrs.RunStopped), ended


def test_a_read_and_a_second_fit_answer_within_a_chunk_while_fit_runs() -> None:
    """Without any pause arranged (``run_beside_fit`` arranges one): while one thread trains,
    another thread's reads answer within about a chunk of training (0.1 s), from the state
    between two steps, and a second ``fit`` raises ``BusyError`` as fast. Each is timed while
    the run is still going, so none of them can have waited for the whole run."""
    trainer = nxrs.Trainer(layers=[16, 256, 4], batch_size=8, seed=3, backend="soft", threads=1)
    slowest: dict[str, float] = {}

    def timed(name: str, call: Callable[[], object]) -> object:
        start = time.perf_counter()
        out = call()
        slowest[name] = max(slowest.get(name, 0.0), time.perf_counter() - start)
        return out

    def second_fit() -> None:
        with pytest.raises(nxrs.BusyError, match=r"another thread is in Trainer\.fit"):
            trainer.fit(BIG_X, BIG_Y, 1, progress=False)

    with fitting_until_stopped(trainer, BIG_X, BIG_Y) as fit_thread:
        deadline = time.monotonic() + 60
        while timed("steps", lambda: trainer.steps) == 0:
            assert time.monotonic() < deadline, "fit never started"
            time.sleep(0.01)
        seen = []
        for _ in range(5):
            time.sleep(0.05)
            seen.append(timed("steps", lambda: trainer.steps))
            timed("predict", lambda: trainer.predict(BIG_X[:5]))
            timed("state_hash", trainer.state_hash)
            timed("second fit", second_fit)
        assert fit_thread.is_alive(), "the run ended early: nothing shows the reads did not wait"
    assert seen == sorted(seen) and seen[-1] > seen[0]  # the run went on between the reads
    assert max(slowest.values()) < 1.0, slowest


def test_a_second_change_is_busy_at_once_not_after_the_step_in_progress() -> None:
    """A step long enough to be caught in its middle (about 1 s): a second ``fit``, ``step``
    or ``threads =`` is refused at once, without waiting for the step to end (it used to read
    the trainer before claiming it, and so waited for the chunk in progress)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4096, 256)).astype(np.float32)
    y = rng.integers(0, 10, 4096)
    trainer = nxrs.Trainer(layers=[256, 2048, 2048, 10], batch_size=1024, seed=1, threads=1)
    waits = []
    with fitting_until_stopped(trainer, x, y) as fit_thread:
        for change in (
            lambda: trainer.fit(x, y, 1, progress=False),
            lambda: trainer.step(x[0], y[0]),
            lambda: setattr(trainer, "threads", 2),
        ):
            assert trainer.steps >= 0  # returns between two steps (a chunk is one step here)
            time.sleep(0.1)  # into the next step
            start = time.perf_counter()
            with pytest.raises(nxrs.BusyError, match=r"another thread is in Trainer\.fit"):
                change()
            waits.append(time.perf_counter() - start)
        assert fit_thread.is_alive(), "the run ended early: nothing shows the calls did not wait"
    assert max(waits) < 0.2, waits


def test_busy_error_is_an_nxrs_error() -> None:
    assert issubclass(nxrs.BusyError, nxrs.NxrsError)
    assert nxrs.BusyError.__module__ == "nxrs"


# --- pickle, copy, deepcopy ------------------------------------------------------------------


@pytest.mark.parametrize(
    "duplicate",
    [lambda t: pickle.loads(pickle.dumps(t)), copy.copy, copy.deepcopy],
    ids=["pickle", "copy", "deepcopy"],
)
def test_pickle_and_copies_are_the_same_trainer_bit_for_bit(
    duplicate: Callable[[nxrs.Trainer], nxrs.Trainer],
) -> None:
    trainer = nxrs.Trainer(layers=[6, 10, 4], batch_size=3, optimizer="adamw", seed=5)
    trainer.train_steps(X, Y, 4)  # inside an epoch
    twin = duplicate(trainer)
    assert isinstance(twin, nxrs.Trainer) and twin is not trainer
    assert twin.state_hash() == trainer.state_hash()
    assert twin.to_bytes() == trainer.to_bytes()
    assert twin.config == trainer.config
    # Independent, and both continue alike.
    twin.train_until(X, Y, 5)
    assert trainer.steps == 4
    trainer.train_until(X, Y, 5)
    assert twin.state_hash() == trainer.state_hash()


def test_copies_keep_backend_and_threads_and_pickles_take_the_defaults() -> None:
    trainer = nxrs.Trainer(backend="soft", threads=1)
    for twin in (copy.copy(trainer), copy.deepcopy(trainer)):
        assert (twin.backend, twin.threads) == ("soft", 1)
    default = nxrs.Trainer()
    unpickled = pickle.loads(pickle.dumps(trainer))
    assert (unpickled.backend, unpickled.threads) == (default.backend, default.threads)


# --- one rule for integer parameters ---------------------------------------------------------

COUNTS = ["batch_size", "grad_block", "warmup_steps", "threads", "seed"]


@pytest.mark.parametrize("name", COUNTS)
@pytest.mark.parametrize("value", [True, False, 2.0, 2.5, np.float64(4.0), "4", np.bool_(True)])
def test_bools_and_floats_are_not_counts(name: str, value: object) -> None:
    with pytest.raises(nxrs.ConfigError, match=f"^{name} = .* is not an integer"):
        nxrs.Trainer(layers=[6, 10, 4], **{name: value})


@pytest.mark.parametrize(("name", "given"), [("total_steps", 5.0), ("step_size", True)])
def test_schedule_counts_follow_the_rule(name: str, given: object) -> None:
    schedule = {"total_steps": "linear", "step_size": "step"}[name]
    extra = {"gamma": 0.5} if schedule == "step" else {}
    with pytest.raises(nxrs.ConfigError, match=f"^{name} = .* is not an integer"):
        nxrs.Trainer(layers=[6, 10, 4], schedule=schedule, **{name: given}, **extra)  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["layers", "sizes"])
@pytest.mark.parametrize("bad", [[True, 8, 3], [6, 8.0, 3], [6, 8, np.float32(3)]])
def test_layer_sizes_follow_the_rule(key: str, bad: list[object]) -> None:
    k = next(i for i, v in enumerate(bad) if isinstance(v, (bool, float, np.floating)))
    with pytest.raises(nxrs.ConfigError, match=rf"^{key}\[{k}\] = .* is not an integer"):
        nxrs.Trainer(**{key: bad})  # type: ignore[arg-type]
    with pytest.raises(nxrs.ConfigError, match=f"^{key} = 6 is not a sequence"):
        nxrs.Trainer(**{key: 6})  # type: ignore[arg-type]


def test_numpy_integers_are_counts() -> None:
    plain = nxrs.Trainer(layers=[6, 10, 4], batch_size=4, seed=7, grad_block=2, warmup_steps=3)
    numpy = nxrs.Trainer(
        layers=np.array([6, 10, 4]),  # type: ignore[arg-type]
        batch_size=np.int64(4),  # type: ignore[arg-type]
        seed=np.uint8(7),  # type: ignore[arg-type]
        grad_block=np.int32(2),  # type: ignore[arg-type]
        warmup_steps=np.int16(3),  # type: ignore[arg-type]
        threads=np.int64(1),  # type: ignore[arg-type]
    )
    assert numpy.config == plain.config and numpy.state_hash() == plain.state_hash()
    assert numpy.threads == 1
    seed = nxrs.Trainer(sizes=np.array([6, 10, 4], dtype=np.uint16))  # type: ignore[arg-type]
    assert seed.config == nxrs.Trainer().config
    numpy.train_until(X, Y, np.int64(2))  # type: ignore[arg-type]
    assert numpy.epoch == 2


@pytest.mark.parametrize("epoch", [-1, -(2**63)])
def test_train_until_refuses_a_negative_epoch(epoch: int) -> None:
    trainer = nxrs.Trainer()
    with pytest.raises(nxrs.InputError, match=f"epoch = {epoch} must be at least 0"):
        trainer.train_until(X, Y, epoch)
    with pytest.raises(nxrs.InputError, match="epoch = True is not an integer"):
        trainer.train_until(X, Y, True)
    with pytest.raises(nxrs.InputError, match=r"epoch = 2\.0 is not an integer"):
        trainer.train_until(X, Y, 2.0)  # type: ignore[arg-type]
    assert trainer.steps == 0


def test_the_threads_setter_follows_the_rule() -> None:
    trainer = nxrs.Trainer(threads=1)
    for bad in (True, 2.0):
        with pytest.raises(nxrs.ConfigError, match=r"threads = .* is not an integer"):
            trainer.threads = bad  # type: ignore[assignment]
    trainer.threads = np.int8(2)  # type: ignore[assignment]
    assert trainer.threads == 2
