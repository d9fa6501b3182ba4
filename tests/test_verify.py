"""``nxrs verify`` / ``nxrs.verify``: an untouched run verifies (every segment, or K of them);
each tampering is caught and named in the report's first failure (a flipped bit in a
checkpoint, two checkpoints swapped, a transcript entry removed, a checkpoint's learning rate
edited, one row of the data changed in the train or the test split, the final model replaced
or deleted); runs trained on Ray workers, on 2 threads, killed 10 times, or pruned to 3
checkpoints verify on one thread, a pruned segment replayed from the nearest kept state.

The tampered files are made with ``nxck_edit`` (valid files: checksums recomputed), so only the
digests can tell."""

from __future__ import annotations

import json
import random
import shutil
import signal
from pathlib import Path
from typing import Any

import numpy as np
import nxck_edit
import pytest

import nxrs
import nxrs._audit.verify_replays
import nxrs._runs.transcript
from nxrs._runs.transcript import TRANSCRIPT_NAME
from nxrs.cli import main
from nxrs.data import split

#: The CLI run: 200 samples, 40 of them the test split; 160 / 8 = 20 steps an epoch, 2 epochs,
#: a checkpoint every 2 steps: 20 checkpoints (entries 1 ..= 20 after the start, entry 0).
SAMPLES, FEATURES, CLASSES = 200, 8, 3
EVERY, EPOCHS, CHECKPOINTS = 2, 2, 20


def name_of(step: int) -> str:
    return f"step-{step:012d}.nxck"


def train(data: Path, directory: Path, *extra: str) -> None:
    argv = ["train", "--data", str(data), "--layers", f"{FEATURES},16,{CLASSES}"]
    argv += ["--batch-size", "8", "--epochs", str(EPOCHS), "--every", str(EVERY)]
    argv += ["--keep", "all", "--ckpt-dir", str(directory), "--json", *extra]
    assert main(argv) == 0


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((SAMPLES, FEATURES)).astype(np.float32)
    y = np.argmax(x[:, :CLASSES], axis=1).astype(np.int64)
    path = tmp_path_factory.mktemp("verify-data") / "data.npz"
    np.savez(path, X=x, y=y)
    return path


