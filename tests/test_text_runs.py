"""Character models on text (docs/TRAINING.md sections 15.8 and 15.9): a token stream's run
takes each step on the windows its step number draws, estimates its losses on windows of their
own streams, resumes anywhere to the same bits; generation is section 15.9's draw, the same on
every backend, thread count and vector path; ``nxrs train --data FILE.txt`` and ``nxrs sample``
from a fresh clone. The windows and the draws are recomputed here from the text alone (with the
independent reference's random streams), never read back from nxrs."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nxrs

general_ref = importlib.import_module("reference.general_ref")
layers_ref = importlib.import_module("reference.layers_ref")
ROOT = Path(__file__).resolve().parent.parent

WINDOW, EVALUATE, SAMPLE = 0x77696E64, 0x6576616C, 0x73616D70

#: A small text of many repeats (its vocabulary: 18 characters).
TEXT = nxrs.data.Text.from_string("to be, or not to be, that is the question:\nwhether 'tis " * 12)
V = len(TEXT.vocab)
LAYERS = nxrs.layers.gpt(V, context=8, layers=1, heads=2, width=8)
SETTINGS: dict[str, Any] = {"optimizer": "adamw", "lr": 0.01, "batch_size": 3, "seed": 9}


def windows(stream: np.ndarray, positions: list[int], t: int = 8) -> tuple[Any, Any]:
    x = np.stack([stream[p : p + t] for p in positions])
    y = np.stack([stream[p + 1 : p + t + 1] for p in positions])
    return x, y


def step_windows(step: int, n: int, seed: int = 9, batch: int = 3, t: int = 8) -> list[int]:
    """Section 15.8's windows of step ``step``, drawn here from the reference's streams."""
    stream = general_ref.Stream(seed, WINDOW, step)
    return [stream.below(n - t) for _ in range(batch)]


def test_each_step_trains_on_the_windows_its_step_draws() -> None:
    """fit on the stream ends where train_steps on the windows drawn here ends, step by step."""
    streamed = nxrs.Trainer(layers=LAYERS, **SETTINGS)
    streamed.fit(TEXT.train, steps=4)
    # One batch an epoch, in the windows' order (no shuffle): each step the drawn batch.
    by_hand = nxrs.Trainer(layers=LAYERS, shuffle=False, **SETTINGS)
    for step in range(4):
        x, y = windows(TEXT.train, step_windows(step, len(TEXT.train)))
        by_hand.train_steps(x, y, 1)
    assert bits(streamed) == bits(by_hand)
    assert (streamed.steps, streamed.epoch, streamed.batch) == (4, 0, 0)


def bits(t: nxrs.Trainer) -> dict[str, bytes]:
    """Every tensor of the state as its bytes."""
    return {k: v.tobytes() for k, v in t.state_dict().items()}


def test_the_reference_trains_the_same_windows_to_the_same_bits() -> None:
    t = nxrs.Trainer(layers=LAYERS, **SETTINGS)
    t.fit(TEXT.train, steps=3)
    ref = layers_ref.LayerTrainer(layers=nxrs.layers.to_dicts(LAYERS), shuffle=False, **SETTINGS)
    for step in range(3):
        x, y = windows(TEXT.train, step_windows(step, len(TEXT.train)))
        ref.train_steps(x.astype(np.float32), y, 1)
    for name, value in ref.params().items():
        assert t.state_dict()[name].tobytes() == value.tobytes(), name


def test_estimates_read_their_own_windows_and_change_no_training_window() -> None:
    evaluated = nxrs.Trainer(layers=LAYERS, **SETTINGS)
    history = evaluated.fit(
        TEXT.train, steps=4, validation_data=TEXT.val, eval_every=2, eval_batches=2
    )
    plain = nxrs.Trainer(layers=LAYERS, **SETTINGS)
    plain.fit(TEXT.train, steps=4)
    assert evaluated.state_digest() == plain.state_digest()
    assert history.step == [2, 4]
    # The last estimate is the evaluation of 6 windows of each stream's own draws.
    for part, stream, key in ((0, TEXT.train, "loss"), (1, TEXT.val, "val_loss")):
        draws = general_ref.Stream(9, EVALUATE, part)
        x, y = windows(stream, [draws.below(len(stream) - 8) for _ in range(6)])
        loss, accuracy = plain.evaluate(x, y)
        assert np.float32(history.history[key][-1]) == np.float32(loss)
        assert history.history[key.replace("loss", "accuracy")][-1] == accuracy


def test_a_stream_run_resumes_from_its_run_directory_to_the_same_bits(tmp_path: Path) -> None:
    whole = nxrs.Trainer(layers=LAYERS, **SETTINGS)
    whole.fit(TEXT.train, steps=6)
    first = nxrs.Trainer(layers=LAYERS, **SETTINGS)
    first.fit(TEXT.train, steps=4, checkpoint=tmp_path, every=2)
    again = nxrs.Trainer(layers=LAYERS, **SETTINGS)
    again.fit(TEXT.train, steps=6, checkpoint=tmp_path, every=2)
    assert again.state_digest() == whole.state_digest()
    names = sorted(p.name for p in tmp_path.glob("step-*.nxck"))
    assert names == [f"step-{k:012d}.nxck" for k in (2, 4, 6)]


def test_stream_runs_refuse_what_they_cannot_train() -> None:
    t = nxrs.Trainer(layers=LAYERS, **SETTINGS)
    with pytest.raises(nxrs.ConfigError, match="trains by steps"):
        t.fit(TEXT.train, epochs=2)
    with pytest.raises(nxrs.InputError, match="needs at least 9"):
        t.fit(TEXT.train[:8], steps=1)
    with pytest.raises(nxrs.InputError, match=f"token 3 of the stream is {V}"):
        t.fit(np.array([0, 1, 2, V, *range(10)]), steps=1)
    with pytest.raises(nxrs.ConfigError, match="eval_every"):
        t.fit(np.zeros((4, 8), np.int64), np.zeros((4, 8), np.int64), 1, eval_every=2)
    classifier = nxrs.Trainer(layers=[8, 3])
    with pytest.raises(nxrs.InputError, match="output is a sequence"):
        classifier.fit(TEXT.train, steps=1)
    assert t.steps == 0


# ---------------------------------------------------------------------------------------------
# Generation (section 15.9), the draws recomputed here.


def draw_by_hand(z: np.ndarray, k: int, temperature: float, top_k: int | None, seed: int) -> int:
    """Section 15.9's draw from the logits ``z`` of token ``k``, binary32 step by step."""
    f32 = np.float32
    if temperature == 0:
        return int(np.argmax(z))  # finite logits: the first maximum
    ids = list(range(len(z)))
    if top_k is not None:
        left, chosen = ids, []
        for _ in range(top_k):
            best = 0
            for i in range(1, len(left)):
                if z[left[i]] > z[left[best]]:
                    best = i
            chosen.append(left.pop(best))
        ids = sorted(chosen)
    u = [f32(z[i]) / f32(temperature) for i in ids]
    m = u[0]
    for x in u[1:]:
        if x > m:
            m = x
    w = [layers_ref.gr.Math("ieee").exp(np.array([f32(x - m)], f32))[0] for x in u]
    total = f32(0)
    for x in w:
        total = f32(total + x)
    bits = general_ref.Stream(seed, SAMPLE, k).next_u64() >> 40
    r = f32(f32(bits) * f32(2.0**-24)) * total
    running = f32(0)
    for i, x in zip(ids, w):
        running = f32(running + x)
        if r < running:
            return i
    return ids[-1]


