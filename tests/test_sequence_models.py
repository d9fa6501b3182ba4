"""Sequence models through the Python API (docs/TRAINING.md section 15.8): a tiny GPT and a
per-token model train to exactly the independent numpy reference's bits
(``tests/reference/layers_ref.py``, written from the text alone) on both backends, 1 to 3
threads and every vector path this CPU has; a run resumed at any step in a fresh process ends
where the uninterrupted one does; predictions and evaluation are the reference's; bad input is
one clear error that changes nothing."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nxrs
from nxrs.layers import (
    GELU,
    CausalSelfAttention,
    Conv1d,
    Dense,
    Dropout,
    Embedding,
    Flatten,
    Input,
    Layer,
    LayerNorm,
    PositionalEmbedding,
    Residual,
    TiedHead,
    gpt,
)

layers_ref = importlib.import_module("reference.layers_ref")
ROOT = Path(__file__).resolve().parent.parent

#: The issue's tiny GPT (2 layers, 2 heads, width 16, context 8), and a model of every
#: sequence layer's other settings: biases per token, no std (N(0, 1) tables, the run's init
#: for attention), dropout, a context longer than the sequence.
MODELS: dict[str, list[Layer]] = {
    "tiny_gpt": gpt(11, context=8, layers=2, heads=2, width=16),
    "per_token": [
        Input(6),
        Embedding(11, 12),
        Dense(12),
        PositionalEmbedding(9, 12),
        Residual([LayerNorm(), CausalSelfAttention(3)]),
        Dropout(0.25),
        Residual([LayerNorm(bias=False), Dense(24), GELU(), Dense(12, bias=False)]),
        LayerNorm(),
        TiedHead(),
    ],
}

SETTINGS: dict[str, Any] = {
    "optimizer": "adamw",
    "lr": 0.01,
    "beta2": 0.99,
    "weight_decay": 0.1,
    "clip_norm": 1.0,
    "batch_size": 4,
    "seed": 5,
}
STEPS = 3


def tokens(model: list[Layer], n: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Windows of a deterministic token stream and the same windows shifted by one."""
    t = model[0].shape[0]  # type: ignore[attr-defined]
    vocab = model[1].vocab  # type: ignore[attr-defined]
    stream = (np.arange(3 * n + t + 1) * 5 + (np.arange(3 * n + t + 1) ** 2) % 3) % vocab
    x = np.stack([stream[3 * s : 3 * s + t] for s in range(n)])
    y = np.stack([stream[3 * s + 1 : 3 * s + t + 1] for s in range(n)])
    return x.astype(np.int64), y.astype(np.int64)


def reference_run(model: list[Layer]) -> tuple[list[str], Any]:
    """The reference's state hash after each step, and the reference after the steps."""
    ref = layers_ref.LayerTrainer(layers=nxrs.layers.to_dicts(model), **SETTINGS)
    x, y = tokens(model)
    hashes = []
    for _ in range(STEPS):
        ref.train_steps(x.astype(np.float32), y, 1)
        hashes.append(ref.state_hash_hex())
    return hashes, ref


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request: pytest.FixtureRequest) -> tuple[str, list[str], Any]:
    name = request.param
    return name, *reference_run(MODELS[name])


@pytest.mark.parametrize("backend", ["soft", "hw"])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_training_matches_the_reference(
    model: tuple[str, list[str], Any], backend: str, threads: int
) -> None:
    name, expected, _ = model
    t = nxrs.Trainer(layers=MODELS[name], backend=backend, threads=threads, **SETTINGS)
    x, y = tokens(MODELS[name])
    got = []
    for _ in range(STEPS):
        t.train_steps(x, y, 1)
        got.append(f"{t.state_hash():016x}")
    assert got == expected


