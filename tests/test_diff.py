"""``nxrs diff`` / ``nxrs.diff``: the first step at which two runs of one configuration differ.

Which step first uses the changed sample is computed without nxrs: from the reference's
epoch order and split (``tests/reference/general_ref.py``: ``epoch_order``, ``split``). The
states the report names are checked against the reference trained on each run's data, so the
bits the report shows truly differ there and were the same one step before.
"""

from __future__ import annotations

import importlib
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nxrs
from nxrs.cli import main

_TESTS_DIR = str(Path(__file__).resolve().parent)
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)
gr = importlib.import_module("reference.general_ref")
nxck_edit = importlib.import_module("nxck_edit")

STEP = 37  # the first step (state count after it) whose batch holds the changed sample
FIT = dict(layers=[6, 8, 3], seed=5, batch_size=2, shuffle=True, lr=0.01)
N = 80  # 40 steps an epoch: the changed sample is in batch 36 of epoch 0


def changed(x: np.ndarray, row: int) -> np.ndarray:
    out = x.copy()
    out[row, 0] += np.float32(0.5)
    return out


def reference_first_difference(config: dict[str, Any], a: Any, b: Any, steps: int) -> str | None:
    """The reference trained ``steps`` steps on ``a`` and on ``b`` (pairs x, y): the first
    differing cell in the report's words, or None."""
    ra, rb = gr.Trainer(gr.Config.make(**config)), gr.Trainer(gr.Config.make(**config))
    ra.train_steps(*a, steps)
    rb.train_steps(*b, steps)
    for (name, va), vb in zip(ra.state_dict().items(), rb.state_dict().values()):
        ua = np.asarray(va, np.float32).reshape(-1).view(np.uint32)
        ub = np.asarray(vb, np.float32).reshape(-1).view(np.uint32)
        differ = np.flatnonzero(ua != ub)
        if differ.size:
            i = int(differ[0])
            return f"{name}, element {i}|{int(ua[i]):#010x} vs {int(ub[i]):#010x}"
    return None


def named(difference: str | None) -> str:
    """The report's difference as ``reference_first_difference`` words it."""
    assert difference is not None
    m = re.fullmatch(
        r"tensor (\w+), element (\d+)(?: \(row-major \[[\d, ]+\]\))?: (.*)", difference
    )
    assert m, difference
    return f"{m[1]}, element {m[2]}|{m[3]}"


def check_against_reference(
    report: nxrs.DiffReport, config: dict[str, Any], a: Any, b: Any
) -> None:
    assert report.first_differing_step == STEP and report.common_step == STEP - 1
    assert reference_first_difference(config, a, b, STEP - 1) is None
    assert named(report.difference) == reference_first_difference(config, a, b, STEP)