@pytest.mark.parametrize(("temperature", "top_k"), [(0.0, None), (1.0, None), (0.7, 5)])
def test_generation_draws_as_section_15_9_says(temperature: float, top_k: int | None) -> None:
    t = nxrs.Trainer(layers=LAYERS, **SETTINGS)
    t.fit(TEXT.train, steps=5)
    prompt = TEXT.encode("to be")
    got = t.generate(prompt, 12, temperature=temperature, top_k=top_k, seed=4)
    assert got[: len(prompt)].tolist() == prompt.tolist()
    ids = prompt.tolist()
    for k in range(12):
        recent = ids[-8:]
        window = np.zeros((1, 8), np.int64)
        window[0, : len(recent)] = recent
        # The logits: the model's probabilities' logs differ by a constant per position; the
        # reference (written from the text) gives the logits themselves.
        ref = layers_ref.LayerTrainer(layers=nxrs.layers.to_dicts(LAYERS), **SETTINGS)
        ref._set_params({k_: v for k_, v in t.state_dict().items() if k_ in ref.params()})
        z, _ = ref._outputs(window.astype(np.float32))
        ids.append(draw_by_hand(z[0, len(recent) - 1], k, temperature, top_k, 4))
    assert got.tolist() == ids


def test_generation_refuses_bad_input_and_changes_nothing() -> None:
    t = nxrs.Trainer(layers=LAYERS, **SETTINGS)
    before = t.state_digest()
    prompt = TEXT.encode("to")
    for kwargs, message in [
        ({"temperature": -1.0}, "temperature = -1 must be finite and >= 0"),
        ({"temperature": float("nan")}, "temperature = NaN must be finite"),
        ({"top_k": 0}, "top_k = 0 must be at least 1"),
        ({"top_k": V + 1}, rf"top_k = {V + 1} must be in 1\.\.={V}"),
    ]:
        with pytest.raises(nxrs.InputError, match=message):
            t.generate(prompt, 3, **kwargs)
    with pytest.raises(nxrs.InputError, match=f"prompt token 1 is {V}"):
        t.generate(np.array([0, V]), 3)
    with pytest.raises(nxrs.InputError, match="prompt is empty"):
        t.generate(np.zeros(0, np.int64), 3)
    with pytest.raises(nxrs.InputError, match="generate needs a model"):
        nxrs.Trainer(layers=[4, 3]).generate(np.array([1]), 2)
    assert t.state_digest() == before
    # A prompt longer than the context is read by its newest T ids.
    long = TEXT.train[:30]
    assert t.generate(long, 2, temperature=0)[:30].tolist() == long.tolist()


