"""``nxrs verify`` and ``nxrs diff`` of runs on object storage name them by their URLs, never
by the local copy their checkpoints are read from (each store's emulator, as in
``test_object_store``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from store_support import Emulator
from test_object_store import env, store

import nxrs
from nxrs.cli import main

__all__ = ["env", "store"]  # fixtures: each store's emulator, this process pointed at it

RNG = np.random.default_rng(8)
X = RNG.standard_normal((60, 5)).astype(np.float32)
Y = RNG.integers(0, 3, 60)


def fit(url: str, epochs: int, every: int) -> None:
    trainer = nxrs.Trainer(layers=[5, 8, 3], batch_size=6, seed=2)
    trainer.fit(X, Y, epochs, checkpoint=url, every=every, keep="all", progress=False)


def test_runs_on_object_storage_are_named_by_their_urls(
    store: Emulator, env: dict[str, str], tmp_path: Path, capsys: Any
) -> None:
    cache = env["NXRS_CACHE_DIR"]
    a, b = store.url("runs/a"), store.url("runs/b")
    fit(a, 2, 4)  # steps 4, 8, 12, 16, 20
    fit(b, 1, 4)  # steps 4, 8, 10: replayed from step 8 to 10
    data = tmp_path / "data.npz"
    np.savez(data, X=X, y=Y)

    # A fit run without its data: the message names the run's URL.
    with pytest.raises(nxrs.MismatchError) as raised:
        nxrs.verify(a)
    assert f"{a} was trained by fit" in str(raised.value) and cache not in str(raised.value)
    assert main(["verify", a]) == 1
    err = capsys.readouterr().err
    assert a in err and cache not in err

    # Both sides of a diff, and the checkpoint its replay starts from.
    assert main(["diff", a, b, "--data", str(data), "--json"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out)
    assert (report["a"]["path"], report["b"]["path"]) == (a, b) and cache not in out
    assert report["replay_source"] == f"{a}/step-{8:012d}.nxck"

    # A damaged transcript: the failure names the object by its URL.
    store.write(f"{a}/nxrs-transcript.jsonl", b"not json\n")
    verified = nxrs.verify(a, X, Y, segments=0)
    assert verified.first_failure is not None
    assert verified.first_failure.startswith(f"the transcript cannot be read: {a}/")
    assert cache not in json.dumps(verified.to_dict())