def test_predictions_and_evaluation_are_the_references(
    model: tuple[str, list[str], Any],
) -> None:
    name, _, ref = model
    t = nxrs.Trainer(layers=MODELS[name], **SETTINGS)
    x, y = tokens(MODELS[name])
    t.train_steps(x, y, STEPS)
    p = t.predict_proba(x)
    assert p.shape == (len(x), x.shape[1], MODELS[name][1].vocab)  # type: ignore[attr-defined]
    want_p = ref.predict_proba(x.astype(np.float32))
    assert np.array_equal(p.view(np.uint32), np.asarray(want_p, np.float32).view(np.uint32))
    predicted = t.predict(x)
    assert predicted.shape == x.shape
    assert np.array_equal(predicted.ravel(), np.asarray(ref.predict(x.astype(np.float32))).ravel())
    loss, accuracy = t.evaluate(x, y)
    ref_loss, ref_accuracy = ref.evaluate(x.astype(np.float32), y)
    assert np.float32(loss).view(np.uint32) == np.float32(ref_loss).view(np.uint32)
    assert accuracy == ref_accuracy


def test_the_state_names_follow_the_layers() -> None:
    t = nxrs.Trainer(layers=MODELS["tiny_gpt"], **SETTINGS)
    names = list(t.state_dict())
    params = names[: names.index("mE1")]
    assert params == [
        "E1", "P2", "gamma3", "Wqkv4", "Wo4", "gamma5", "W6", "W7",
        "gamma8", "Wqkv9", "Wo9", "gamma10", "W11", "W12", "gamma13",
    ]  # fmt: skip
    shapes = {k: v.shape for k, v in t.state_dict().items()}
    assert shapes["E1"] == (11, 16) and shapes["P2"] == (8, 16)
    assert shapes["Wqkv4"] == (48, 16) and shapes["Wo4"] == (16, 16)
    assert shapes["W6"] == (64, 16) and shapes["gamma13"] == (16,)
    # 0.02 and 0.02 / sqrt(4): the drawn tables are normal with about those deviations.
    assert 0.015 < float(np.std(t.state_dict()["W6"])) < 0.025
    assert 0.006 < float(np.std(t.state_dict()["W7"])) < 0.0125


RESUME_SCRIPT = """
    import sys
    sys.path.insert(0, {tests!r})
    import nxrs
    from test_sequence_models import MODELS, SETTINGS, STEPS, tokens
    t = nxrs.Trainer.load({path!r})
    x, y = tokens(MODELS["tiny_gpt"])
    t.train_steps(x, y, STEPS - t.steps)
    print(t.state_digest())
"""


@pytest.mark.parametrize("at", range(STEPS))
def test_a_run_resumed_at_any_step_in_a_fresh_process_ends_the_same(
    tmp_path: Path, at: int
) -> None:
    layers = MODELS["tiny_gpt"]
    x, y = tokens(layers)
    whole = nxrs.Trainer(layers=layers, **SETTINGS)
    whole.train_steps(x, y, STEPS)
    first = nxrs.Trainer(layers=layers, **SETTINGS)
    first.train_steps(x, y, at)
    path = tmp_path / "mid.nxck"
    first.save(path)
    script = RESUME_SCRIPT.format(tests=str(ROOT / "tests"), path=str(path))
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == whole.state_digest()


ISA_SCRIPT = """
    import json
    import sys
    sys.path.insert(0, {tests!r})
    import numpy as np
    import nxrs
    from test_sequence_models import MODELS, SETTINGS, STEPS, tokens, WIDE
    out = {{"isa": nxrs.hardware_isa()}}
    for name, layers in [("tiny_gpt", MODELS["tiny_gpt"]), ("wide", WIDE)]:
        x, y = tokens(layers)
        for backend, threads in [("soft", 1), ("hw", 1), ("hw", 3)]:
            t = nxrs.Trainer(layers=layers, backend=backend, threads=threads, **SETTINGS)
            t.train_steps(x, y, STEPS)
            p = t.predict_proba(x[:3]).view(np.uint32).ravel().tolist()
            out[f"{{name}} {{backend}}{{threads}}"] = [t.state_digest(), p]
    print(json.dumps(out))
"""