# ---------------------------------------------------------------------------------------------
# The command line: nxrs train on a text file, nxrs sample everywhere the same.


def nxrs_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nxrs", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={**__import__("os").environ, **env},
    )


@pytest.fixture(scope="module")
def text_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    d = tmp_path_factory.mktemp("text")
    (d / "small.txt").write_text("to be, or not to be, that is the question:\n" * 30)
    # A small character model for the text's 16 characters (gpt-char is 0.8M parameters).
    model = nxrs.layers.gpt(16, context=16, layers=1, heads=2, width=16)
    (d / "model.json").write_text(json.dumps(nxrs.layers.to_dicts(model)))
    run = nxrs_cli(*train_args(d))
    assert run.returncode == 0, run.stderr
    assert run.stderr.count("nxrs train: step ") == 2, run.stderr
    return d, json.loads(run.stdout)


def train_args(d: Path) -> list[str]:
    """The nxrs train command line of the run (the same each time: it resumes)."""
    return [
        "train", "--data", str(d / "small.txt"), "--model", str(d / "model.json"),
        "--steps", "6", "--eval-every", "3", "--eval-batches", "1", "--batch-size", "2",
        "--ckpt-dir", str(d / "run"), "--json",
    ]  # fmt: skip


def test_nxrs_train_on_a_text_file_gives_the_summary_and_a_resumable_run(
    text_run: tuple[Path, dict[str, Any]],
) -> None:
    d, summary = text_run
    assert summary["steps"] == 6 and summary["data"].endswith("small.txt")
    for key in ("train_loss", "val_loss", "state_hash", "seconds"):
        assert summary[key] is not None, key
    with nxrs.open(summary["checkpoint"]) as ck:
        assert ck.metadata["vocab"] == "\n ,:abehinoqrstu"
    # The same command again: the run is complete, nothing trains, the same state.
    again = nxrs_cli(*train_args(d))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["state_hash"] == summary["state_hash"]


def test_nxrs_sample_prints_the_same_text_on_every_backend_thread_count_and_path(
    text_run: tuple[Path, dict[str, Any]],
) -> None:
    d, _ = text_run
    args = ["sample", str(d / "run"), "--prompt", "to be", "--tokens", "40", "--seed", "3"]
    texts = set()
    for extra, env in [
        (["--backend", "soft", "--threads", "1"], {}),
        (["--backend", "hw", "--threads", "1"], {}),
        (["--backend", "hw", "--threads", "2"], {}),
        (["--backend", "hw"], {"NXRS_ISA": "portable"}),
        (["--backend", "hw"], {"NXRS_ISA": "avx2"}),
    ]:
        if env.get("NXRS_ISA") == "avx2" and "avx2" not in Path("/proc/cpuinfo").read_text():
            continue
        run = nxrs_cli(*args, *extra, **env)
        assert run.returncode == 0, run.stderr
        texts.add(run.stdout)
    assert len(texts) == 1
    (text,) = texts
    assert text.startswith("to be") and len(text.rstrip("\n")) >= 45


def test_nxrs_sample_refuses_bad_input_in_one_line(
    text_run: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    d, _ = text_run
    for extra, message in [
        (["--prompt", "Z"], "'Z' at position 0 of the text is not in the vocabulary"),
        (["--temperature", "-2"], "temperature = -2 must be finite and >= 0"),
        (["--temperature", "nan"], "temperature = NaN"),
        (["--top-k", "99"], r"top_k = 99 must be in 1..=16"),
    ]:
        run = nxrs_cli("sample", str(d / "run"), *extra)
        assert run.returncode == 1, run.stdout
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], run.stderr
    t = nxrs.Trainer(layers=LAYERS, **SETTINGS)
    t.save(tmp_path / "plain.nxck")
    run = nxrs_cli("sample", str(tmp_path / "plain.nxck"))
    assert run.returncode == 1 and "records no vocabulary" in run.stderr


