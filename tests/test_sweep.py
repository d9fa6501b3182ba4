"""``nxrs.sweep`` and ``nxrs sweep``: Ray tasks, each in its own run directory; a task whose
process is SIGKILLed is retried and resumes from its checkpoint; every result equals the
configuration's solo run (its full-state hash, compared as an integer)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nxrs
import nxrs._runs.transcript
from nxrs._sweeps import sweep
from nxrs.cli import main
from nxrs.cli._grid import expand_grid, parse_grid

RNG = np.random.default_rng(11)
X = RNG.standard_normal((600, 16)).astype(np.float32)
Y = RNG.integers(0, 4, 600)
X_VAL, Y_VAL = X[:100], Y[:100]

#: The configuration the test kills: long enough (softf32, many epochs) for the kill to land
#: after its first checkpoint and well before its end.
LONG = {"layers": [16, 32, 4], "batch_size": 8, "lr": 0.003, "backend": "soft", "epochs": 40}
CONFIGS = [
    LONG,
    {"layers": [16, 32, 4], "batch_size": 8, "lr": 0.01},
    {"layers": [16, 8, 4], "batch_size": 16, "grad_block": 4, "seed": 3},
    {"layers": [16, 32, 4], "batch_size": 32, "optimizer": "sgd", "lr": 0.05, "epochs": 3},
]
EPOCHS = 5


def solo_hash(config: dict[str, Any]) -> int:
    kwargs = {k: v for k, v in config.items() if k != "epochs"}
    trainer = nxrs.Trainer(**kwargs)
    trainer.fit(X, Y, epochs=config.get("epochs", EPOCHS))
    return trainer.state_hash()


def kill_after_first_checkpoint(root: Path, killed: list[int], deadline: float) -> None:
    """Waits for the LONG configuration's first checkpoint, then SIGKILLs the process training
    it (its pid from the run manifest's start event)."""
    while time.monotonic() < deadline:
        for manifest in root.glob("run-*/nxrs-run.json"):
            run = manifest.parent
            try:
                document = json.loads(manifest.read_text())
            except (OSError, ValueError):
                continue
            if document["plan"]["epochs"] != LONG["epochs"] or not any(run.glob("step-*.nxck")):
                continue
            pid = document["events"][0]["pid"]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            return
        time.sleep(0.01)


def test_sweep_survives_a_killed_task_and_matches_solo_runs(
    ray_cluster: Any, tmp_path: Path
) -> None:
    root = tmp_path / "sweep"
    killed: list[int] = []
    killer = threading.Thread(
        target=kill_after_first_checkpoint, args=(root, killed, time.monotonic() + 120)
    )
    killer.start()
    try:
        results = sweep(
            CONFIGS, X, Y, epochs=EPOCHS, directory=root, validation_data=(X_VAL, Y_VAL), every=50
        )
    finally:
        killer.join()
    assert killed, "the long configuration's process was never seen to checkpoint"
    print(f"SIGKILLed pid {killed[0]}")
    assert [r["config"] for r in results] == CONFIGS
    for record in results:
        assert record["error"] is None
        assert int(record["state_hash"], 16) == solo_hash(record["config"])
    long = results[0]
    # The retried task resumed from the killed one's checkpoint, in another process.
    assert long["resumed_from_step"] is not None and long["resumed_from_step"] >= 50
    events = json.loads((Path(long["run_dir"]) / "nxrs-run.json").read_text())["events"]
    assert [e["event"] for e in events] == ["start", "resume", "complete"]
    assert events[0]["pid"] == killed[0] != events[1]["pid"]
    assert all(r["resumed_from_step"] is None for r in results[1:])
    # Each run's transcript (the killed one's too) is a whole chain ending at its final state.
    for record in results:
        entries = nxrs._runs.transcript.Transcript(record["run_dir"]).read()
        assert [e["prev"] for e in entries[1:]] == [e["digest"] for e in entries[:-1]]
        assert entries[-1]["state_digest"] == record["state_digest"]
    steps = [e["step"] for e in nxrs._runs.transcript.Transcript(long["run_dir"]).read()]
    assert steps == sorted(set(steps)) and steps[-1] == long["steps"]
    trainer = nxrs.Trainer(**{k: v for k, v in CONFIGS[1].items()})
    trainer.fit(X, Y, epochs=EPOCHS)
    assert results[1]["val_loss"] == trainer.evaluate(X_VAL, Y_VAL)[0]
    # What was written at the end is what was returned.
    assert json.loads((root / "sweep.json").read_text()) == json.loads(json.dumps(list(results)))
    lines = (root / "sweep.csv").read_text().splitlines()
    assert len(lines) == 1 + len(CONFIGS) and lines[0].startswith("layers,batch_size,lr,backend")
    # Running the sweep again finds every run complete: nothing retrained, same results.
    again = sweep(CONFIGS, X, Y, epochs=EPOCHS, directory=root, validation_data=(X_VAL, Y_VAL))
    assert [r["state_hash"] for r in again] == [r["state_hash"] for r in results]
    assert all(r["resumed_from_step"] == r["steps"] for r in again)


def test_sweep_frame_and_bad_configurations(ray_cluster: Any, tmp_path: Path) -> None:
    with pytest.raises(nxrs.ConfigError, match="configuration 1"):
        sweep(
            [{"layers": [16, 4]}, {"layers": [16, 4], "lr": -1.0}],
            X,
            Y,
            epochs=1,
            directory=tmp_path,
        )
    with pytest.raises(TypeError, match="configuration 0"):
        sweep([{"layers": [16, 4], "nonsense": 1}], X, Y, epochs=1, directory=tmp_path)
    with pytest.raises(ValueError, match="the same run"):
        sweep(
            [{"layers": [16, 4]}, {"layers": [16, 4], "lr": 0.001}],
            X,
            Y,
            epochs=1,
            directory=tmp_path,
        )
    with pytest.raises(nxrs.InputError):
        sweep([{"layers": [15, 4]}], X, Y, epochs=1, directory=tmp_path)
    assert not any(tmp_path.iterdir()), "nothing may be written for refused input"
    pd = pytest.importorskip("pandas")
    results = sweep(
        [{"layers": [16, 4], "seed": s} for s in (1, 2)], X, Y, epochs=1, directory=tmp_path
    )
    frame = results.to_pandas()
    assert isinstance(frame, pd.DataFrame)
    assert list(frame["seed"]) == [1, 2] and list(frame["state_hash"]) == [
        r["state_hash"] for r in results
    ]
    # The same sweep on other data: each task's fit refuses the run directory (a MismatchError
    # inside the task, not retried); every record says so, and the sweep returns.
    configs = [{"layers": [16, 4], "seed": s} for s in (1, 2)]
    other = sweep(configs, X + 1, Y, epochs=1, directory=tmp_path)
    assert all(
        r["error"].startswith("MismatchError: ") and "other data" in r["error"] for r in other
    )
    assert all(r["state_hash"] is None for r in other)


def test_grid_syntax() -> None:
    grid = parse_grid(
        ["lr=0.001,1e-2", "hidden=[[64], [128, 64]]", "shuffle=false,True", "optimizer=adam"]
    )
    assert grid == {
        "lr": [0.001, 0.01],
        "hidden": [[64], [128, 64]],
        "shuffle": [False, True],
        "optimizer": ["adam"],
    }
    assert len(expand_grid(grid)) == 8
    assert expand_grid(grid)[1] == {
        "lr": 0.001,
        "hidden": [64],
        "shuffle": True,
        "optimizer": "adam",
    }
    for bad in (["lr"], ["=1"], ["lr="], ["lr=1", "lr=2"], ["h=[1,"], ["h=[]"]):
        with pytest.raises(ValueError):
            parse_grid(bad)


def test_sweep_command(
    ray_cluster: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    np.savez("data.npz", X=X, y=Y)
    # A relative --dir: the runs must land under this directory, not under the Ray workers'
    # own working directory.
    argv = ["sweep", "--data", "data.npz", "--dir", "s", "--epochs", "2",
            "--grid", "hidden=[8, [4, 4]]", "--grid", "lr=0.01,0.02", "--json"]  # fmt: skip
    assert main(argv) == 0
    records = json.loads(capsys.readouterr().out)
    for record in records:
        assert Path(record["run_dir"]).parent == tmp_path / "s"
        assert (Path(record["run_dir"]) / "nxrs-run.json").is_file()
    # The records hold the layers the grid's hidden sizes gave (inputs and outputs from the data).
    layers = [[16, 8, 4], [16, 8, 4], [16, 4, 4, 4], [16, 4, 4, 4]]
    assert [r["config"] for r in records] == [
        {"lr": lr, "layers": layers[i]} for i, lr in enumerate([0.01, 0.02] * 2)
    ]
    assert {r["steps"] for r in records} == {2 * -(-480 // 32)}  # 480 training samples, batch 32
    with pytest.raises(SystemExit) as usage:
        main(["sweep", "--dir", str(tmp_path), "--grid", "lr"])
    assert usage.value.code == 2