#: Widths past the matrix products' tile edges (a head of 20, 3 * 60 = 180 outputs), 21 tokens.
WIDE = gpt(29, context=21, layers=1, heads=3, width=60)


@pytest.mark.parametrize("isa", ["avx512", "avx2", "portable"])
def test_every_vector_path_gives_softf32s_bits(isa: str) -> None:
    test_isa = importlib.import_module("test_isa")
    if not test_isa.GUARDED:
        pytest.skip("no hardware backend on this architecture")
    if not test_isa.has(isa):
        pytest.skip(f"this CPU has no {isa}")
    run = test_isa.child(isa, ISA_SCRIPT.format(tests=str(ROOT / "tests")))
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out.pop("isa") == isa
    for name in ("tiny_gpt", "wide"):
        soft = out[f"{name} soft1"]
        assert out[f"{name} hw1"] == soft, f"{isa}: {name} on hw differs from soft"
        assert out[f"{name} hw3"] == soft, f"{isa}: {name} on 3 threads differs from soft"
    expected, _ = reference_run(MODELS["tiny_gpt"])
    t = nxrs.Trainer(layers=MODELS["tiny_gpt"], backend="soft", **SETTINGS)
    x, y = tokens(MODELS["tiny_gpt"])
    t.train_steps(x, y, STEPS)
    assert f"{t.state_hash():016x}" == expected[-1]
    assert out["tiny_gpt soft1"][0] == t.state_digest()


@settings(max_examples=12, deadline=None)
@given(
    heads=st.integers(1, 3),
    head=st.integers(1, 5),
    tokens_=st.integers(1, 7),
    vocab=st.integers(2, 9),
    layers=st.integers(1, 2),
    seed=st.integers(0, 2**31),
)
def test_random_gpt_shapes_give_softf32s_bits_on_hw(
    heads: int, head: int, tokens_: int, vocab: int, layers: int, seed: int
) -> None:
    model = gpt(vocab, context=tokens_, layers=layers, heads=heads, width=heads * head)
    rng = np.random.default_rng(seed)
    x = rng.integers(0, vocab, (5, tokens_))
    y = rng.integers(0, vocab, (5, tokens_))
    digests = []
    for backend, threads in [("soft", 1), ("hw", 1), ("hw", 3)]:
        t = nxrs.Trainer(layers=model, backend=backend, threads=threads, **SETTINGS)
        t.train_steps(x, y, 2)
        digests.append((t.state_digest(), t.predict_proba(x).view(np.uint32).tobytes()))
    assert digests[1] == digests[0] and digests[2] == digests[0]


# ---------------------------------------------------------------------------------------------
# Bad input: one clear error, and nothing changes.


def test_bad_token_ids_name_the_sample_and_position() -> None:
    t = nxrs.Trainer(layers=MODELS["tiny_gpt"], **SETTINGS)
    x, y = tokens(MODELS["tiny_gpt"])
    before = t.state_digest()
    # A NaN is no finite feature, caught as any model's would be, naming the same cell.
    for value, shown in [
        (11, "token 5 of sample 3 is 11"),
        (-1, "token 5 of sample 3 is -1"),
        (2.5, "token 5 of sample 3 is 2.5"),
        (np.nan, "5 of sample 3 is NaN"),
    ]:
        bad = x.astype(np.float64) if isinstance(value, float) else x.copy()
        bad[3, 5] = value
        for call in (
            lambda b=bad: t.train_steps(b, y, 1),
            lambda b=bad: t.predict(b),
            lambda b=bad: t.evaluate(b, y),
        ):
            with pytest.raises(nxrs.InputError, match=shown):
                call()
    assert t.state_digest() == before


