"""Data-parallel training on Ray with the same bits for any number of workers
(``fit(..., engine="ray", workers=N)``), and the Ray connection ``nxrs.sweep`` uses.

Imported only when Ray is asked for; it needs the ``ray`` extra (``pip install 'nxrs[ray]'``).

How a step runs (``docs/TRAINING.md`` section 5 defines the bits): the driver's trainer gives
the current batch's gradient blocks (``grad_block`` consecutive samples each, in the epoch's
shuffle order); they are cut into ``workers`` contiguous runs of whole blocks (the first runs
one block longer when they do not divide evenly); each worker actor computes the block sums of
its run with the current parameters and returns them; the driver hands all blocks' results, in
block order, to its trainer, which adds them in that order and takes the optimiser step exactly
as single-process ``fit`` does. Which worker computed a block, and when, never enters the
arithmetic: the bits depend on ``grad_block``, never on the number of workers or on timing.

Data and parameters travel through Ray's object store: the training arrays are put once and
every actor builds its dataset from them (zero-copy on the driver's node); each step's
parameters are put once and read by every actor. A worker returns one gradient sum per block
(the parameters' size each), because block sums must be added in block order starting from the
first, so a worker cannot pre-add its blocks without changing the bits.

Room: each worker reserves one CPU of the cluster. Before starting them, ``RayEngine.start``
compares the workers asked for with the cluster's CPUs: a cluster that cannot grow (one this
process started) and has fewer is refused at once (ConfigError naming its CPUs and the
``workers`` to pass); one that may grow (a cluster connected to, maybe with an autoscaler) is
waited for, saying on stderr every ``WAIT_REPORT_SECONDS`` what the start waits for, up to
``START_TIMEOUT``.

Faults: the actors have ``max_restarts`` and ``max_task_retries``, so a worker whose process
dies is restarted by Ray, rebuilds its dataset from the object store, and recomputes its part
of the step from the step's parameters (kept in the object store until the step is taken); the
result is bit-identical. Every restart is logged (logger ``nxrs.distributed``, WARNING). A lost
driver is a lost ``fit``: running it again with the same ``checkpoint=`` directory resumes from
the newest checkpoint, as without Ray.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from nxrs._nxrs import ConfigError, EpochEnd, InputError, RunChunk
from nxrs._runs.errors import stderr_line

try:
    import ray
except ImportError as _err:  # pragma: no cover (the ray extra is part of the test extra)
    raise ImportError(
        "nxrs's Ray engine and sweeps need Ray, which is not installed: pip install 'nxrs[ray]'"
    ) from _err

if TYPE_CHECKING:
    from nxrs._nxrs import Dataset
    from nxrs._trainer import Trainer

__all__ = ["RayEngine", "connect", "ray", "shares"]

log = logging.getLogger("nxrs.distributed")

#: Restarts Ray grants each worker actor (and retries of the task it was running).
MAX_RESTARTS = 3
#: Longest wait for the workers to start (their processes, their datasets), in seconds.
START_TIMEOUT = 600.0
#: Longest wait for one step's blocks (a restarted worker included), in seconds.
STEP_TIMEOUT = 600.0
#: How often a start waiting for the cluster's room says so on stderr, in seconds.
WAIT_REPORT_SECONDS = 30.0

BlockResult = tuple[
    list[npt.NDArray[np.float32]], npt.NDArray[np.float32], int, list[npt.NDArray[np.float32]]
]


def connect(address: str | None = None) -> Any:
    """The ``ray`` module, connected: an initialised Ray is used as it is; otherwise the cluster
    at ``address`` (or ``RAY_ADDRESS``), or else a new local cluster sized to this machine.

    A Ray that cannot start or connect is a ConnectionError saying so in one line, Ray's error
    its cause: Ray's own log records while it starts (its notes, the traceback of a start that
    failed) are not shown, and its errors can hold a whole traceback in their text."""
    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS") or None
        if address is None:
            log.info("starting a local Ray cluster")
        else:
            log.info("connecting to the Ray cluster at %s", address)
        ray_log = logging.getLogger("ray")
        level = ray_log.level
        try:
            ray.init(address=address, logging_level=logging.CRITICAL + 1)
        except Exception as err:
            what = "start a local cluster" if address is None else f"connect to {address}"
            text = (str(err).strip().splitlines() or [""])[0]
            raise ConnectionError(f"Ray could not {what}: {type(err).__name__}: {text}") from err
        finally:
            ray_log.setLevel(level)
    return ray


def _cluster_cpus() -> tuple[float, float]:
    """The cluster's CPUs: (in all, free now)."""
    total: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    free: dict[str, float] = ray.available_resources()  # type: ignore[no-untyped-call]
    return total.get("CPU", 0.0), free.get("CPU", 0.0)