@pytest.fixture(scope="module")
def cli_run(data_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("verify-run") / "run"
    train(data_file, directory)
    assert len(list(directory.glob("step-*.nxck"))) == CHECKPOINTS
    return directory


@pytest.fixture
def run(cli_run: Path, tmp_path: Path) -> Path:
    """A copy of the CLI run to tamper with."""
    copy = tmp_path / "run"
    shutil.copytree(cli_run, copy)
    return copy


def test_a_run_of_20_checkpoints_verifies(cli_run: Path, capsys: Any) -> None:
    report = nxrs.verify(cli_run, segments="all")
    assert report.ok and report.failures == [] and report.first_failure is None
    assert report.entries == CHECKPOINTS + 1
    assert [(s.start, s.end) for s in report.segments] == [(i, i + 1) for i in range(20)]
    assert all(s.status == "ok" and s.steps == EVERY for s in report.segments)
    # Each segment from its own start: entry 0 is the fresh trainer, the others checkpoints.
    assert [s.replayed_from for s in report.segments] == list(range(20))
    assert report.segments[0].replayed_from_kind == "start"
    assert {c["status"] for c in report.checkpoints} == {"ok"}
    assert [c["entry"] for c in report.checkpoints] == list(range(1, 21))
    parts = report.data["parts"]
    assert report.data["source"] == "command"
    assert parts["train"]["checked"] and parts["train"]["ok"]
    assert parts["test"]["checked"] and parts["test"]["ok"]
    assert not parts["validation"]["checked"]

    default = nxrs.verify(cli_run)  # 8 chosen by seed 0 among the first 19, plus the last
    expected = [*sorted(random.Random(0).sample(range(19), 8)), 19]
    assert [s.start for s in default.segments] == expected and default.ok

    assert main(["verify", str(cli_run), "--all", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["ok"] is True and document["first_failure"] is None
    assert document["entries"] == 21 and len(document["segments"]) == 20
    keys = {"start", "end", "start_step", "end_step", "replayed_from", "steps", "seconds"}
    assert keys | {"status", "difference"} <= set(document["segments"][0])
    assert {"run_dir", "checkpoints", "failures", "data", "seconds"} <= set(document)
    assert main(["verify", str(cli_run), "--segments", "3", "--seed", "5"]) == 0
    assert "OK" in capsys.readouterr().out


def check_caught(run: Path, expected: str, **kwargs: Any) -> nxrs.VerifyReport:
    """The tampered run fails, naming ``expected`` first, in the report and on the CLI."""
    report = nxrs.verify(run, segments="all", **kwargs)
    assert not report.ok
    assert report.first_failure == expected, report.failures
    return report


def cli_line(run: Path, capsys: Any, *extra: str) -> str:
    assert main(["verify", str(run), "--json", *extra]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["first_failure"] in captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("nxrs verify: ")
    return lines[0]


def test_a_flipped_bit_in_a_middle_checkpoint(run: Path, capsys: Any) -> None:
    path = run / name_of(20)  # entry 10
    path.write_bytes(nxck_edit.flip_tensor_bit(path.read_bytes(), "W1", cell=5, bit=3))
    nxrs.Trainer.load(path)  # a valid file: only the digest tells
    report = check_caught(run, f"checkpoint {name_of(20)} differs from its entry 10")
    assert report.failures == [report.first_failure]  # its segments replay around it
    after = report.segments[10]
    assert (after.start, after.replayed_from, after.status) == (10, 9, "ok")
    line = cli_line(run, capsys)
    assert line == f"nxrs verify: checkpoint {name_of(20)} differs from its entry 10"


def test_a_swapped_pair_of_checkpoints(run: Path) -> None:
    a, b = run / name_of(10), run / name_of(12)
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)
    report = check_caught(run, f"checkpoint {name_of(10)} differs from its entry 5")
    assert f"checkpoint {name_of(12)} differs from its entry 6" in report.failures


def test_a_deleted_transcript_entry(run: Path) -> None:
    path = run / TRANSCRIPT_NAME
    lines = path.read_text().splitlines(keepends=True)
    del lines[7]
    path.write_text("".join(lines))
    report = check_caught(
        run,
        "chain broken at entry 7: it says it is entry 8 (an entry before it was removed or "
        "inserted)",
    )
    assert f"checkpoint {name_of(14)} has no transcript entry" in report.failures


def test_an_edited_learning_rate_in_one_checkpoint(run: Path) -> None:
    path = run / name_of(16)
    original = nxck_edit.header(path.read_bytes())["config"]["general"]["optimizer"]["lr_bits"]
    edited = original + 1  # the next binary32 up: same digit count, so the header fits

    def edit(config: dict[str, Any]) -> None:
        config["general"]["optimizer"]["lr_bits"] = edited

    path.write_bytes(nxck_edit.edit_config(path.read_bytes(), edit))
    assert (
        nxrs.Trainer.load(path).hyperparameters["lr"]
        != nxrs.Trainer.load(run / name_of(14)).hyperparameters["lr"]
    )
    check_caught(run, f"checkpoint {name_of(16)}: its configuration differs from the run's (lr)")


def changed_copy(data_file: Path, directory: Path, side: str) -> Path:
    """A copy of the data file with one row changed: a training row or a test row of the
    run's split (``nxrs train``'s seed 0, test size 0.2)."""
    with np.load(data_file) as f:
        x, y = f["X"].copy(), f["y"].copy()
    train_rows, test_rows = split(SAMPLES, 0.2, 0)
    row = (train_rows if side == "train" else test_rows)[3]
    x[row, 0] += 1.0
    path = directory / f"changed-{side}.npz"
    np.savez(path, X=x, y=y)
    return path


@pytest.mark.parametrize("side", ["train", "test"])
def test_one_changed_row_of_the_data(
    cli_run: Path, data_file: Path, tmp_path: Path, side: str, capsys: Any
) -> None:
    changed = changed_copy(data_file, tmp_path, side)
    expected = f"data digest differs: the {side} split"
    report = check_caught(cli_run, expected, data=changed)
    assert report.data["parts"][side]["ok"] is False
    other = "test" if side == "train" else "train"
    assert report.data["parts"][other]["ok"] is True
    if side == "test":
        # The test split is not trained on: every segment still replays to the same bits.
        assert report.failures == [expected]
    else:
        assert any("replays to another state" in f for f in report.failures)
    assert cli_line(cli_run, capsys, "--data", str(changed)) == f"nxrs verify: {expected}"


def test_a_final_model_replaced_by_one_of_another_seed(
    run: Path, data_file: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other-seed"
    train(data_file, other, "--seed", "1")
    last = name_of(EVERY * CHECKPOINTS)
    shutil.copyfile(other / last, run / last)
    check_caught(run, f"checkpoint {last}: its configuration differs from the run's (seed)")


def test_a_deleted_final_model(run: Path) -> None:
    last = name_of(EVERY * CHECKPOINTS)
    (run / last).unlink()
    report = check_caught(run, f"the final model {last} (entry 20, step 40) is missing")
    assert report.segments[-1].status == "ok"  # the transcript's last state is still reached


def test_a_failed_segment_names_the_first_difference(run: Path) -> None:
    """A transcript forged consistently (the chain recomputed) around a tampered checkpoint:
    only the replay can tell, and it names the tensor and element."""
    from nxrs._runs.transcript import canonical, entry_digest

    path = run / name_of(20)
    path.write_bytes(nxck_edit.flip_tensor_bit(path.read_bytes(), "W2", cell=7, bit=1))
    forged = nxrs.Trainer.load(path).state_digest()
    transcript = run / TRANSCRIPT_NAME
    entries = [json.loads(line) for line in transcript.read_text().splitlines()]
    entries[10]["state_digest"] = forged
    for i in range(10, len(entries)):
        entries[i]["prev"] = entries[i - 1]["digest"]
        entries[i]["digest"] = entry_digest(entries[i])
    transcript.write_bytes(b"".join(canonical(e) + b"\n" for e in entries))
    report = nxrs.verify(run, segments="all")
    assert report.first_failure is not None
    assert report.first_failure.startswith(
        "segment 9 -> 10 (steps 18 -> 20) replays to another state; first difference "
        "(replayed vs checkpoint): tensor W2, element 7"
    )


# --- fit runs: other engines, thread counts, interruptions and pruning

RNG = np.random.default_rng(11)
X = RNG.standard_normal((90, 6)).astype(np.float32)
Y = RNG.integers(0, 3, 90)
VAL = (X[:15], Y[:15])
CONFIG = {"layers": [6, 10, 3], "batch_size": 6, "grad_block": 2, "seed": 3}


def fit_run(directory: Path, **kwargs: Any) -> None:
    threads = kwargs.pop("threads", None)
    trainer = nxrs.Trainer(**CONFIG, threads=threads)
    trainer.fit(X, Y, epochs=2, validation_data=VAL, checkpoint=directory, every=3, **kwargs)


def test_runs_on_two_threads_verify_on_one(tmp_path: Path) -> None:
    fit_run(tmp_path / "run", keep="all", threads=2)
    report = nxrs.verify(tmp_path / "run", X, Y, validation_data=VAL, segments="all", threads=1)
    assert report.ok, report.failures
    assert report.data["parts"]["validation"]["ok"] is True
    assert report.data["parts"]["train"]["ok"] is True
    # The validation data not given: not checked, not a failure.
    partial = nxrs.verify(tmp_path / "run", X, Y, segments=2)
    assert partial.ok and partial.data["parts"]["validation"]["checked"] is False
    changed = (VAL[0].copy(), VAL[1])
    changed[0][2, 1] = 9.0
    report = nxrs.verify(tmp_path / "run", X, Y, validation_data=changed, segments=0)
    assert report.first_failure == "data digest differs: the validation data"


def test_a_run_on_two_ray_workers_verifies_on_one_thread(ray_cluster: Any, tmp_path: Path) -> None:
    fit_run(tmp_path / "run", keep="all", engine="ray", workers=2)
    report = nxrs.verify(tmp_path / "run", X, Y, validation_data=VAL, segments="all", threads=1)
    assert report.ok, report.failures
    # And verified on Ray tasks, the same verdict.
    on_ray = nxrs.verify(tmp_path / "run", X, Y, segments="all", engine="ray", workers=2)
    assert on_ray.ok and len(on_ray.segments) == len(report.segments)


def test_a_pruned_segment_replays_from_the_nearest_kept_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fit_run(tmp_path / "run", keep=3)
    replayed = []
    original = nxrs._audit.verify_replays.replay

    def counting(trainer: nxrs.Trainer, data: Any, step: int) -> None:
        replayed.append(step - trainer.steps)
        original(trainer, data, step)

    monkeypatch.setattr(nxrs._audit.verify_replays, "replay", counting)
    report = nxrs.verify(tmp_path / "run", X, Y, validation_data=VAL, segments="all")
    # The segments replayed from the start share one replay: no step is computed twice, so
    # verifying every segment of a pruned run costs no more than its training.
    assert sum(replayed) <= report.segments[-1].end_step
    assert report.ok, report.failures
    n = report.entries
    kept = {c["entry"] for c in report.checkpoints if c["status"] == "ok"}
    assert kept == {n - 3, n - 2, n - 1}
    assert {c["status"] for c in report.checkpoints} == {"ok", "missing"}  # pruned, listed
    for s in report.segments:
        if s.start in kept:
            assert (s.replayed_from, s.replayed_from_kind) == (s.start, "checkpoint")
        else:  # pruned: replayed from the run's fresh start, every entry on the way checked
            assert (s.replayed_from, s.replayed_from_kind, s.replayed_from_step) == (0, "start", 0)
            assert s.steps == s.end_step
    assert "from entry 0 (start)" in str(report)


def test_a_run_from_given_weights_is_not_verifiable_before_its_kept_checkpoints(
    tmp_path: Path,
) -> None:
    trainer = nxrs.Trainer(**CONFIG)
    trainer.train_steps(X, Y, 1)  # not a fresh trainer: entry 0 cannot be rebuilt
    trainer.fit(X, Y, epochs=2, checkpoint=tmp_path / "run", every=3, keep=2)
    report = nxrs.verify(tmp_path / "run", X, Y, segments="all")
    assert report.ok, report.failures
    statuses = [s.status for s in report.segments]
    assert statuses[-1] == "ok" and statuses[0] == "not-verifiable"
    assert report.segments[0].difference is not None
    assert report.segments[0].difference.startswith(
        "not verifiable: the run started from given weights"
    )


def test_a_run_killed_10_times_verifies(tmp_path: Path) -> None:
    """The chaos harness's run (its data, model and checkpoint interval), SIGKILLed at random
    instants until 10 kills landed, every checkpoint kept."""
    import test_chaos

    rng = np.random.default_rng(7)
    x = rng.normal(size=(1000, 16)).astype(np.float32)
    np.savez(tmp_path / "data.npz", X=x, y=np.argmax(x[:, :4], axis=1).astype(np.int64))
    chaos = test_chaos.kill_and_restart(
        lambda d: test_chaos.train_argv(tmp_path / "data.npz", d, "--keep", "all"),
        tmp_path,
        [signal.SIGKILL],
        random.Random(22),
        10,
        max_delay=2.0,
    )
    assert chaos.kills >= 10 and chaos.resumes >= 1
    for k in range(chaos.rounds):  # every round's run, killed or not
        report = nxrs.verify(tmp_path / f"round{k}", segments="all")
        assert report.ok, (k, report.failures)
        assert report.segments and all(s.status == "ok" for s in report.segments)


def test_errors(tmp_path: Path, cli_run: Path, capsys: Any) -> None:
    fit_run(tmp_path / "fit")
    with pytest.raises(nxrs.MismatchError, match="was trained by fit: give its data"):
        nxrs.verify(tmp_path / "fit")
    with pytest.raises(nxrs.ConfigError, match="segments"):
        nxrs.verify(cli_run, segments="some")  # type: ignore[arg-type]
    with pytest.raises(nxrs.InputError):
        nxrs.verify(cli_run, X)
    with pytest.raises(FileNotFoundError):
        nxrs.verify(tmp_path / "nowhere")
    assert main(["verify", str(tmp_path / "fit")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("nxrs verify: error: MismatchError:")
    with pytest.raises(SystemExit) as usage:
        main(["verify", str(cli_run), "--all", "--segments", "3"])
    assert usage.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
    # A progress bar when asked (on stderr), the same verdict.
    assert nxrs.verify(cli_run, segments=2, progress=True).ok
    assert "segment" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    report = nxrs.verify(empty, X, Y)
    missing = f"the transcript {TRANSCRIPT_NAME} is missing: nothing to verify against"
    assert report.first_failure == missing


def test_a_layer_model_run_verifies_and_a_flipped_running_statistic_is_named(
    tmp_path: Path,
) -> None:
    run = tmp_path / "cnn"
    layers = [
        nxrs.layers.Input(1, 8, 8),
        nxrs.layers.Conv2d(4, 3, padding=1),
        nxrs.layers.BatchNorm2d(),
        nxrs.layers.ReLU(),
        nxrs.layers.MaxPool2d(2),
        nxrs.layers.Dropout(0.25),
        nxrs.layers.Flatten(),
        nxrs.layers.Dense(3),
    ]
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((60, 64)).astype(np.float32), rng.integers(0, 3, 60)
    trainer = nxrs.Trainer(layers=layers, batch_size=12, seed=4)
    trainer.fit(x, y, 2, checkpoint=run, every=2, keep="all", progress=False)
    report = nxrs.verify(run, x, y, segments="all")
    assert report.ok, report.first_failure
    middle = sorted(run.glob("*.nxck"))[2]
    middle.write_bytes(nxck_edit.flip_tensor_bit(middle.read_bytes(), "var2", 1))
    report = nxrs.verify(run, x, y, segments="all")
    assert report.first_failure == f"checkpoint {middle.name} differs from its entry 3"


def test_a_run_written_by_another_version_verifies_with_a_note(tmp_path: Path) -> None:
    run = tmp_path / "old"
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((40, 6)).astype(np.float32), rng.integers(0, 2, 40)
    nxrs.Trainer(layers=[6, 4, 2], batch_size=8).fit(x, y, 2, checkpoint=run, every=5)
    path = run / TRANSCRIPT_NAME
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    previous = None
    for entry in entries:  # rewritten as nxrs 0.0.9 would have written them, chain and all
        entry.update(nxrs_version="0.0.9", prev=previous)
        entry["digest"] = nxrs._runs.transcript.entry_digest(entry)
        previous = entry["digest"]
    path.write_text("".join(nxrs._runs.transcript.canonical(e).decode() + "\n" for e in entries))
    report = nxrs.verify(run, x, y, segments="all")
    assert report.ok, report.first_failure
    assert any("written by nxrs 0.0.9" in note for note in report.notes)
