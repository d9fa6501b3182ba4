"""``fit(engine="ray", workers=N)``: the same full state (hash) and history for 1, 2 and 3 Ray
workers as single-process ``fit``; a worker SIGKILLed mid-run is restarted by Ray, the step
recomputed, the hash unchanged and the restart logged; checkpoints and resume work as locally."""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nxrs

RNG = np.random.default_rng(5)
X = RNG.standard_normal((97, 12)).astype(np.float32)
Y = RNG.integers(0, 3, 97)
VAL = (X[:20], Y[:20])

CONFIGS = {
    # 5 blocks per batch (a short last batch of 7: 4 blocks, the last of one sample), so 2 and
    # 3 workers get uneven runs of several blocks each.
    "blocks": {"layers": [12, 16, 3], "batch_size": 10, "grad_block": 2, "seed": 4},
    # One block per batch: extra workers idle; AdamW with clipping, in order.
    "one-block": {
        "layers": [12, 8, 3],
        "batch_size": 8,
        "optimizer": "adamw",
        "clip_norm": 0.5,
        "shuffle": False,
    },
    # A layer model: BatchNorm's block statistics travel back with each block and
    # update the running averages in block order; dropout's masks need the step and each
    # block's position in its batch on the workers.
    "layer-objects": {
        "layers": [
            nxrs.layers.Input(3, 4),
            nxrs.layers.Conv1d(4, 3, padding=1),
            nxrs.layers.BatchNorm1d(),
            nxrs.layers.ReLU(),
            nxrs.layers.Flatten(),
            nxrs.layers.Dropout(0.2),
            nxrs.layers.Dense(3),
        ],
        "batch_size": 10,
        "grad_block": 3,
        "seed": 2,
    },
}
EPOCHS = 3


def local(config: dict[str, Any], epochs: int = EPOCHS) -> tuple[int, dict[str, list[float]]]:
    trainer = nxrs.Trainer(**config)
    history = trainer.fit(X, Y, epochs=epochs, validation_data=VAL)
    return trainer.state_hash(), history.history


@pytest.mark.parametrize("name", CONFIGS)
def test_same_bits_for_any_number_of_workers(ray_cluster: Any, name: str) -> None:
    config = CONFIGS[name]
    expected_hash, expected_history = local(config)
    for workers in (1, 2, 3):
        trainer = nxrs.Trainer(**config)
        history = trainer.fit(
            X, Y, epochs=EPOCHS, validation_data=VAL, engine="ray", workers=workers
        )
        assert (workers, f"{trainer.state_hash():016x}") == (workers, f"{expected_hash:016x}")
        assert history.history == expected_history
        assert history.steps == trainer.steps == EPOCHS * -(-len(X) // config["batch_size"])


class KillWorker(logging.Handler):
    """SIGKILLs worker ``victim``'s process just after the blocks of step ``at`` were sent to
    it (in the driver, while that step's results are awaited)."""

    def __init__(self, victim: int, at: int) -> None:
        super().__init__(logging.DEBUG)
        self.victim, self.at = victim, at
        self.pids: dict[int, int] = {}
        self.killed: int | None = None
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        if record.msg.startswith("worker %d of %d: pid %d"):
            worker, _, pid = record.args  # type: ignore[misc]
            self.pids[worker] = pid
        elif record.msg.startswith("step %d:") and record.args[0] == self.at:  # type: ignore[index]
            self.killed = self.pids[self.victim]
            os.kill(self.killed, signal.SIGKILL)


def test_a_killed_worker_is_restarted_and_the_bits_do_not_change(
    ray_cluster: Any, tmp_path: Path
) -> None:
    config = CONFIGS["blocks"]
    expected_hash, expected_history = local(config, epochs=4)
    logger = logging.getLogger("nxrs.distributed")
    killer = KillWorker(victim=1, at=12)
    logger.addHandler(killer)
    logger.setLevel(logging.DEBUG)
    try:
        trainer = nxrs.Trainer(**config)
        history = trainer.fit(
            X, Y, epochs=4, validation_data=VAL, engine="ray", workers=2,
            checkpoint=tmp_path / "run", every=7,
        )  # fmt: skip
    finally:
        logger.removeHandler(killer)
        logger.setLevel(logging.NOTSET)
    assert killer.killed is not None, f"worker 1 was never seen: {killer.messages}"
    print(f"SIGKILLed worker 1 (pid {killer.killed}) at step 12")
    assert trainer.state_hash() == expected_hash
    assert history.history == expected_history
    restarts = [m for m in killer.messages if "restarted by Ray" in m]
    assert len(restarts) == 1 and f"pid {killer.killed}" in restarts[0], killer.messages
    assert "blocks of step 12 were recomputed" in restarts[0]


def test_checkpoint_and_resume_across_engines(ray_cluster: Any, tmp_path: Path) -> None:
    """One run in one directory: an epoch on 2 Ray workers, one in this process, one on 3
    workers, each leg a new trainer resuming (as after a lost driver): the uninterrupted
    single-process run's state."""
    config = CONFIGS["blocks"]
    expected_hash, _ = local(config)
    run = tmp_path / "run"
    legs: list[dict[str, Any]] = [
        {"engine": "ray", "workers": 2},
        {},
        {"engine": "ray", "workers": 3},
    ]
    for epochs, engine in enumerate(legs, start=1):
        trainer = nxrs.Trainer(**config)
        trainer.fit(X, Y, epochs=epochs, checkpoint=run, every=4, **engine)
        assert trainer.epoch == epochs
    assert trainer.state_hash() == expected_hash
    assert nxrs.Trainer.load(sorted(run.glob("step-*.nxck"))[-1]).state_hash() == expected_hash
    manifest = json.loads((run / "nxrs-run.json").read_text())
    assert [e["event"] for e in manifest["events"]] == [
        "start", "complete", "resume", "complete", "resume", "complete"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"engine": "spark"}, "engine must be"),
        ({"engine": "ray", "workers": 0}, "workers = 0 must be at least 1"),
        ({"engine": "ray", "workers": True}, "workers = True must be an int"),
        ({"workers": 2}, "need engine='ray'"),
        ({"ray_address": "auto"}, "need engine='ray'"),
    ],
)
def test_engine_arguments_are_checked_first(kwargs: dict[str, Any], match: str) -> None:
    trainer = nxrs.Trainer(**CONFIGS["blocks"])
    with pytest.raises(ValueError, match=match):
        trainer.fit(X, Y, epochs=1, **kwargs)
    assert trainer.steps == 0


def test_shares_cover_the_blocks_in_order() -> None:
    distributed = pytest.importorskip(
        "nxrs.distributed", reason="the ray extra is not installed (pip install '.[ray]')"
    )
    for blocks in range(0, 12):
        for workers in range(1, 6):
            runs = distributed.shares(blocks, workers)
            assert [i for run in runs for i in run] == list(range(blocks))
            assert max(map(len, runs)) - min(map(len, runs)) <= 1