def can_grow() -> bool:
    """Whether the connected Ray cluster may gain CPUs: False for a cluster this process
    started (``ray.init()`` without an address: this machine's CPUs, no autoscaler), True for
    one it connected to (its nodes come and go; an autoscaler may add some)."""
    node = getattr(getattr(ray, "_private", None), "worker", None)
    node = getattr(node, "_global_node", None)
    # Ray's driver holds the node it started as the head; a driver that connected holds a
    # connect-only, non-head node. Not knowing (another Ray version), assume it may grow: a
    # wait that says what it waits for is the safe side of a wrong guess.
    return not getattr(node, "head", False)


def check_room(workers: int) -> None:
    """ConfigError when the cluster has fewer CPUs than ``workers`` (one each) and cannot grow."""
    total, _ = _cluster_cpus()
    if total >= workers or can_grow():
        return
    cpus = int(total)
    fix = (
        f"pass workers={cpus} or fewer (or workers=None, one per CPU)"
        if cpus
        else "start Ray with CPUs (ray.init(num_cpus=...))"
    )
    raise ConfigError(
        f"workers = {workers} cannot start: each Ray worker reserves one CPU and the Ray "
        f"cluster this process started has {total:g} CPUs, and cannot grow; {fix}, or connect to "
        "a larger cluster (ray_address=... or RAY_ADDRESS)"
    )


def wait_for(refs: list[Any], what: str, timeout: float) -> list[Any]:
    """``ray.get(refs)``, saying on stderr every ``WAIT_REPORT_SECONDS`` how many of them are
    ready (``what``: the noun, "workers") and the cluster's CPUs, until ``timeout`` seconds
    have passed (then Ray's GetTimeoutError)."""
    deadline = time.monotonic() + timeout
    pending = list(refs)
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        _, pending = ray.wait(
            pending, num_returns=len(pending), timeout=min(WAIT_REPORT_SECONDS, left)
        )
        if pending:
            total, free = _cluster_cpus()
            stderr_line(
                f"nxrs: waiting for Ray to start {what}: {len(refs) - len(pending)} of "
                f"{len(refs)} running; each needs a CPU, the cluster has {total:g} "
                f"({free:g} free){' and may grow' if can_grow() else ''}; waiting up to "
                f"{max(0.0, deadline - time.monotonic()):.0f} s more"
            )
    return ray.get(refs, timeout=max(0.0, deadline - time.monotonic()))


def shares(blocks: int, workers: int) -> list[range]:
    """The blocks of each worker: ``workers`` contiguous runs covering ``0 ..< blocks``, the
    first ``blocks % workers`` of them one block longer (empty when there are more workers
    than blocks).

    >>> shares(5, 2), shares(1, 3)
    ([range(0, 3), range(3, 5)], [range(0, 1), range(1, 1), range(1, 1)])
    """
    size, extra = divmod(blocks, workers)
    runs, start = [], 0
    for k in range(workers):
        end = start + size + (k < extra)
        runs.append(range(start, end))
        start = end
    return runs


