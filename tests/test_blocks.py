"""Training from gradient blocks (what `nxrs._train.distributed`'s workers compute) gives fit's
bits.

A trainer driven by ``_batch_blocks`` -> ``_block_gradient`` (on a second trainer that holds only
the current parameters, as a worker does) -> ``_apply_blocks`` must end in the same full state
and report the same step losses and epochs as ``_run``, for several blocks per batch, short last
batches and shuffling; blocks that do not belong to the batch are refused and change nothing.
"""

from __future__ import annotations

import numpy as np
import pytest

import nxrs

CONFIGS = [
    {"layers": [5, 7, 3], "batch_size": 8, "grad_block": 3},  # 3 blocks, the last short
    {"layers": [5, 4, 3], "batch_size": 5, "grad_block": None, "optimizer": "sgd"},
    {"layers": [5, 6, 3], "batch_size": 4, "grad_block": 1, "shuffle": False},
]


def data(n: int = 23) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return rng.random((n, 5), dtype=np.float32), rng.integers(0, 3, n)


@pytest.mark.parametrize("config", CONFIGS)
def test_blocks_from_a_replica_give_runs_bits(config: dict[str, object]) -> None:
    x, y = data()
    straight = nxrs.Trainer(**config)  # type: ignore[arg-type]
    driven = nxrs.Trainer(**config)  # type: ignore[arg-type]
    worker = nxrs.Trainer(**config, backend="soft")  # type: ignore[arg-type]
    d_straight, d_driven = straight._dataset(x, y), driven._dataset(x, y)
    d_worker = worker._dataset(x, y)
    for _ in range(11):  # past two epoch ends
        expected = straight._run(d_straight, epochs=10, max_steps=1)
        # The worker gets the parameters only (the moments stay with the driver).
        worker._set_params(list(driven.state_dict().values())[: 2 * (len(driven.sizes) - 1)])
        blocks = [worker._block_gradient(d_worker, s) for s in driven._batch_blocks(d_driven)]
        got = driven._apply_blocks(d_driven, blocks)
        assert got == expected
        assert driven.state_hash() == straight.state_hash()


def test_blocks_of_another_batch_are_refused() -> None:
    x, y = data()
    t = nxrs.Trainer(layers=[5, 4, 3], batch_size=6, grad_block=4)
    d = t._dataset(x, y)
    blocks = [t._block_gradient(d, s) for s in t._batch_blocks(d)]
    before = t.state_hash()
    with pytest.raises(nxrs.InputError, match="gradient blocks"):
        t._apply_blocks(d, blocks[:1])
    with pytest.raises(nxrs.InputError, match="sample losses"):
        t._apply_blocks(d, blocks[::-1])
    sums, losses, correct, statistics = blocks[0]
    with pytest.raises(nxrs.InputError, match="is 4 arrays"):
        t._apply_blocks(d, [(sums[:-1], losses, correct, statistics), blocks[1]])
    assert t.state_hash() == before