def test_nxrs_status_of_a_text_run_shows_steps_without_epochs(
    text_run: tuple[Path, dict[str, Any]],
) -> None:
    """A token stream has no epochs: status shows its steps against the plan's and nothing of
    an epoch or batch (a stream run's are always 0)."""
    d, _ = text_run
    out = nxrs_cli("status", str(d / "run"))
    assert out.returncode == 0, out.stderr
    assert "  progress step 6 of 6 (100.0% of the plan)\n" in out.stdout, out.stdout
    assert "epoch" not in out.stdout and "batch 0" not in out.stdout, out.stdout
    assert "step-000000000006.nxck  step 6  valid\n" in out.stdout, out.stdout


def test_nxrs_verify_and_diff_replay_a_text_run(tmp_path: Path) -> None:
    """The run directory of a text run verifies (the text read again by its manifest's data
    source, every segment replayed), and diff replays one checkpoint to another's step."""
    (tmp_path / "small.txt").write_text("to be, or not to be, that is the question:\n" * 30)
    model = nxrs.layers.gpt(16, context=16, layers=1, heads=2, width=16)
    (tmp_path / "model.json").write_text(json.dumps(nxrs.layers.to_dicts(model)))
    run = subprocess.run(
        [sys.executable, "-m", "nxrs", "train", "--data", "small.txt", "--model", "model.json",
         "--steps", "6", "--batch-size", "2", "--ckpt-dir", "run", "--every", "2", "--keep",
         "all", "--json"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    verify = nxrs_cli("verify", str(tmp_path / "run"), "--all", "--json")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    report = json.loads(verify.stdout)
    assert report["ok"] is True, report
    diff = nxrs_cli(
        "diff", str(tmp_path / "run" / "step-000000000002.nxck"),
        str(tmp_path / "run" / "step-000000000006.nxck"), "--data",
        str(tmp_path / "small.txt"), "--json",
    )  # fmt: skip
    assert diff.returncode == 0, diff.stderr
    assert json.loads(diff.stdout)["identical"] is True


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_ray_workers_train_a_stream_to_the_same_bits(ray_cluster: Any, workers: int) -> None:
    local = nxrs.Trainer(layers=LAYERS, **SETTINGS)
    local.fit(TEXT.train, steps=3)
    spread = nxrs.Trainer(layers=LAYERS, **SETTINGS)
    spread.fit(TEXT.train, steps=3, engine="ray", workers=workers)
    assert spread.state_digest() == local.state_digest()


def test_a_text_run_stopped_by_sigterm_resumes_to_the_uninterrupted_bits(tmp_path: Path) -> None:
    """SIGTERM mid-run: the step under way finishes, is saved, exit 143; the same command again
    ends where a run never stopped ends (and with --async-save the same)."""
    import os
    import signal
    import time

    (tmp_path / "small.txt").write_text("to be, or not to be, that is the question:\n" * 30)
    model = nxrs.layers.gpt(16, context=16, layers=1, heads=2, width=16)
    (tmp_path / "model.json").write_text(json.dumps(nxrs.layers.to_dicts(model)))

    def command(run: str, *extra: str) -> list[str]:
        return [sys.executable, "-m", "nxrs", "train", "--data", "small.txt", "--model",
                "model.json", "--steps", "300", "--batch-size", "2", "--ckpt-dir", run,
                "--every", "5", "--json", *extra]  # fmt: skip

    whole = subprocess.run(command("whole"), capture_output=True, text=True, cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    for run, extra in (("stopped", ()), ("stopped-async", ("--async-save",))):
        child = subprocess.Popen(command(run, *extra), cwd=tmp_path, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        deadline = time.monotonic() + 120
        while not list((tmp_path / run).glob("step-*.nxck")) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGTERM)
        _, err = child.communicate(timeout=300)
        if child.returncode == 0:
            pytest.skip("the run finished before the signal (a very fast machine)")
        assert child.returncode == 143, err
        again = subprocess.run(command(run, *extra), capture_output=True, text=True, cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert "resuming" in again.stderr
        summary, reference = json.loads(again.stdout), json.loads(whole.stdout)
        assert summary["state_digest"] == reference["state_digest"], run