def _parameters(trainer: Trainer) -> list[npt.NDArray[np.float32]]:
    """The trainer's parameters (``W1 b1 W2 b2 ...``), the tensors the workers need: computing
    a block's gradient uses no optimiser slot."""
    return trainer._params()


class BlockWorker:
    """A Ray actor: a replica of the model and the whole training set, computing block sums.

    Built from the trainer's class and configuration and the data's object references (so a
    restart by Ray rebuilds it alone); the fingerprint check makes sure it holds exactly the
    driver's data.
    """

    def __init__(
        self,
        trainer_class: type[Trainer],
        config: dict[str, Any],
        backend: str,
        x: npt.NDArray[Any],
        y: npt.NDArray[Any] | None,
        fingerprint: str,
    ) -> None:
        self.trainer = trainer_class(**config, backend=backend)  # type: ignore[arg-type]
        # No labels: a token stream (docs/TRAINING.md section 15.8).
        self.data = self.trainer._stream(x) if y is None else self.trainer._dataset(x, y)
        if self.data.fingerprint != fingerprint:
            raise InputError(
                f"the worker's data has fingerprint {self.data.fingerprint}, the driver's "
                f"{fingerprint}"
            )

    def pid(self) -> int:
        """This worker's process id."""
        return os.getpid()

    def blocks(
        self,
        parameters: Sequence[npt.NDArray[np.float32]],
        step: int,
        blocks: Sequence[tuple[int, Sequence[int]]],
    ) -> tuple[int, float, list[BlockResult]]:
        """This process's id (so the driver sees a restart), the seconds computing took, and
        the results of ``blocks`` (each its first sample's position in the batch and its sample
        indices) with ``parameters`` at step ``step`` (which keys dropout's masks)."""
        start = time.perf_counter()
        self.trainer._set_params(parameters, step)
        results = [self.trainer._block_gradient(self.data, b, first) for first, b in blocks]
        return os.getpid(), time.perf_counter() - start, results