@pytest.fixture(scope="module")
def fit_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two fit runs (checkpoint every 10 steps, all kept) whose data differ in the sample that
    batch 36 of epoch 0 (step 37) is the first to use, a third identical to the first but on
    two threads, one of another learning rate."""
    root = tmp_path_factory.mktemp("fit")
    x, y = gr.case_data(N, 6, 3, "cross_entropy")
    row = gr.epoch_order(FIT["seed"], 0, N, True)[(STEP - 1) * FIT["batch_size"]]
    xb = changed(x, row)
    runs = {"a": (x, 1, {}), "b": (xb, 1, {}), "a2": (x, 2, {}), "lr": (x, 1, {"lr": 0.02})}
    for name, (data, threads, extra) in runs.items():
        t = nxrs.Trainer(**{**FIT, **extra}, threads=threads)
        t.fit(data, y, 2, checkpoint=root / name, every=10, keep="all", progress=False)
    config = nxrs.Trainer(**FIT).config
    return {"root": root, "x": x, "xb": xb, "y": y, "config": config}


def test_fit_runs_differing_in_one_sample_first_differ_after_step_37(
    fit_runs: dict[str, Any],
) -> None:
    root, x, xb, y = (fit_runs[k] for k in ("root", "x", "xb", "y"))
    report = nxrs.diff(root / "a", root / "b", x, y, x_b=xb, y_b=y)
    assert not report.identical
    check_against_reference(report, fit_runs["config"], (x, y), (xb, y))
    assert report.data_differ is True and report.data_parts_differ == ["train"]
    assert report.a.data_digest != report.b.data_digest
    # Replayed from the newest common checkpoint (step 30), not from the start.
    assert report.replayed_from == 30 and report.replayed_steps == STEP - 30
    assert "the states first differ after step 37" in str(report)
    assert json.loads(report.to_json())["first_differing_step"] == STEP


def test_fit_runs_need_their_data_and_refuse_data_that_is_not_theirs(
    fit_runs: dict[str, Any],
) -> None:
    root, x, y = (fit_runs[k] for k in ("root", "x", "y"))
    with pytest.raises(nxrs.InputError, match="trained by fit: give its data"):
        nxrs.diff(root / "a", root / "b")
    # B's data defaults to A's, which is not B's.
    with pytest.raises(nxrs.MismatchError, match="run B is not the data it trained on"):
        nxrs.diff(root / "a", root / "b", x, y)


def test_fit_runs_on_data_files_compare_from_the_command_line(
    fit_runs: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, x, xb, y = (fit_runs[k] for k in ("root", "x", "xb", "y"))
    a, b = (str(root / r) for r in "ab")
    fa, fb = write_npz(tmp_path / "a.npz", x, y), write_npz(tmp_path / "b.npz", xb, y)
    assert main(["diff", a, b]) == 1
    assert "trained by fit: give its data" in capsys.readouterr().err
    assert main(["diff", a, b, "--data", fa]) == 1  # B's data defaults to A's: refused
    assert "is not the data it trained on" in capsys.readouterr().err
    assert main(["diff", a, b, "--data", fa, "--data-b", fb, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["first_differing_step"] == STEP


def test_runs_on_one_and_two_threads_are_identical(fit_runs: dict[str, Any]) -> None:
    root = fit_runs["root"]
    report = nxrs.diff(root / "a", root / "a2")
    assert report.identical and report.common_step == 2 * N // 2
    assert report.difference is None and report.data_differ is False
    assert main(["diff", str(root / "a"), str(root / "a2")]) == 0


def test_a_shorter_run_saved_at_other_steps_is_identical_up_to_its_last_step(
    fit_runs: dict[str, Any], tmp_path: Path
) -> None:
    x, y = fit_runs["x"], fit_runs["y"]
    a, b = tmp_path / "a", tmp_path / "b"
    nxrs.Trainer(**FIT).fit(x, y, 2, checkpoint=a, every=15, progress=False)
    nxrs.Trainer(**FIT, threads=2).fit(x, y, 1, checkpoint=b, every=7, progress=False)
    # Step 0 is the only step both transcripts record: both are replayed to step 40, each
    # replayed state checked against the entries of its transcript (15 and 30; 7, 14, ...).
    with pytest.raises(nxrs.InputError, match="give its data"):
        nxrs.diff(a, b)
    report = nxrs.diff(a, b, x, y)
    assert report.identical and report.common_step == 40 == report.compared_step
    assert report.replayed_from == 0 and report.replayed_steps == 40
    assert "identical: the states are the same bits up to step 40" in str(report)


def test_runs_of_other_configurations_are_refused_naming_the_setting(
    fit_runs: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    root = fit_runs["root"]
    with pytest.raises(nxrs.MismatchError, match=r"different configurations: lr"):
        nxrs.diff(root / "a", root / "lr")
    assert main(["diff", str(root / "a"), str(root / "lr")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("nxrs diff: MismatchError:") and "lr" in err
    assert err.count("\n") == 1


def test_checkpoints_at_one_step_name_a_flipped_bit(
    fit_runs: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = fit_runs["root"] / "a" / "step-000000000040.nxck"
    flipped = tmp_path / "flipped.nxck"
    flipped.write_bytes(nxck_edit.flip_tensor_bit(original.read_bytes(), "W2", cell=13, bit=5))
    report = nxrs.diff(original, flipped)
    assert not report.identical and report.compared_step == 40
    assert report.difference is not None
    assert report.difference.startswith("tensor W2, element 13 (row-major [1, 5]): ")
    a, b = (int(h, 16) for h in report.difference.split(": ")[1].split(" vs "))
    assert a ^ b == 1 << 5
    assert nxrs.diff(original, shutil.copy(original, tmp_path / "copy.nxck")).identical
    assert main(["diff", str(original), str(flipped), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["difference"] == report.difference


def test_checkpoints_at_other_steps_replay_the_earlier_on_the_data(
    fit_runs: dict[str, Any],
) -> None:
    root, x, xb, y = (fit_runs[k] for k in ("root", "x", "xb", "y"))
    early, late = root / "a" / "step-000000000030.nxck", root / "a" / "step-000000000050.nxck"
    with pytest.raises(nxrs.InputError, match="give the data"):
        nxrs.diff(early, late)
    report = nxrs.diff(early, late, x, y)
    assert report.identical and report.common_step == 50 and report.replayed_steps == 20
    with pytest.raises(nxrs.MismatchError, match="not the data"):
        nxrs.diff(early, late, xb, y)
    # A's step 30 replayed to B's step 50 (A's data): the states differ there.
    other = nxrs.diff(early, root / "b" / "step-000000000050.nxck", x, y)
    assert not other.identical and other.compared_step == 50


def write_npz(path: Path, x: np.ndarray, y: np.ndarray) -> str:
    np.savez(path, X=x, y=y)
    return str(path)


def test_cli_runs_differing_in_one_sample_first_differ_after_step_37(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    n, seed = 60, 4
    x, y = gr.case_data(n, 6, 3, "cross_entropy")
    train, _ = gr.split(n, 0.2, seed)  # nxrs train's default test size
    # nxrs train shuffles; with batch size 1, step 37 takes position 36 of epoch 0's order.
    row = train[gr.epoch_order(seed, 0, len(train), True)[STEP - 1]]
    xb = changed(x, row)
    files = write_npz(tmp_path / "a.npz", x, y), write_npz(tmp_path / "b.npz", xb, y)
    # Trained in tmp_path on relative paths, compared from another directory: the recorded
    # "--data a.npz" is read where the command ran.
    monkeypatch.chdir(tmp_path)
    for name in "ab":
        argv = ["train", "--data", f"{name}.npz", "--hidden", "8", "--batch-size", "1"]
        argv += ["--lr", "0.01", "--epochs", "2", "--seed", str(seed), "--every", "10"]
        assert main([*argv, "--ckpt-dir", f"runs/{name}", "--json"]) == 0
    capsys.readouterr()
    monkeypatch.chdir((tmp_path / "runs").resolve())
    a, b = "a", "b"
    assert main(["diff", a, b]) == 1
    text = capsys.readouterr().out
    assert "the states first differ after step 37" in text
    assert "the runs' training data differ" in text
    assert main(["diff", a, b, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["first_differing_step"] == STEP and report["data_differ"] is True
    # The default keep (3) pruned every checkpoint before step 37: replayed from the start.
    assert report["replayed_from"] == 0 and report["replay_source"] == "the configuration"
    config = nxrs.Trainer.load(sorted(Path(a).glob("*.nxck"))[-1]).config
    result = nxrs.diff(a, b)
    check_against_reference(result, config, (x[train], y[train]), (xb[train], y[train]))
    assert report["difference"] == result.difference
    # The data files moved: --data and --data-b name them.
    moved = [shutil.move(f, tmp_path / f"moved-{Path(f).name}") for f in files]
    assert main(["diff", a, b]) == 1
    assert "nxrs diff: InputError" in capsys.readouterr().err
    assert main(["diff", a, b, "--data", str(moved[0]), "--data-b", str(moved[1])]) == 1
    assert "first differ after step 37" in capsys.readouterr().out


def test_a_run_directory_and_a_file_are_refused(
    fit_runs: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    root = fit_runs["root"]
    with pytest.raises(nxrs.InputError, match="not one of each"):
        nxrs.diff(root / "a", root / "a" / "step-000000000010.nxck")
    assert main(["diff", str(root / "a"), str(root / "nowhere")]) == 1
    assert "no such run directory or checkpoint file" in capsys.readouterr().err


def test_a_transcript_that_its_run_does_not_replay_to_is_refused(
    fit_runs: dict[str, Any], tmp_path: Path
) -> None:
    """B's entry at step 14 forged: the replay of B (from step 0, as in the test above) does
    not give it. A MismatchError rather than "identical"."""
    x, y = fit_runs["x"], fit_runs["y"]
    a, b = tmp_path / "a", tmp_path / "b"
    nxrs.Trainer(**FIT).fit(x, y, 2, checkpoint=a, every=15, progress=False)
    nxrs.Trainer(**FIT).fit(x, y, 1, checkpoint=b, every=7, progress=False)
    transcript = b / "nxrs-transcript.jsonl"
    entries = [json.loads(line) for line in transcript.read_text().splitlines()]
    next(e for e in entries if e["step"] == 14)["state_digest"] = "0" * 64
    transcript.write_text("".join(json.dumps(e) + "\n" for e in entries))
    with pytest.raises(nxrs.MismatchError, match=r"run B from step 0 .* at step 14"):
        nxrs.diff(a, b, x, y)


def test_runs_saved_at_every_step_need_no_replay_and_no_data(
    fit_runs: dict[str, Any], tmp_path: Path
) -> None:
    x, xb, y = (fit_runs[k] for k in ("x", "xb", "y"))
    for name, data in (("a", x), ("b", xb)):
        nxrs.Trainer(**FIT).fit(data, y, 1, checkpoint=tmp_path / name, every=1, keep="all")
    report = nxrs.diff(tmp_path / "a", tmp_path / "b")
    assert report.first_differing_step == STEP and report.replayed_steps == 0
    check_against_reference(report, fit_runs["config"], (x, y), (xb, y))


def cli_outcome(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """A command's exit status (a usage error's too) and its error's words, without the
    command's prefix and the exception's name (``nxrs diff: InputError: ...``), the command
    named COMMAND."""
    try:
        status = main(argv)
    except SystemExit as usage:
        status = int(usage.code or 0)
    err = re.sub(r"^nxrs \w+: (error: )?(\w+Error: )?", "", capsys.readouterr().err.strip())
    return status, re.sub(r"nxrs (diff|verify)", "nxrs COMMAND", err)


def test_diff_data_and_verify_data_accept_and_refuse_the_same_files(
    fit_runs: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One reading of a data file for both commands: for two fit runs that must be replayed
    (saved at other steps), the file is their data read whole, in both."""
    x, xb, y = (fit_runs[k] for k in ("x", "xb", "y"))
    a, b = tmp_path / "a", tmp_path / "b"
    nxrs.Trainer(**FIT).fit(x, y, 2, checkpoint=a, every=15, progress=False)
    nxrs.Trainer(**FIT).fit(x, y, 1, checkpoint=b, every=7, progress=False)
    (tmp_path / "notes.txt").write_text("not data")
    files = {
        "theirs": write_npz(tmp_path / "theirs.npz", x, y),
        "missing": str(tmp_path / "missing.npz"),
        "a text file": str(tmp_path / "notes.txt"),
        "empty": "",
    }
    for what, file in files.items():
        verified = cli_outcome(["verify", str(a), "--segments", "1", "--data", file], capsys)
        diffed = cli_outcome(["diff", str(a), str(b), "--data", file], capsys)
        assert verified == diffed, what
        assert (verified[0] == 0) == (what == "theirs"), (what, verified)
    # Other data: both refuse it as not the run's (in their own words: a digest that differs).
    other = write_npz(tmp_path / "other.npz", xb, y)
    assert main(["verify", str(a), "--segments", "1", "--data", other]) == 1
    assert main(["diff", str(a), str(b), "--data", other]) == 1
    assert "not the data it trained on" in capsys.readouterr().err


def test_checkpoints_of_nxrs_train_replay_on_the_train_split_of_the_data_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    x, y = gr.case_data(60, 6, 3, "cross_entropy")
    data = write_npz(tmp_path / "data.npz", x, y)
    run = tmp_path / "run"
    argv = ["train", "--data", data, "--hidden", "8", "--batch-size", "4", "--epochs", "2"]
    assert main([*argv, "--every", "4", "--keep", "all", "--ckpt-dir", str(run), "--json"]) == 0
    capsys.readouterr()
    early, late = (str(run / f"step-{s:012d}.nxck") for s in (4, 16))
    assert main(["diff", early, late, "--data", data, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["identical"] is True and report["replayed_steps"] == 12
    result = nxrs.diff(early, late, data=data)
    assert result.identical and result.compared_step == 16
    # The train split is what the run trained on: the whole file is not.
    with pytest.raises(nxrs.MismatchError, match="not the data"):
        nxrs.diff(early, late, x, y)