def test_labels_must_be_a_label_per_token() -> None:
    t = nxrs.Trainer(layers=MODELS["tiny_gpt"], **SETTINGS)
    x, y = tokens(MODELS["tiny_gpt"])
    with pytest.raises(nxrs.InputError, match=r"y must have 2 dimension\(s\), got shape \(10,\)"):
        t.train_steps(x, y[:, 0], 1)
    bad = y.copy()
    bad[2, 4] = 11
    with pytest.raises(
        nxrs.InputError, match=r"label 11 of sample 2 is outside 0\.\.11.*position 4"
    ):
        t.train_steps(x, bad, 1)


E4 = [Input(4), Embedding(5, 4)]


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        ([Input(9), Embedding(5, 4), PositionalEmbedding(8, 4), TiedHead()], "than its context 8"),
        (
            [Input(4), Embedding(5, 6), CausalSelfAttention(4), TiedHead()],
            "do not divide the width",
        ),
        ([Input(4), Dense(4), Embedding(5, 4), TiedHead()], "comes directly after Input"),
        ([*E4, Conv1d(2, 1), Flatten(), Dense(2)], "takes channels, not a"),
        ([*E4, Residual([Dense(3)]), TiedHead()], "must keep its input's shape"),
        ([*E4, Dense(3), TiedHead()], "width 3 is not the Embedding's width 4"),
        ([Input(4, 2), Embedding(5, 4), TiedHead()], r"takes \(tokens\) ids"),
        ([*E4, PositionalEmbedding(4, 5), TiedHead()], "width 5 does not match"),
        ([*E4, CausalSelfAttention(2, proj_std=0.1), TiedHead()], "proj_std is given without"),
        ([Input(4), Embedding(2**24 + 1, 1), TiedHead()], "more than 16777216"),
        ([Input(4), Embedding(5, 4, std=-1.0), TiedHead()], "std must be finite and > 0"),
    ],
)
def test_bad_sequence_models_are_config_errors(layers: list[Layer], message: str) -> None:
    with pytest.raises(nxrs.ConfigError, match=message):
        nxrs.Trainer(layers=layers)


def test_attention_biases_and_a_loss_per_token_other_than_cross_entropy_are_refused() -> None:
    with pytest.raises(nxrs.ConfigError, match="bias=True is not supported"):
        CausalSelfAttention(2, bias=True)
    with pytest.raises(nxrs.ConfigError, match="bias=True is not supported"):
        nxrs.layers.from_dict({"type": "CausalSelfAttention", "heads": 2, "bias": True})
    with pytest.raises(nxrs.ConfigError, match="trained with cross_entropy"):
        nxrs.Trainer(layers=MODELS["tiny_gpt"], loss="mse")


def test_a_sequence_model_ending_in_flatten_classifies_samples() -> None:
    layers = [Input(5), Embedding(7, 4), CausalSelfAttention(2), Flatten(), Dense(3)]
    t = nxrs.Trainer(layers=layers, seed=2)
    x = np.arange(40).reshape(8, 5) % 7
    y = np.arange(8) % 3
    t.train_steps(x, y, 2)
    assert t.predict(x).shape == (8,)
    assert t.predict_proba(x).shape == (8, 3)


def test_the_json_form_round_trips_and_omits_unset_parameters() -> None:
    layers = MODELS["tiny_gpt"]
    dicts = nxrs.layers.to_dicts(layers)
    assert dicts[1] == {"type": "Embedding", "vocab": 11, "width": 16, "std": 0.02}
    assert nxrs.layers.from_dicts(dicts) == layers
    t = nxrs.Trainer(layers=layers, **SETTINGS)
    # The configuration shows the binary32 values (0.019999999552965164 for 0.02): the same
    # model again.
    again = nxrs.Trainer(layers=nxrs.layers.from_dicts(t.config["layers"]), **SETTINGS)
    assert again.config_digest() == t.config_digest()
    assert list(t.config["layers"][3]["layers"][1]) == ["type", "heads", "std", "proj_std"]
    assert nxrs.layers.to_dicts([Embedding(3, 2)])[0] == {
        "type": "Embedding",
        "vocab": 3,
        "width": 2,
    }