class RayEngine:
    """The workers of one data-parallel ``fit`` of ``trainer`` on ``(x, y)`` (whose dataset has
    ``fingerprint``); ``run`` has the signature and results of ``Trainer._run`` (``fit``'s loop
    calls one or the other). ``workers`` None: one per CPU of the cluster."""

    def __init__(
        self,
        trainer: Trainer,
        x: npt.ArrayLike,
        y: npt.ArrayLike | None,
        fingerprint: str,
        workers: int | None,
        address: str | None,
    ) -> None:
        self.trainer = trainer
        self.x, self.y, self.fingerprint = x, y, fingerprint
        self.size, self.address = workers, address
        self.workers: list[Any] = []
        self.pids: list[int] = []
        #: The data's object references, held while the workers live: a restarted worker
        #: reads its data from them again.
        self.data_refs: tuple[Any, ...] = ()
        #: The latest step's bytes sent to and received from the workers (the parameters to
        #: each, the block results back), its seconds from sending the parameters to having
        #: every result, and the longest time a worker spent computing in it.
        self.last_step_bytes = 0
        self.last_step_seconds = 0.0
        self.last_step_compute_seconds = 0.0

    def prepare(self) -> int:
        """Connects to Ray and returns the number of workers, checked to fit the cluster
        (``check_room``). ``fit`` calls it before it touches the run directory, so a cluster
        without room is refused before anything changes."""
        connect(self.address)
        if self.size is None:
            self.size = max(1, int(_cluster_cpus()[0]))
        check_room(self.size)
        return self.size

    def start(self) -> None:
        """Starts the workers, each with the data (``run`` does it first when they are not
        running: after ``fit`` has taken its run directory and resumed)."""
        workers = self.prepare()
        x = np.asarray(self.x)
        if x.dtype == np.float64:
            # What the binding does to float64 features (numpy's rounding), done once here so
            # the object store holds the float32 data: half the bytes.
            x = x.astype(np.float32)
        self.data_refs = ray.put(x), ray.put(None if self.y is None else np.asarray(self.y))
        backend = "soft" if self.trainer.backend == "soft" else "auto"
        # Ray's handles are typed loosely (``remote`` is added at run time).
        actor: Any = ray.remote(
            num_cpus=1,
            max_restarts=MAX_RESTARTS,
            max_task_retries=MAX_RESTARTS,
            # One worker per node while nodes have room, so the workers share no memory bus.
            scheduling_strategy="SPREAD",
        )(BlockWorker)
        config = self.trainer.config
        self.workers = [
            actor.remote(type(self.trainer), config, backend, *self.data_refs, self.fingerprint)
            for _ in range(workers)
        ]
        self.pids = wait_for([w.pid.remote() for w in self.workers], "workers", START_TIMEOUT)
        for k, pid in enumerate(self.pids):
            log.info("worker %d of %d: pid %d", k, workers, pid)

    def close(self) -> None:
        """Ends the worker actors and lets Ray free the data."""
        for worker in self.workers:
            ray.kill(worker)
        self.workers = []
        self.data_refs = ()

    def step(self, data: Dataset) -> RunChunk:
        """One optimiser step, its blocks computed by the workers."""
        t = self.trainer
        samples = t._batch_blocks(data)
        # Each block with its first sample's position in the batch.
        firsts = np.cumsum([0] + [len(b) for b in samples[:-1]]).tolist()
        blocks = list(zip(firsts, samples))
        parameters = _parameters(t)
        start = time.perf_counter()
        ref = ray.put(parameters)
        calls = [
            (k, worker.blocks.remote(ref, t.steps, [blocks[i] for i in run]))
            for k, (worker, run) in enumerate(
                zip(self.workers, shares(len(blocks), len(self.workers)))
            )
            if len(run)
        ]
        log.debug("step %d: %d blocks sent to %d workers", t.steps, len(blocks), len(calls))
        answers = ray.get([call for _, call in calls], timeout=STEP_TIMEOUT)
        self.last_step_seconds = time.perf_counter() - start
        results: list[BlockResult] = []
        received = 0
        self.last_step_compute_seconds = max(seconds for _, seconds, _ in answers)
        for (k, _), (pid, _, part) in zip(calls, answers):
            if pid != self.pids[k]:
                log.warning(
                    "worker %d was restarted by Ray (pid %d, now %d); its blocks of step %d "
                    "were recomputed",
                    k,
                    self.pids[k],
                    pid,
                    t.steps,
                )
                self.pids[k] = pid
            results.extend(part)
            received += sum(
                sum(g.nbytes for g in grads) + losses.nbytes + sum(s.nbytes for s in stats)
                for grads, losses, _, stats in part
            )
        self.last_step_bytes = len(calls) * sum(p.nbytes for p in parameters) + received
        return t._apply_blocks(data, results)

    def run(
        self,
        data: Dataset,
        epochs: int,
        max_steps: int | None = None,
        max_seconds: float | None = None,
        epoch_end: bool = False,
        steps: int | None = None,
    ) -> RunChunk:
        """Steps towards ``epochs`` complete epochs (a token stream: towards ``steps`` steps in
        all) as ``Trainer._run`` does: at most ``max_steps`` steps, returning after about
        ``max_seconds``, or at an epoch's end with ``epoch_end``."""
        t = self.trainer
        ended: list[EpochEnd] = []
        taken = 0
        loss = None
        deadline = None if max_seconds is None else time.monotonic() + max_seconds

        def more() -> bool:
            return t.steps < steps if steps is not None else t.epoch < epochs

        if not self.workers and more():
            self.start()
        while more() and (max_steps is None or taken < max_steps):
            step = self.step(data)
            taken += step.steps
            ended.extend(step.epochs)
            loss = step.last_loss
            if (epoch_end and step.epochs) or (
                deadline is not None and time.monotonic() >= deadline
            ):
                break
        return RunChunk(epochs=ended, steps=taken, last_loss=loss)
